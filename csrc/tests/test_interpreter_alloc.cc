// Instruction family: allocation — alloc_storage, alloc_tensor,
// tensor_in_storage, view — on the host and on sim: where results land, the
// bytes they share, the allocations counter, their disassembly, the errors of
// sizes that do not fit and the verifier's refusals. The family has no Python
// half.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

const DLDataType kI16{kDLInt, 16, 1};

TEST(InterpreterAlloc, AllocTensorPlacesShapeAndDtype) {
  for (bool on_sim : {false, true}) {
    for (int slot : {kHostSlot, kExecutionSlot}) {
      const std::string device = on_sim && slot == kExecutionSlot ? "sim" : "host";
      SCOPED_TRACE((on_sim ? "sim, slot " : "host, slot ") + std::to_string(slot));
      Code code;
      code.LoadShape({1, List{2, 3}}).AllocTensor({2, slot, 1, EncodeDType(kI16)}).Ret({2});
      Outcome run = RunMain(Main(code, 3), {Iota({1})}, on_sim ? Sim() : HostDevice());
      EXPECT_EQ(Show(run.result), "int16[2, 3]@" + device);
      // Kernels assume aligned buffers (tensor.h).
      EXPECT_EQ(reinterpret_cast<uintptr_t>(run.result.tensor->data()) % kKernelBufferAlignment, 0u);
      EXPECT_EQ(run.counters.allocations, on_sim ? 2 : 1);  // sim: the argument's upload too
    }
  }
  // dtype words: code | bits << 8 | lanes << 16.
  const int64_t int16 = 0 | 16 << 8 | 1 << 16;
  EXPECT_EQ(EncodeDType(kI16), int16);
  for (int slot : {kHostSlot, kExecutionSlot}) {
    const std::string text =
        Executable(Main(Code().LoadShape({1, List{2}}).AllocTensor({2, slot, 1, int16}).Ret({2}), 3)).Disassemble(true);
    const std::string name = slot == kHostSlot ? "host" : "device";
    EXPECT_NE(text.find("alloc_tensor dst=%2, device=@" + name + ", shape=%1, dtype=dtype:69632"), std::string::npos)
        << text;
  }
}

TEST(InterpreterAlloc, TensorsInOneStorageShareItsBytes) {
  Code code;
  code.LoadInt({1, 64})
      .AllocStorage({2, kHostSlot, 1})
      .LoadInt({3, 0})
      .LoadShape({4, List{4}})
      .TensorInStorage({5, 2, 3, 4, EncodeDType(kF32)})
      .LoadInt({6, 32})
      .LoadShape({7, List{2, 2}})
      .TensorInStorage({8, 2, 6, 7, EncodeDType(kI32)})
      .LoadShape({9, List{16}})
      .View({10, 2, 9})
      .MakeTuple({11, List{2, 5, 8, 10}})
      .Ret({11});
  Outcome run = RunMain(Main(code, 12), {Iota({1})});
  EXPECT_EQ(Show(run.result), "(uint8[64]@host, float32[4]@host, int32[2, 2]@host, uint8[16]@host)");
  const char* storage = static_cast<const char*>(Field(run.result, 0).tensor->data());
  EXPECT_EQ(Field(run.result, 1).tensor->data(), storage);
  EXPECT_EQ(Field(run.result, 2).tensor->data(), storage + 32);
  EXPECT_EQ(Field(run.result, 3).tensor->data(), storage);
  EXPECT_EQ(Field(run.result, 2).tensor->storage, Field(run.result, 0).tensor->storage);
  EXPECT_EQ(run.counters.allocations, 1);  // tensors in a storage and views allocate nothing
}

TEST(InterpreterAlloc, TensorInStorageOfATensorInStorageAddsTheOffsets) {
  Code code;
  code.LoadInt({1, 64})
      .AllocStorage({2, kExecutionSlot, 1})
      .LoadInt({3, 16})
      .LoadShape({4, List{32}})
      .TensorInStorage({5, 2, 3, 4, EncodeDType(DLDataType{kDLUInt, 8, 1})})  // bytes 16..48
      .LoadShape({6, List{2}})
      .TensorInStorage({7, 5, 3, 6, EncodeDType(kI64)})  // bytes 32..48
      .Ret({7});
  Outcome run = RunMain(Main(code, 8), {Iota({1})}, Sim());
  EXPECT_EQ(run.result.tensor->byte_offset, 32u);
  // 16 bytes at 40 do not fit the inner 32 bytes, though they fit the storage.
  Code past_inner;
  past_inner.LoadInt({1, 64})
      .AllocStorage({2, kHostSlot, 1})
      .LoadInt({3, 16})
      .LoadShape({4, List{32}})
      .TensorInStorage({5, 2, 3, 4, EncodeDType(DLDataType{kDLUInt, 8, 1})})
      .LoadInt({6, 24})
      .LoadShape({7, List{2}})
      .TensorInStorage({8, 5, 6, 7, EncodeDType(kI64)})
      .Ret({8});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(past_inner, 9), {Iota({1})}), ErrorKind::kValue,
                       "tensor_in_storage: 16 bytes at offset 24 do not fit a storage of 32 bytes");
}

