// The memory pool (MemoryPool, tensor.h): size classes, reuse of freed
// blocks by class, the alignment blocks get, the byte counts it keeps,
// blocks returned to the device when it goes, zero-size requests, and what
// a device that cannot allocate leaves behind.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shapefn/device.h"
#include "shapefn/tensor.h"
#include "tests/expect_error.h"

namespace shapefn {
namespace {

// Host memory that records every allocation and free; `capacity` bytes at most.
class CountingDevice final : public Device {
 public:
  explicit CountingDevice(size_t capacity = std::numeric_limits<size_t>::max()) : capacity_(capacity) {}
  // Blocks a test left in use go too (leak checkers run these tests).
  ~CountingDevice() override {
    for (const auto& block : live) std::free(block.first);
  }
  std::string name() const override { return "counting"; }
  DLDevice kernel_device() const override { return DLDevice{kDLCPU, 0}; }
  void* Alloc(size_t nbytes, size_t alignment) override {
    if (nbytes > capacity_ - allocated_) Fail(ErrorKind::kMemory, "counting: out of memory");
    void* p = std::aligned_alloc(alignment, nbytes == 0 ? alignment : nbytes);
    allocs.push_back(Block{p, nbytes, alignment});
    allocated_ += nbytes;
    live[p] = nbytes;
    return p;
  }
  void Free(void* ptr) override {
    frees.push_back(ptr);
    allocated_ -= live[ptr];
    live.erase(ptr);
    std::free(ptr);
  }
  double CopyToHost(void*, const void*, size_t) override { return 0; }
  double CopyFromHost(void*, const void*, size_t) override { return 0; }
  void Sync() override {}

  struct Block {
    void* ptr;
    size_t nbytes, alignment;
  };
  std::vector<Block> allocs;
  std::vector<void*> frees;
  std::map<void*, size_t> live;

 private:
  size_t capacity_;
  size_t allocated_ = 0;
};

TEST(MemoryPool, SizeClassesAreFourPerOctave) {
  const std::vector<std::pair<size_t, size_t>> classes = {{0, 256},
                                                          {1, 256},
                                                          {256, 256},
                                                          {257, 320},
                                                          {320, 320},
                                                          {321, 384},
                                                          {448, 448},
                                                          {449, 512},
                                                          {512, 512},
                                                          {513, 640},
                                                          {1000, 1024},
                                                          {1025, 1280},
                                                          {4096, 4096},
                                                          {4097, 5120},
                                                          {5000, 5120},
                                                          {6145, 7168},
                                                          {size_t{1} << 30, size_t{1} << 30},
                                                          {(size_t{1} << 30) + 1, size_t{5} << 28}};
  for (auto [n, want] : classes) EXPECT_EQ(MemoryPool::SizeClass(n), want) << "n = " << n;
}

TEST(MemoryPool, SizeClassesBoundTheWaste) {
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 70000; ++n) sizes.push_back(n);
  for (int bit = 17; bit < 63; ++bit) {
    for (size_t delta : {size_t{0}, size_t{1}, size_t{3} << (bit - 3)}) {
      sizes.push_back((size_t{1} << bit) - delta);
      sizes.push_back((size_t{1} << bit) + delta + 1);
    }
  }
  sizes.push_back(static_cast<size_t>(std::numeric_limits<int64_t>::max()));  // the largest tensor there can be
  size_t previous = 0;
  for (size_t n : sizes) {
    const size_t c = MemoryPool::SizeClass(n);
    ASSERT_GE(c, n) << "n = " << n;
    ASSERT_EQ(c % kKernelBufferAlignment, 0u) << "n = " << n;  // a block of a class is a whole number of lines
    ASSERT_EQ(MemoryPool::SizeClass(c), c) << "n = " << n;     // a class is its own class
    if (n > 256) {
      ASSERT_LT(4 * (c - n), n) << "n = " << n;  // under 25% waste
    }
    if (n <= 70000) {
      ASSERT_GE(c, previous) << "n = " << n;  // monotonic
    }
    previous = c;
  }
}

// The contract (the block size an allocation of n bytes gets) for every
// n, up to SIZE_MAX: the top octave's last classes would wrap past it, and
// Acquire would hand out a 256-byte block for a request of ~2^64 bytes. No
// tensor is that large (CheckedNBytes caps sizes at 2^63 - 1), but Acquire
// is public.
TEST(MemoryPool, SizeClassNeverRoundsDown) {
  for (size_t n : {(size_t{1} << 63) + 1, (size_t{7} << 61) + 1, std::numeric_limits<size_t>::max()}) {
    EXPECT_GE(MemoryPool::SizeClass(n), n) << "n = " << n;
  }
}

TEST(MemoryPool, FreedBlocksAreReusedByClass) {
  auto device = std::make_shared<CountingDevice>();
  MemoryPool pool(device);
  size_t rounded = 0;
  void* a = pool.Acquire(1000, &rounded);
  EXPECT_EQ(rounded, 1024u);
  pool.Release(a, rounded);
  void* b = pool.Acquire(900, &rounded);  // another size, the same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(rounded, 1024u);
  EXPECT_EQ(pool.device_allocations(), 1);
  void* c = pool.Acquire(1000, &rounded);  // the class's block is taken: a new one
  EXPECT_NE(c, b);
  void* d = pool.Acquire(1100, &rounded);  // another class
  EXPECT_EQ(rounded, 1280u);
  EXPECT_EQ(pool.device_allocations(), 3);
  ASSERT_EQ(device->allocs.size(), 3u);
  pool.Release(d, 1280);
  pool.Acquire(1025, &rounded);  // 1280: d's class
  EXPECT_EQ(device->allocs.size(), 3u);
  pool.Release(b, 1024);
  pool.Release(c, 1024);
  pool.Acquire(1024, &rounded);
  pool.Acquire(1024, &rounded);
  EXPECT_EQ(device->allocs.size(), 3u);  // both came back
}

TEST(MemoryPool, BlocksAreWholeClassesAlignedForKernels) {
  auto device = std::make_shared<CountingDevice>();
  MemoryPool pool(device);
  size_t rounded = 0;
  for (size_t n : {1, 100, 257, 4097, 70001}) pool.Acquire(n, &rounded);
  for (const CountingDevice::Block& b : device->allocs) {
    EXPECT_EQ(b.alignment, kKernelBufferAlignment);
    EXPECT_EQ(MemoryPool::SizeClass(b.nbytes), b.nbytes);  // the whole class is allocated
  }
  // Real devices honour it.
  for (const std::shared_ptr<Device>& real : {HostDevice(), MakeSimDevice(SimConfig{})}) {
    SCOPED_TRACE(real->name());
    auto shared = std::make_shared<MemoryPool>(real);
    for (size_t n : {0, 1, 100, 257, 4097, 70001}) {
      void* p = shared->Acquire(n, &rounded);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kKernelBufferAlignment, 0u) << "n = " << n;
      shared->Release(p, rounded);
    }
  }
}

