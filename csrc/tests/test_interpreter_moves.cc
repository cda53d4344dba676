// Instruction family: moving values between registers — move, load_int,
// load_const, load_shape, kill, make_tuple, get_item, copy — run on the VM
// (host and sim), disassembled by operand name, and the verifier's refusals
// naming the operand. What only Python shows of them (an emptied register
// as None, the builder's refusals of operands it cannot encode):
// tests/test_bytecode_moves.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

TEST(InterpreterMoves, LoadsAndMovesFillRegisters) {
  Code code;
  code.LoadInt({1, 7}).Move({2, 1}).LoadShape({3, List{2, 0, 5}}).MakeTuple({4, List{2, 3, 1}}).Ret({4});
  Outcome run = RunMain(Main(code, 5), {Iota({3})});
  EXPECT_EQ(Show(run.result), "(7, [2, 0, 5], 7)");
  EXPECT_EQ(run.counters.instructions, 5);
  EXPECT_EQ(run.counters.allocations, 0);
  const std::string text = Executable(Main(code, 5)).Disassemble(true);
  EXPECT_NE(text.find("  0: load_int dst=%1, value=7\n"
                      "  1: move dst=%2, src=%1\n"
                      "  2: load_shape dst=%3, dims=[2, 0, 5]\n"
                      "  3: make_tuple dst=%4, fields=[%2, %3, %1]\n"
                      "  4: ret value=%4\n"),
            std::string::npos)
      << text;
}

TEST(InterpreterMoves, MoveOverwritesItsDestination) {
  Code code;
  code.LoadInt({1, 1}).LoadInt({2, 2}).Move({1, 2}).Ret({1});
  EXPECT_EQ(Show(RunMain(Main(code, 3), {Iota({1})}).result), "2");
}

TEST(InterpreterMoves, LoadIntTakesAnyInt64) {
  Code code;
  code.LoadInt({1, INT64_MIN}).LoadInt({2, INT64_MAX}).MakeTuple({3, List{1, 2}}).Ret({3});
  EXPECT_EQ(Show(RunMain(Main(code, 4), {Iota({1})}).result),
            "(" + std::to_string(INT64_MIN) + ", " + std::to_string(INT64_MAX) + ")");
}

TEST(InterpreterMoves, LoadConstGivesTheConstantOnItsDevice) {
  for (bool on_sim : {false, true}) {
    SCOPED_TRACE(on_sim ? "sim" : "host");
    ExecutableParts parts = Main(Code().LoadConst({1, 0}).LoadConst({2, 1}).MakeTuple({3, List{1, 2, 1}}).Ret({3}), 4);
    for (int slot : {kExecutionSlot, kHostSlot}) {
      ConstantDef c;
      c.dtype = kI32;
      c.shape = {2, 3};
      c.device_slot = slot;
      const std::vector<int32_t> values = {0, 1, 2, 3, 4, 5};
      c.bytes.resize(values.size() * sizeof(int32_t));
      std::memcpy(c.bytes.data(), values.data(), c.bytes.size());
      parts.constants.push_back(c);
    }
    std::unique_ptr<VirtualMachine> vm = MakeVM(parts, on_sim ? Sim() : HostDevice());
    Value result = vm->Invoke("main", {Iota({1})});
    const std::string device = on_sim ? "sim" : "host";
    EXPECT_EQ(Show(result), "(int32[2, 3]@" + device + ", int32[2, 3]@host, int32[2, 3]@" + device + ")");
    EXPECT_EQ(Contents<int32_t>(Field(result, 0)), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(Contents<int32_t>(Field(result, 1)), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    // A constant is uploaded once, when the VM is made; each load shares it.
    EXPECT_EQ(Field(result, 0).tensor->data(), Field(result, 2).tensor->data());
    EXPECT_EQ(vm->constant_counters().h2d_bytes, on_sim ? 24 : 0);
    EXPECT_EQ(vm->counters().h2d_bytes, on_sim ? 4 : 0);  // the argument only
    EXPECT_EQ(vm->counters().allocations, on_sim ? 1 : 0);
  }
}

// Without the kill the second tensor needs a block of its own; with it, it
// takes the killed one (the pool's high-water mark tells them apart).
TEST(InterpreterMoves, KillEmptiesARegisterAndItsTensorIsReused) {
  for (bool kill : {false, true}) {
    SCOPED_TRACE(kill ? "with kill" : "without kill");
    Code code;
    code.ShapeOf({1, 0}).AllocTensor({2, kExecutionSlot, 1, EncodeDType(kF32)});
    if (kill) code.Kill({2});
    code.AllocTensor({3, kExecutionSlot, 1, EncodeDType(kF32)}).MakeTuple({4, List{2, 3}}).Ret({4});
    std::unique_ptr<VirtualMachine> vm = MakeVM(Main(code, 5), Sim());
    Value result = vm->Invoke("main", {Iota({4})});
    EXPECT_EQ(Show(result), kill ? "(empty, float32[4]@sim)" : "(float32[4]@sim, float32[4]@sim)");
    // The argument's upload and the two tensors, each one smallest block.
    const size_t block = MemoryPool::SizeClass(16);
    EXPECT_EQ(vm->pool_high_water_bytes(kExecutionSlot), (kill ? 2 : 3) * block);
    const std::string text = Executable(Main(code, 5)).Disassemble(true);
    EXPECT_EQ(text.find("kill reg=%2") != std::string::npos, kill) << text;
  }
}

TEST(InterpreterMoves, KillOfAnIntEmptiesItsRegister) {
  Code code;
  code.LoadInt({1, 3}).Kill({1}).MakeTuple({2, List{1}}).Ret({2});
  EXPECT_EQ(Show(RunMain(Main(code, 3), {Iota({1})}).result), "(empty)");
}

TEST(InterpreterMoves, TuplesNestAndGetItemReadsFields) {
  Code code;
  code.LoadInt({1, 1})
      .MakeTuple({2, List{1, 0}})  // (1, x)
      .LoadInt({3, 2})
      .MakeTuple({4, List{2, 3}})  // ((1, x), 2)
      .GetItem({5, 4, 0})
      .GetItem({6, 5, 1})
      .GetItem({7, 4, 1})
      .MakeTuple({8, List{6, 7}})
      .Ret({8});
  Value x = Iota({3});
  Value result = RunMain(Main(code, 9), {x}).result;
  EXPECT_EQ(Show(result), "(float32[3]@host, 2)");
  EXPECT_EQ(Field(result, 0).tensor, x.tensor);  // the argument itself, not a copy
}

TEST(InterpreterMoves, GetItemErrors) {
  Code out_of_range;
  out_of_range.LoadInt({1, 1}).MakeTuple({2, List{1}}).GetItem({3, 2, 3}).Ret({3});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(out_of_range, 4), {Iota({1})}), ErrorKind::kIndex,
                       "get_item: index 3 out of range for a tuple of 1");
  Code not_a_tuple;
  not_a_tuple.LoadInt({1, 1}).GetItem({2, 1, 0}).Ret({2});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(not_a_tuple, 3), {Iota({1})}), ErrorKind::kType,
                       "get_item expects a tuple, got int");
  EXPECT_REJECTED(Main(Code().MakeTuple({1, List{}}).GetItem({2, 1, -1}).Ret({2}), 3),
                  "negative tuple index (operand 'index')");
}