TEST(InterpreterAlloc, ViewReinterpretsAPrefix) {
  Code code;
  code.LoadShape({1, List{4}}).View({2, 0, 1}).Ret({2});
  Value x = Iota({2, 3});
  Outcome run = RunMain(Main(code, 3, {Param("x", kF32, {2, 3})}), {x});
  EXPECT_EQ(Contents<float>(run.result), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(run.result.tensor->data(), x.tensor->data());
  EXPECT_EQ(run.counters.allocations, 0);
}

// main(x: float32[1]) running `code`, which fails.
void ExpectFailure(const Code& code, int64_t num_registers, ErrorKind kind, const std::string& message) {
  EXPECT_SHAPEFN_ERROR(RunMain(Main(code, num_registers, {Param("x", kF32, {1})}), {Iota({1})}), kind, message);
}

TEST(InterpreterAlloc, SizesThatDoNotFit) {
  ExpectFailure(Code().LoadInt({1, -1}).AllocStorage({2, kHostSlot, 1}).Ret({2}), 3, ErrorKind::kValue,
                "alloc_storage of negative size -1");
  Code offset_past_end;
  offset_past_end.LoadInt({1, 8})
      .AllocStorage({2, kHostSlot, 1})
      .LoadInt({3, 4})
      .LoadShape({4, List{2}})
      .TensorInStorage({5, 2, 3, 4, EncodeDType(kF32)})
      .Ret({5});
  ExpectFailure(offset_past_end, 6, ErrorKind::kValue, "tensor_in_storage: 8 bytes at offset 4 do not fit");
  Code negative_offset;
  negative_offset.LoadInt({1, 8})
      .AllocStorage({2, kHostSlot, 1})
      .LoadInt({3, -4})
      .LoadShape({4, List{1}})
      .TensorInStorage({5, 2, 3, 4, EncodeDType(kF32)})
      .Ret({5});
  ExpectFailure(negative_offset, 6, ErrorKind::kValue, "4 bytes at offset -4 do not fit");
  ExpectFailure(Code().LoadShape({1, List{2}}).View({2, 0, 1}).Ret({2}), 3, ErrorKind::kValue,
                "view: the new shape needs more bytes than the tensor has");
  ExpectFailure(Code().LoadShape({1, List{2, -3}}).AllocTensor({2, kHostSlot, 1, EncodeDType(kF32)}).Ret({2}), 3,
                ErrorKind::kValue, "negative dimension -3 in a float32 tensor of shape [2, -3]");
  ExpectFailure(
      Code().LoadShape({1, List{int64_t{1} << 62, 4}}).AllocTensor({2, kExecutionSlot, 1, EncodeDType(kF32)}).Ret({2}),
      3, ErrorKind::kValue, "overflows int64");
}

TEST(InterpreterAlloc, OperandsOfTheWrongKind) {
  ExpectFailure(Code().LoadInt({1, 3}).AllocTensor({2, kHostSlot, 1, EncodeDType(kF32)}).Ret({2}), 3, ErrorKind::kType,
                "alloc_tensor expects a shape, got int");
  ExpectFailure(Code().LoadShape({1, List{8}}).AllocStorage({2, kHostSlot, 1}).Ret({2}), 3, ErrorKind::kType,
                "alloc_storage expects an int, got shape");
  ExpectFailure(Code().LoadInt({1, 0}).LoadShape({2, List{1}}).View({3, 1, 2}).Ret({3}), 4, ErrorKind::kType,
                "view expects a tensor, got int");
}

TEST(InterpreterAlloc, MoreThanTheDeviceHasIsARuntimeError) {
  SimConfig small;
  small.arena_bytes = size_t{1} << 20;
  Code code;
  code.LoadShape({1, List{1 << 20}}).AllocTensor({2, kExecutionSlot, 1, EncodeDType(kF32)}).Ret({2});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(code, 3), {Iota({1})}, MakeSimDevice(small)), ErrorKind::kMemory,
                       "sim: out of device memory");
}

// fail_*: what the verifier refuses.
TEST(InterpreterAlloc, VerifierRefusals) {
  EXPECT_REJECTED(Main(Code().LoadShape({1, List{1}}).AllocTensor({2, 2, 1, EncodeDType(kF32)}).Ret({2}), 3),
                  "alloc_tensor refers to device slot #2 of 2 (operand 'device')");
  EXPECT_REJECTED(Main(Code().LoadInt({1, 1}).AllocStorage({2, -1, 1}).Ret({2}), 3),
                  "alloc_storage refers to device slot #-1 of 2 (operand 'device')");
  const int64_t f7 = EncodeDType(DLDataType{kDLFloat, 7, 1});
  EXPECT_REJECTED(Main(Code().LoadShape({1, List{1}}).AllocTensor({2, 0, 1, f7}).Ret({2}), 3),
                  "invalid dtype code " + std::to_string(f7) + " (operand 'dtype')");
  const int64_t vector = EncodeDType(DLDataType{kDLFloat, 32, 4});
  EXPECT_REJECTED(Main(Code().LoadShape({1, List{1}}).AllocTensor({2, 0, 1, vector}).Ret({2}), 3),
                  "invalid dtype code " + std::to_string(vector) + " (operand 'dtype')");
  EXPECT_REJECTED(Main(Code().LoadInt({1, 0}).TensorInStorage({2, 0, 1, 3, EncodeDType(kF32)}).Ret({2}), 3),
                  "tensor_in_storage uses register %3 of 3 (operand 'shape')");
}

}  // namespace
}  // namespace shapefn::bytecode