TEST(MemoryPool, CountsBytesInUseAndTheirHighWaterMark) {
  MemoryPool pool(std::make_shared<CountingDevice>());
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  size_t r1 = 0, r2 = 0, r3 = 0;
  void* a = pool.Acquire(1000, &r1);  // 1024
  void* b = pool.Acquire(300, &r2);   // 320
  EXPECT_EQ(pool.bytes_in_use(), 1344u);
  EXPECT_EQ(pool.high_water_bytes(), 1344u);
  pool.Release(a, r1);
  EXPECT_EQ(pool.bytes_in_use(), 320u);
  EXPECT_EQ(pool.high_water_bytes(), 1344u);
  a = pool.Acquire(900, &r1);  // reused, in use again
  EXPECT_EQ(pool.bytes_in_use(), 1344u);
  // A block its owner keeps idle is not in use, and does not raise the mark.
  pool.MarkIdle(r2);
  EXPECT_EQ(pool.bytes_in_use(), 1024u);
  void* c = pool.Acquire(300, &r3);
  EXPECT_EQ(pool.bytes_in_use(), 1344u);
  EXPECT_EQ(pool.high_water_bytes(), 1344u);
  pool.MarkInUse(r2);
  EXPECT_EQ(pool.bytes_in_use(), 1664u);
  EXPECT_EQ(pool.high_water_bytes(), 1664u);
  for (auto [p, r] : {std::pair<void*, size_t>{a, r1}, {b, r2}, {c, r3}}) pool.Release(p, r);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.high_water_bytes(), 1664u);
}

TEST(MemoryPool, DestructionReturnsTheFreeBlocksToTheDevice) {
  auto device = std::make_shared<CountingDevice>();
  void* kept = nullptr;
  std::set<void*> released;
  {
    MemoryPool pool(device);
    size_t rounded = 0;
    for (size_t n : {100, 100, 5000}) released.insert(pool.Acquire(n, &rounded));
    kept = pool.Acquire(100, &rounded);
    for (void* p : released) pool.Release(p, MemoryPool::SizeClass(device->live[p]));
    EXPECT_TRUE(device->frees.empty());  // cached, not freed
  }
  EXPECT_EQ(std::set<void*>(device->frees.begin(), device->frees.end()), released);
  EXPECT_EQ(device->frees.size(), 3u);
  EXPECT_EQ(device->live.count(kept), 1u);  // a block still in use stays its holder's
  device->Free(kept);
}

