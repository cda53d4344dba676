// Instruction family: control flow and calls — if, goto, call, ret; loops,
// recursion, the tail-call form (a goto back to the start), the limits on call
// depth and instructions, errors named by the source of the failing
// instruction, the entry's argument checks, and what the verifier refuses
// (call arity, jump targets, functions that run past their end). The family
// has no Python half.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

TEST(InterpreterControl, IfFallsThroughOnNonzeroAndJumpsOnZero) {
  for (auto [cond, want] : {std::pair<int64_t, int64_t>{1, 10}, {0, 20}, {-5, 10}}) {
    Code code;
    code.LoadInt({1, cond})
        .If({1, 4})  // -> 4 when zero
        .LoadInt({2, 10})
        .Ret({2})
        .LoadInt({2, 20})  // 4
        .Ret({2});
    EXPECT_EQ(Show(RunMain(Main(code, 3), {Iota({1})}).result), std::to_string(want)) << "cond " << cond;
  }
  const std::string text = Executable(Main(Code().LoadInt({1, 0}).If({1, 0}).Ret({1}), 2)).Disassemble(true);
  EXPECT_NE(text.find("1: if cond=%1, target=->0"), std::string::npos) << text;
}

// main(x: float32[n]) = 0 + 1 + ... + (n - 1), by a loop.
ExecutableParts SumProgram() {
  Code code;
  code.TensorDim({1, 0, 0})
      .LoadInt({2, 0})  // i
      .LoadInt({3, 0})  // sum
      .LoadInt({4, 1})
      .Lt({5, 2, 1})  // 4: top
      .If({5, 9})
      .Add({3, 3, 2})
      .Add({2, 2, 4})
      .Goto({4})
      .Ret({3});  // 9
  return Main(code, 6);
}

TEST(InterpreterControl, LoopSumsWithABackwardGoto) {
  for (int64_t n : {0, 1, 25}) {
    Outcome run = RunMain(SumProgram(), {Iota({n})});
    EXPECT_EQ(Show(run.result), std::to_string(n * (n - 1) / 2));
    EXPECT_EQ(run.counters.instructions, 4 + 5 * n + 2 + 1);
  }
}

// main(x: float32[n]) = (fact(n), fact_loop(n, 1)): by recursion, and in
// the tail-call form (the recursive call replaced by updating the
// parameters in place and a goto to the start).
ExecutableParts FactorialProgram() {
  Code main;
  main.TensorDim({1, 0, 0})
      .Call({2, 1, List{1}})
      .LoadInt({3, 1})
      .Call({4, 2, List{1, 3}})
      .MakeTuple({5, List{2, 4}})
      .Ret({5});
  Code fact;  // fact(k)
  fact.LoadInt({1, 2})
      .LoadInt({3, 1})
      .Lt({2, 0, 1})
      .If({2, 5})
      .Ret({3})        // k < 2: 1
      .Sub({4, 0, 3})  // 5
      .Call({5, 1, List{4}})
      .Mul({6, 0, 5})
      .Ret({6});
  Code loop;            // fact_loop(k, acc)
  loop.LoadInt({2, 2})  // 0
      .LoadInt({3, 1})
      .Lt({4, 0, 2})
      .If({4, 5})
      .Ret({1})
      .Mul({1, 1, 0})  // 5
      .Sub({0, 0, 3})
      .Goto({0});
  ExecutableParts parts = Main(main, 6);
  parts.functions.push_back(Function("fact", {AnyParam("k")}, 7, fact));
  parts.functions.push_back(Function("fact_loop", {AnyParam("k"), AnyParam("acc")}, 5, loop));
  return parts;
}

