// The OpenCL runtime's address map (device/opencl/opencl_runtime.h): each
// allocation gets a range of device addresses the host cannot dereference;
// an address resolves to its buffer and offset (up to and including the end
// address), copies and kernel arguments go through that, a kernel argument
// inside an allocation becomes a sub-buffer only at offsets the device
// aligns, and freed addresses no longer resolve. The map lives inside the
// runtime with the buffers it names, so these tests need an OpenCL device
// (PoCL's CPU device will do) and skip, saying why, without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/opencl/opencl_runtime.h"
#include "shapefn/opencl.h"
#include "tests/bytecode.h"

namespace shapefn::opencl {
namespace {

class OpenCLAddressMap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!rt().available()) GTEST_SKIP() << "no OpenCL device: " << rt().unavailable_reason();
  }
  void TearDown() override {
    for (void* p : allocated_) rt().Free(p);
  }
  static Runtime& rt() { return Runtime::Global(); }
  // An allocation on device 0, freed when the test ends.
  char* Alloc(size_t nbytes, size_t alignment = 64) {
    void* p = rt().Alloc(0, nbytes, alignment);
    allocated_.push_back(p);
    return static_cast<char*>(p);
  }
  static size_t SubBufferAlignment() { return static_cast<size_t>(rt().info(0).sub_buffer_alignment); }

 private:
  std::vector<void*> allocated_;
};

TEST_F(OpenCLAddressMap, AddressesAreOutsideTheHostsAddressSpace) {
  const int64_t before = rt().counts(0).allocations;
  for (size_t alignment : {size_t{1}, size_t{64}, size_t{1} << 16}) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(Alloc(100, alignment));
    EXPECT_EQ(a >> 62, 1u) << "bit 62 set, bit 63 clear: non-canonical on x86-64 and aarch64";
    EXPECT_EQ(a % 4096, 0u);
    EXPECT_EQ(a % alignment, 0u);
  }
  EXPECT_EQ(rt().counts(0).allocations, before + 3);
}

TEST_F(OpenCLAddressMap, AnAddressResolvesToItsBufferAndOffset) {
  char* a = Alloc(1000);
  const Region start = rt().Resolve(a);
  ASSERT_NE(start.mem, nullptr);
  EXPECT_EQ(start.offset, 0u);
  EXPECT_EQ(start.available, 1000u);
  EXPECT_EQ(start.device, 0);
  const Region inside = rt().Resolve(a + 123);
  EXPECT_EQ(inside.mem, start.mem);
  EXPECT_EQ(inside.offset, 123u);
  EXPECT_EQ(inside.available, 877u);
  // The end address is the allocation's (an empty tensor placed last).
  const Region end = rt().Resolve(a + 1000);
  EXPECT_EQ(end.mem, start.mem);
  EXPECT_EQ(end.available, 0u);
  for (const char* outside : {a + 1001, a - 1, a + 4096}) {
    EXPECT_SHAPEFN_ERROR(rt().Resolve(outside), ErrorKind::kValue,
                         "is not OpenCL device memory allocated by shapefn's OpenCL runtime");
  }
  int on_the_host = 0;
  EXPECT_SHAPEFN_ERROR(rt().Resolve(&on_the_host), ErrorKind::kValue, "is not OpenCL device memory");
}

TEST_F(OpenCLAddressMap, AllocationsNeverShareAnAddress) {
  char* a = Alloc(4096);  // a whole granule: the next starts past a gap
  char* b = Alloc(1);
  char* c = Alloc(0);  // one byte
  EXPECT_GT(b, a + 4096);
  EXPECT_GT(c, b + 1);
  EXPECT_EQ(rt().Resolve(a + 4096).mem, rt().Resolve(a).mem);
  EXPECT_NE(rt().Resolve(b).mem, rt().Resolve(a).mem);
  EXPECT_EQ(rt().Resolve(c).available, 1u);
  EXPECT_NE(rt().Resolve(c).mem, rt().Resolve(b).mem);
}

TEST_F(OpenCLAddressMap, FreedAddressesNoLongerResolve) {
  char* a = static_cast<char*>(rt().Alloc(0, 256, 64));
  char* b = Alloc(256);
  rt().Free(b + 8);  // not an allocation's start: nothing is freed
  EXPECT_EQ(rt().Resolve(b + 8).offset, 8u);
  rt().Free(a);
  EXPECT_SHAPEFN_ERROR(rt().Resolve(a), ErrorKind::kValue, "is not OpenCL device memory");
  EXPECT_SHAPEFN_ERROR(rt().Resolve(a + 100), ErrorKind::kValue, "is not OpenCL device memory");
  rt().Free(a);  // twice: nothing left to free
  rt().Free(nullptr);
  EXPECT_EQ(rt().Resolve(b).available, 256u);
}

TEST_F(OpenCLAddressMap, CopiesGoToTheOffsetTheyName) {
  char* a = Alloc(1000);
  std::vector<uint8_t> zeros(1000, 0), pattern(50);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i + 1);
  rt().Write(a, zeros.data(), zeros.size());
  rt().Write(a + 100, pattern.data(), pattern.size());
  std::vector<uint8_t> back(1000, 0xff);
  rt().Read(back.data(), a, back.size());
  rt().Sync(0);
  std::vector<uint8_t> want = zeros;
  std::copy(pattern.begin(), pattern.end(), want.begin() + 100);
  EXPECT_EQ(back, want);
  // Within the device, between offsets of two allocations.
  char* b = Alloc(64);
  rt().CopyWithin(b + 8, a + 100, 50);
  std::vector<uint8_t> moved(50);
  rt().Read(moved.data(), b + 8, moved.size());
  rt().Sync(0);
  EXPECT_EQ(moved, pattern);
  EXPECT_SHAPEFN_ERROR(rt().Write(a + 990, pattern.data(), 20), ErrorKind::kValue,
                       "a copy to the device of 20 bytes runs past the end of opencl:0 memory (10 bytes from that "
                       "address)");
  EXPECT_SHAPEFN_ERROR(rt().Read(back.data(), a + 1000, 1), ErrorKind::kValue,
                       "a copy to the host of 1 bytes runs past the end of opencl:0 memory (0 bytes");
}