TEST(MemoryPool, TensorsGiveTheirBlockBackWhenTheyGo) {
  auto device = std::make_shared<CountingDevice>();
  auto pool = std::make_shared<MemoryPool>(device);
  TensorRef t = AllocTensor(pool, {10}, DLDataType{kDLFloat, 32, 1});
  EXPECT_EQ(t->storage->nbytes, 256u);
  EXPECT_EQ(pool->bytes_in_use(), 256u);
  void* data = t->data();
  t.reset();
  EXPECT_EQ(pool->bytes_in_use(), 0u);
  t = AllocTensor(pool, {4, 4}, DLDataType{kDLInt, 32, 1});
  EXPECT_EQ(t->data(), data);
  EXPECT_EQ(pool->device_allocations(), 1);
  // A tensor keeps its pool: the block goes to the device once both are gone.
  pool.reset();
  EXPECT_TRUE(device->frees.empty());
  t.reset();
  EXPECT_EQ(device->frees, std::vector<void*>{data});
}

TEST(MemoryPool, ZeroBytesGetASmallestBlockOfTheirOwn) {
  auto device = std::make_shared<CountingDevice>();
  MemoryPool pool(device);
  size_t r1 = 0, r2 = 0;
  void* a = pool.Acquire(0, &r1);
  void* b = pool.Acquire(0, &r2);
  EXPECT_EQ(r1, 256u);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a, b);  // distinct addresses, as for any size
  EXPECT_EQ(pool.bytes_in_use(), 512u);
  pool.Release(a, r1);
  size_t r3 = 0;
  EXPECT_EQ(pool.Acquire(10, &r3), a);  // the same class as 10 bytes
  TensorRef empty = AllocTensor(std::make_shared<MemoryPool>(device), {0, 3}, DLDataType{kDLFloat, 32, 1});
  EXPECT_NE(empty->data(), nullptr);
  EXPECT_EQ(empty->nbytes(), 0u);
}

TEST(MemoryPool, AFailedAllocationCountsNothing) {
  auto device = std::make_shared<CountingDevice>(4096);
  MemoryPool pool(device);
  size_t rounded = 0;
  EXPECT_SHAPEFN_ERROR(pool.Acquire(5000, &rounded), ErrorKind::kMemory, "counting: out of memory");
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.high_water_bytes(), 0u);
  EXPECT_EQ(pool.device_allocations(), 0);
  EXPECT_NE(pool.Acquire(4096, &rounded), nullptr);  // what fits still does
  EXPECT_EQ(pool.high_water_bytes(), 4096u);

  // The sim device has a fixed arena.
  SimConfig small;
  small.arena_bytes = size_t{1} << 20;
  auto sim = std::make_shared<MemoryPool>(MakeSimDevice(small));
  EXPECT_SHAPEFN_ERROR(AllocTensor(sim, {1 << 20}, DLDataType{kDLFloat, 32, 1}), ErrorKind::kMemory,
                       "sim: out of device memory allocating 4194304 bytes");
  EXPECT_EQ(sim->bytes_in_use(), 0u);
  EXPECT_EQ(AllocTensor(sim, {1 << 10}, DLDataType{kDLFloat, 32, 1})->nbytes(), 4096u);
}

TEST(MemoryPool, ImpossibleTensorsNeverReachThePool) {
  auto device = std::make_shared<CountingDevice>();
  auto pool = std::make_shared<MemoryPool>(device);
  EXPECT_SHAPEFN_ERROR(AllocTensor(pool, {4, -1}, DLDataType{kDLFloat, 32, 1}), ErrorKind::kValue,
                       "negative dimension -1");
  EXPECT_SHAPEFN_ERROR(AllocTensor(pool, {int64_t{1} << 40, int64_t{1} << 30}, DLDataType{kDLFloat, 32, 1}),
                       ErrorKind::kValue,
                       "element count of a float32 tensor of shape [1099511627776, 1073741824] "
                       "overflows int64");
  EXPECT_SHAPEFN_ERROR(AllocTensor(pool, {int64_t{1} << 62}, DLDataType{kDLFloat, 32, 1}), ErrorKind::kValue,
                       "size in bytes of a float32 tensor of shape [4611686018427387904] overflows int64");
  EXPECT_TRUE(device->allocs.empty());
  EXPECT_EQ(pool->bytes_in_use(), 0u);
}

// Each thread holds at most one block at a time, so the device never gives
// more blocks than there are threads, and all come back.
TEST(MemoryPool, ThreadsShareThePool) {
  auto pool = std::make_shared<MemoryPool>(HostDevice());
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool] {
      for (int i = 0; i < 2000; ++i) {
        size_t rounded = 0;
        void* p = pool->Acquire(500 + i % 12, &rounded);  // one class: 512
        static_cast<volatile char*>(p)[0] = 1;
        pool->Release(p, rounded);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(pool->bytes_in_use(), 0u);
  EXPECT_LE(pool->device_allocations(), kThreads);
  EXPECT_GE(pool->device_allocations(), 1);
  EXPECT_LE(pool->high_water_bytes(), kThreads * 512u);
}

}  // namespace
}  // namespace shapefn