TEST(InterpreterControl, RecursionAndTailCallsComputeFactorials) {
  std::unique_ptr<VirtualMachine> vm = MakeVM(FactorialProgram());
  for (auto [n, want] : {std::pair<int64_t, int64_t>{0, 1}, {1, 1}, {5, 120}, {12, 479001600}}) {
    const std::string w = std::to_string(want);
    EXPECT_EQ(Show(vm->Invoke("main", {Iota({n})})), "(" + w + ", " + w + ")") << "n = " << n;
  }
  // An internal function is called directly too, with an int.
  EXPECT_EQ(Show(vm->Invoke("fact", {Value::Int(6)})), "720");
  const std::string text = Executable(FactorialProgram()).Disassemble(true);
  EXPECT_NE(text.find("call dst=%2, function=func#1, args=[%1]"), std::string::npos) << text;
  EXPECT_NE(text.find("goto target=->0"), std::string::npos) << text;
}

TEST(InterpreterControl, CallDepthIsLimited) {
  VMOptions shallow;
  shallow.max_call_depth = 8;
  std::unique_ptr<VirtualMachine> vm = MakeVM(FactorialProgram(), HostDevice(), shallow);
  EXPECT_EQ(Show(vm->Invoke("fact", {Value::Int(8)})), "40320");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("fact", {Value::Int(20)}), ErrorKind::kRuntime, "call depth exceeds 8");
  // The VM goes on after the error.
  EXPECT_EQ(Show(vm->Invoke("fact", {Value::Int(3)})), "6");
}

TEST(InterpreterControl, EndlessLoopStopsAtTheBudget) {
  VMOptions budget;
  budget.max_instructions = 1000;
  EXPECT_SHAPEFN_ERROR(RunMain(Main(Code().Goto({0}), 1), {Iota({1})}, HostDevice(), budget), ErrorKind::kRuntime,
                       "the call exceeded its budget of 1000 instructions");
  // The budget is per call: two calls of 4 + 5 * 150 + 3 = 757 instructions each fit it.
  std::unique_ptr<VirtualMachine> vm = MakeVM(SumProgram(), HostDevice(), budget);
  EXPECT_EQ(Show(vm->Invoke("main", {Iota({150})})), "11175");
  EXPECT_EQ(Show(vm->Invoke("main", {Iota({150})})), "11175");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Iota({250})}), ErrorKind::kRuntime, "budget of 1000 instructions");
}

TEST(InterpreterControl, CondMustBeAnInt) {
  EXPECT_SHAPEFN_ERROR(RunMain(Main(Code().If({0, 1}).Ret({0}), 1), {Iota({1})}), ErrorKind::kType,
                       "if expects an int, got tensor");
}

// Errors begin with the source of the instruction that raised them, named
// once, by the innermost function that has one.
TEST(InterpreterControl, ErrorsNameTheSourceOfTheFailingInstruction) {
  Code main;
  main.LoadInt({1, 1})
      .LoadInt({2, 0})
      .FloorDiv({3, 1, 2})  // 2: fails when %2 is 0
      .Ret({3});
  ExecutableParts parts = Main(main, 4);
  parts.functions[0].sources = {{0, ""}, {2, "ONNX node 'div' (Div)"}};
  EXPECT_SHAPEFN_ERROR(RunMain(parts, {Iota({1})}), ErrorKind::kValue,
                       "ONNX node 'div' (Div): floordiv by zero in shape arithmetic");

  ExecutableParts unmarked = parts;
  unmarked.functions[0].sources = {{0, "ONNX node 'one' (Constant)"}, {2, ""}};
  try {
    RunMain(unmarked, {Iota({1})});
    ADD_FAILURE() << "the call returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "floordiv by zero in shape arithmetic");
  }

  // A callee's source wins over its caller's.
  Code caller;
  caller.LoadInt({1, 0}).Call({2, 1, List{1}}).Ret({2});
  Code callee;
  callee.LoadInt({1, 1}).FloorMod({2, 1, 0}).Ret({2});
  ExecutableParts nested = Main(caller, 3);
  nested.functions[0].sources = {{1, "ONNX node 'call' (If)"}};
  nested.functions.push_back(Function("callee", {AnyParam("d")}, 3, callee));
  nested.functions[1].sources = {{1, "ONNX node 'mod' (Mod)"}};
  try {
    RunMain(nested, {Iota({1})});
    ADD_FAILURE() << "the call returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "ONNX node 'mod' (Mod): floormod by zero in shape arithmetic");
  }
}