TEST(InterpreterMoves, CopyCrossesTheBoundaryAndIsCounted) {
  Code code;
  code.Copy({1, 0, kExecutionSlot}).Copy({2, 1, kHostSlot}).MakeTuple({3, List{1, 2}}).Ret({3});
  Outcome run = RunMain(Main(code, 4, {Param("x", kF32, {kN}, kHostSlot)}), {Iota({5})}, Sim());
  EXPECT_EQ(Show(run.result), "(float32[5]@sim, float32[5]@host)");
  EXPECT_EQ(Contents<float>(Field(run.result, 1)), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(run.counters.h2d_bytes, 20);
  EXPECT_EQ(run.counters.d2h_bytes, 20);
  EXPECT_EQ(run.counters.syncs, 1);  // before the host copy may be read
  const std::string text = Executable(Main(code, 4)).Disassemble(true);
  EXPECT_NE(text.find("0: copy dst=%1, src=%0, device=@device"), std::string::npos) << text;
  EXPECT_NE(text.find("1: copy dst=%2, src=%1, device=@host"), std::string::npos) << text;
}

TEST(InterpreterMoves, CopyToTheDeviceATensorIsOnIsNoCopy) {
  Code code;
  code.Copy({1, 0, kExecutionSlot}).Ret({1});
  Value x = Iota({5});
  Outcome run = RunMain(Main(code, 2), {x});  // on the host, both slots are the host
  EXPECT_EQ(run.result.tensor, x.tensor);
  EXPECT_EQ(run.counters.allocations, 0);
}

// fail_*: what the verifier refuses, naming the operand.
TEST(InterpreterMoves, VerifierNamesTheOperand) {
  EXPECT_REJECTED(Main(Code().Move({9, 0}).Ret({0}), 2), "move uses register %9 of 2 (operand 'dst')");
  EXPECT_REJECTED(Main(Code().Move({1, 7}).Ret({0}), 2), "move uses register %7 of 2 (operand 'src')");
  EXPECT_REJECTED(Main(Code().LoadInt({-1, 0}).Ret({0}), 2), "load_int uses register %-1 of 2 (operand 'dst')");
  EXPECT_REJECTED(Main(Code().MakeTuple({1, List{0, 5}}).Ret({0}), 2),
                  "make_tuple uses register %5 of 2 (operand 'fields')");
  EXPECT_REJECTED(Main(Code().LoadConst({1, 3}).Ret({0}), 2),
                  "load_const refers to constant #3 of 0 (operand 'constant')");
  EXPECT_REJECTED(Main(Code().Copy({1, 0, 4}).Ret({0}), 2), "copy refers to device slot #4 of 2 (operand 'device')");
  EXPECT_REJECTED(Main(Code().Kill({2}).Ret({0}), 2), "kill uses register %2 of 2 (operand 'reg')");
  EXPECT_REJECTED(Main(Code().Ret({2}), 2), "ret uses register %2 of 2 (operand 'value')");
}

}  // namespace
}  // namespace shapefn::bytecode