TEST_F(OpenCLAddressMap, KernelArgumentsInsideAnAllocationAreSubBuffers) {
  const size_t align = SubBufferAlignment();
  ASSERT_GT(align, 1u);
  char* a = Alloc(4 * align);
  const cl_mem whole = rt().Resolve(a).mem;
  EXPECT_EQ(rt().KernelArgument(a), whole);
  EXPECT_EQ(rt().KernelArgument(a + 4 * align), whole);  // at the end nothing is read
  const cl_mem sub = rt().KernelArgument(a + align);
  EXPECT_NE(sub, whole);
  EXPECT_EQ(rt().KernelArgument(a + align), sub);  // made once per offset
  EXPECT_NE(rt().KernelArgument(a + 2 * align), sub);
  // The sub-buffer starts at the offset: reading it from 0 reads the allocation from there.
  std::vector<uint8_t> bytes(4 * align);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  rt().Write(a, bytes.data(), bytes.size());
  rt().Sync(0);
  std::vector<uint8_t> read(align);
  ASSERT_EQ(rt().api().clEnqueueReadBuffer(rt().queue(0), sub, CL_TRUE, 0, align, read.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(read, std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(align),
                                       bytes.begin() + static_cast<std::ptrdiff_t>(2 * align)));
}

TEST_F(OpenCLAddressMap, MisalignedKernelArgumentsAreRefused) {
  const size_t align = SubBufferAlignment();
  char* a = Alloc(4 * align);
  for (size_t offset : {size_t{1}, align / 2, align + 4}) {
    EXPECT_SHAPEFN_ERROR(rt().KernelArgument(a + offset), ErrorKind::kValue,
                         "a kernel argument starts " + std::to_string(offset) +
                             " bytes into its buffer; OpenCL passes a buffer from an offset only at multiples of " +
                             std::to_string(align) + " bytes on opencl:0 (CL_DEVICE_MEM_BASE_ADDR_ALIGN)");
  }
  int on_the_host = 0;
  EXPECT_SHAPEFN_ERROR(rt().KernelArgument(&on_the_host), ErrorKind::kValue,
                       "is not OpenCL device memory allocated by shapefn's OpenCL runtime");
}

TEST_F(OpenCLAddressMap, OneBufferIsLimitedByTheDevice) {
  const int64_t limit = rt().info(0).max_alloc_bytes;
  if (limit <= 0) GTEST_SKIP() << "the device reports no CL_DEVICE_MAX_MEM_ALLOC_SIZE";
  const int64_t before = rt().counts(0).allocations;
  EXPECT_SHAPEFN_ERROR(rt().Alloc(0, static_cast<size_t>(limit) + 1, 64), ErrorKind::kMemory,
                       "the device's limit (CL_DEVICE_MAX_MEM_ALLOC_SIZE) is " + std::to_string(limit) + " bytes");
  EXPECT_EQ(rt().counts(0).allocations, before);
  EXPECT_SHAPEFN_ERROR(rt().info(rt().num_devices()), ErrorKind::kValue, "no OpenCL device opencl:");
}

// The VM places a tensor inside a storage only where the device can pass
// it to a kernel: tensor_in_storage on OpenCL refuses other offsets.
TEST_F(OpenCLAddressMap, TensorInStorageKeepsToTheDevicesAlignment) {
  using namespace bytecode;  // NOLINT(build/namespaces): the interpreter tests' helpers
  std::shared_ptr<Device> device = MakeOpenCLDevice("opencl");
  const size_t align = SubBufferAlignment();
  EXPECT_EQ(device->tensor_offset_alignment(), align);
  for (size_t offset : {align, size_t{4}}) {
    Code code;
    code.LoadInt({1, static_cast<int64_t>(4 * align)})
        .AllocStorage({2, kExecutionSlot, 1})
        .LoadInt({3, static_cast<int64_t>(offset)})
        .LoadShape({4, List{2}})
        .TensorInStorage({5, 2, 3, 4, EncodeDType(kF32)})
        .MakeTuple({6, List{2, 5}})
        .Ret({6});
    if (offset % align != 0) {
      EXPECT_SHAPEFN_ERROR(RunMain(Main(code, 7), {Iota({1})}, device), ErrorKind::kValue,
                           "tensor_in_storage: offset 4 on device 'opencl:0', which places tensors at multiples of " +
                               std::to_string(align) + " bytes");
      continue;
    }
    Outcome run = RunMain(Main(code, 7), {Iota({1})}, device);
    EXPECT_EQ(Show(run.result), "(uint8[" + std::to_string(4 * align) + "]@opencl:0, float32[2]@opencl:0)");
    // Device addresses add like pointers; the tensor resolves into the storage's buffer.
    const char* storage = static_cast<const char*>(Field(run.result, 0).tensor->data());
    const void* tensor = Field(run.result, 1).tensor->data();
    EXPECT_EQ(tensor, storage + align);
    EXPECT_EQ(rt().Resolve(tensor).mem, rt().Resolve(storage).mem);
    EXPECT_EQ(rt().Resolve(tensor).offset, rt().Resolve(storage).offset + align);
  }
}

}  // namespace
}  // namespace shapefn::opencl