TEST(InterpreterControl, TheEntryChecksItsArguments) {
  ExecutableParts parts = Main(Code().Ret({0}), 2, {Param("a", kF32, {kN, 2}), Param("b", kF32, {kN})});
  std::unique_ptr<VirtualMachine> vm = MakeVM(parts);
  EXPECT_EQ(Show(vm->Invoke("main", {Iota({3, 2}), Iota({3})})), "float32[3, 2]@host");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Iota({3, 2})}), ErrorKind::kType, "'main' takes 2 arguments, got 1");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Value::Int(1), Iota({3})}), ErrorKind::kType,
                       "'main' argument 0 ('a') must be a tensor, got int");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Tensor<int32_t>(kI32, {1, 2}, {0, 0}), Iota({1})}), ErrorKind::kType,
                       "'main' argument 0 ('a') must have dtype float32, got int32");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Iota({3}), Iota({3})}), ErrorKind::kValue,
                       "'main' argument 0 ('a') must have rank 2, got rank 1");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Iota({3, 3}), Iota({3})}), ErrorKind::kValue,
                       "'main' argument 0 ('a') dimension 1 must be 2, got 3");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("main", {Iota({3, 2}), Iota({4})}), ErrorKind::kValue,
                       "'main' argument 1 ('b') dimension 0 is 4 but 'n' is 3 from an earlier dimension");
  EXPECT_SHAPEFN_ERROR(vm->Invoke("nowhere", {}), ErrorKind::kKey, "executable has no function 'nowhere'");
  EXPECT_SHAPEFN_ERROR(vm->Invoke(5, {}), ErrorKind::kIndex, "function index 5 out of range");
}

// fail_*: what the verifier refuses.
TEST(InterpreterControl, VerifierRefusals) {
  ExecutableParts arity = Main(Code().Call({1, 1, List{}}).Ret({1}), 2);
  arity.functions.push_back(Function("helper", {AnyParam("v")}, 1, Code().Ret({0})));
  EXPECT_REJECTED(arity, "function 'main' instruction 0: call of 'helper' passes 0 arguments, it takes 1");
  EXPECT_REJECTED(Main(Code().Call({1, 1, List{0}}).Ret({1}), 2),
                  "call refers to function #1 of 1 (operand 'function')");
  EXPECT_REJECTED(Main(Code().Goto({2}).Ret({0}), 1), "goto refers to instruction #2 of 2 (operand 'target')");
  EXPECT_REJECTED(Main(Code().LoadInt({0, 1}).If({0, -1}).Ret({0}), 1),
                  "if refers to instruction #-1 of 3 (operand 'target')");
  EXPECT_REJECTED(Main(Code().LoadInt({0, 1}), 1), "function 'main' can run past its end");
  EXPECT_REJECTED(Main(Code().Ret({0}).If({0, 0}), 1), "function 'main' can run past its end");
  EXPECT_REJECTED(Main(Code(), 1), "function 'main' is empty");
  ExecutableParts marks = Main(Code().LoadInt({0, 1}).Ret({0}), 1);
  marks.functions[0].sources = {{1, "b"}, {1, "c"}};
  EXPECT_REJECTED(marks, "function 'main' has a source mark at instruction 1 (after 1, of 2)");
  marks.functions[0].sources = {{2, "past the end"}};
  EXPECT_REJECTED(marks, "function 'main' has a source mark at instruction 2 (after -1, of 2)");
}

}  // namespace
}  // namespace shapefn::bytecode
