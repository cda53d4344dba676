// Instruction family: shape-function calls — invoke_shape_func with native
// shape functions from the registry (built-ins, and ones registered here
// that report what they were handed), values copied to the host only where
// the mask says, a shape function the executable carries (compiled host
// code, here a C++ function), and arity and output counts checked once,
// when the VM is made. A shape function written in Python:
// tests/test_bytecode_shape_funcs.py.
#include <gtest/gtest.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shapefn/registry.h"
#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

// Reports what it was handed: per input, output 0 whether it saw the value,
// output 2 the value's first element (0 where it saw none), output 3 the
// rank; output 1 the attributes.
void Probe(const ShapeFuncInput* inputs, int n, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  for (int i = 0; i < n; ++i) {
    const DLTensor* value = inputs[i].value;
    outputs[0].push_back(value != nullptr);
    outputs[2].push_back(value != nullptr && ValueNumel(*value) > 0 ? ValueAsInt64(*value, 0) : 0);
    outputs[3].push_back(inputs[i].ndim);
  }
  outputs[1].assign(attrs.data, attrs.data + attrs.size);
}

void Negative(const ShapeFuncInput*, int, const ShapeFuncAttrs&, ShapeVec* outputs) { outputs[0] = {2, -1}; }

void Refuses(const ShapeFuncInput*, int, const ShapeFuncAttrs&, ShapeVec*) {
  Fail(ErrorKind::kValue, "the probe refuses its inputs");
}

void RegisterNative(const std::string& name, std::vector<bool> mask, int num_outputs, NativeShapeFunc fn) {
  ShapeFuncEntry e;
  e.name = name;
  e.arity = static_cast<int>(mask.size());
  e.mask = std::move(mask);
  e.num_outputs = num_outputs;
  e.native = fn;
  ShapeFuncRegistry::Global().Register(e, true);
}

// main(x: float32[n], v: int64[2]) = the probe's four outputs for (x, v).
ExecutableParts ProbeProgram() {
  RegisterNative("test.cpp.interpreter.probe", {false, true}, 4, Probe);
  Code code;
  code.InvokeShapeFunc({0, List{0, 1}, List{2, 3, 4, 5}, List{4, 2}}).MakeTuple({6, List{2, 3, 4, 5}}).Ret({6});
  ExecutableParts parts = Main(code, 7, {Param("x", kF32, {kN}), Param("v", kI64, {2})});
  parts.shape_funcs = {Registered("test.cpp.interpreter.probe")};
  return parts;
}

TEST(InterpreterShapeFuncs, TheMaskDecidesWhichValuesCrossToTheHost) {
  SimConfig strict;  // device memory unreadable while shape functions run
  strict.strict = true;
  Outcome run = RunMain(ProbeProgram(), {Iota({3}), Tensor<int64_t>(kI64, {2}, {5, 6})}, MakeSimDevice(strict));
  EXPECT_EQ(Show(run.result), "([0, 1], [4, 2], [0, 5], [1, 1])");
  EXPECT_EQ(run.counters.d2h_bytes, 16);  // v, not x
  EXPECT_EQ(run.counters.syncs, 1);
  EXPECT_EQ(run.counters.shape_func_calls, 1);
  const std::string text = Executable(ProbeProgram()).Disassemble(true);
  EXPECT_NE(text.find("invoke_shape_func shape_func=shape_func#0, inputs=[%0, %1], outputs=[%2, %3, %4, %5], "
                      "attrs=[4, 2]"),
            std::string::npos)
      << text;
}

TEST(InterpreterShapeFuncs, PerOpDependenceCopiesEveryInput) {
  VMOptions per_op;
  per_op.dependence = Dependence::kPerOp;
  Outcome run = RunMain(ProbeProgram(), {Iota({3}), Tensor<int64_t>(kI64, {2}, {5, 6})}, Sim(), per_op);
  EXPECT_EQ(Show(Field(run.result, 0)), "[1, 1]");
  EXPECT_EQ(run.counters.d2h_bytes, 16 + 12);
  EXPECT_EQ(run.counters.syncs, 1);  // one wait for both
}

TEST(InterpreterShapeFuncs, IntAndShapeRegistersAreHandedAsHostValues) {
  ExecutableParts parts = ProbeProgram();
  Code code;
  code.LoadInt({2, 7})
      .LoadShape({3, List{3, 4}})
      .InvokeShapeFunc({0, List{2, 3}, List{4, 5, 6, 7}, List{}})
      .MakeTuple({8, List{4, 5, 6, 7}})
      .Ret({8});
  parts.functions[0] = Function("main", parts.functions[0].params, 9, code);
  Outcome run = RunMain(parts, {Iota({1}), Tensor<int64_t>(kI64, {2}, {5, 6})}, Sim());
  // Input 0's flag is false, but an int is its value.
  EXPECT_EQ(Show(run.result), "([1, 1], [], [7, 3], [0, 1])");
  EXPECT_EQ(run.counters.d2h_bytes, 0);
  EXPECT_EQ(run.counters.syncs, 0);
}

TEST(InterpreterShapeFuncs, BuiltinsFromTheRegistry) {
  Code broadcast;
  broadcast.InvokeShapeFunc({0, List{0, 1}, List{2}, List{}}).Ret({2});
  ExecutableParts parts = Main(broadcast, 3, {Param("a", kF32, {kN, 1}), Param("b", kF32, {1, kM})});
  parts.shape_funcs = {Registered("shapefn.broadcast")};
  Outcome run = RunMain(parts, {Iota({3, 1}), Iota({1, 4})}, Sim());
  EXPECT_EQ(Show(run.result), "[3, 4]");
  EXPECT_EQ(run.counters.d2h_bytes, 0);
  EXPECT_EQ(run.counters.syncs, 0);
  EXPECT_EQ(run.counters.shape_func_calls, 1);
  const std::string text = Executable(parts).Disassemble(true);
  EXPECT_NE(text.find("0: invoke_shape_func shape_func=shape_func#0, inputs=[%0, %1], outputs=[%2], attrs=[]"),
            std::string::npos)
      << text;

  // relax.reshape reads its second input's value: from a device tensor
  // (copied), or from a shape register (already on the host).
  Code reshape;
  reshape.InvokeShapeFunc({0, List{0, 1}, List{2}, List{}})
      .LoadShape({3, List{-1, 2}})
      .InvokeShapeFunc({0, List{0, 3}, List{4}, List{}})
      .MakeTuple({5, List{2, 4}})
      .Ret({5});
  ExecutableParts reshape_parts = Main(reshape, 6, {Param("x", kF32, {kN, kM}), Param("shape", kI64, {2})});
  reshape_parts.shape_funcs = {Registered("relax.reshape")};
  Outcome reshaped = RunMain(reshape_parts, {Iota({4, 3}), Tensor<int64_t>(kI64, {2}, {6, -1})}, Sim());
  EXPECT_EQ(Show(reshaped.result), "([6, 2], [6, 2])");
  EXPECT_EQ(reshaped.counters.d2h_bytes, 16);
  EXPECT_EQ(reshaped.counters.syncs, 1);
  EXPECT_EQ(reshaped.counters.shape_func_calls, 2);
}

TEST(InterpreterShapeFuncs, WhatTheShapeFunctionGivesIsChecked) {
  RegisterNative("test.cpp.interpreter.negative", {false}, 1, Negative);
  ExecutableParts negative = Main(Code().InvokeShapeFunc({0, List{0}, List{1}, List{}}).Ret({1}), 2);
  negative.shape_funcs = {Registered("test.cpp.interpreter.negative")};
  EXPECT_SHAPEFN_ERROR(RunMain(negative, {Iota({1})}), ErrorKind::kValue,
                       "shape function of 'test.cpp.interpreter.negative' returned a negative dimension -1 for output "
                       "0 ([2, -1])");
  RegisterNative("test.cpp.interpreter.refuses", {false}, 1, Refuses);
  ExecutableParts refuses = negative;
  refuses.shape_funcs = {Registered("test.cpp.interpreter.refuses")};
  EXPECT_SHAPEFN_ERROR(RunMain(refuses, {Iota({1})}), ErrorKind::kValue, "the probe refuses its inputs");
}

TEST(InterpreterShapeFuncs, InputsAreTensorsIntsOrShapes) {
  ExecutableParts parts = ProbeProgram();
  Code code;
  code.MakeTuple({2, List{}}).InvokeShapeFunc({0, List{2, 1}, List{3, 4, 5, 6}, List{}}).Ret({3});
  parts.functions[0] = Function("main", parts.functions[0].params, 7, code);
  EXPECT_SHAPEFN_ERROR(RunMain(parts, {Iota({1}), Tensor<int64_t>(kI64, {2}, {5, 6})}), ErrorKind::kType,
                       "shape function of 'test.cpp.interpreter.probe' input 0 is tuple");
}

TEST(InterpreterShapeFuncs, ArityAndOutputsAreCheckedWhenTheVMIsMade) {
  ExecutableParts one_input = Main(Code().InvokeShapeFunc({0, List{0}, List{1}, List{}}).Ret({1}), 2);
  one_input.shape_funcs = {Registered("shapefn.broadcast")};
  Load(one_input);  // the registry is consulted by the VM, not at load
  EXPECT_SHAPEFN_ERROR(MakeVM(one_input), ErrorKind::kValue,
                       "'main' calls the shape function of 'shapefn.broadcast' with 1 inputs, it takes 2");
  ExecutableParts two_outputs = Main(Code().InvokeShapeFunc({0, List{0, 0}, List{1, 2}, List{}}).Ret({1}), 3);
  two_outputs.shape_funcs = {Registered("shapefn.broadcast")};
  EXPECT_SHAPEFN_ERROR(MakeVM(two_outputs), ErrorKind::kValue,
                       "'main' expects 2 shapes from the shape function of 'shapefn.broadcast', it gives 1");
  ExecutableParts unknown = one_input;
  unknown.shape_funcs = {{"test.cpp.interpreter.unregistered", {false, false}}};
  EXPECT_SHAPEFN_ERROR(MakeVM(unknown), ErrorKind::kKey,
                       "no shape function is registered for op 'test.cpp.interpreter.unregistered'");
}

TEST(InterpreterShapeFuncs, AMaskOtherThanTheRegisteredOneIsRefusedWhenTheVMIsMade) {
  ExecutableParts parts = Main(Code().InvokeShapeFunc({0, List{0, 1}, List{2}, List{}}).Ret({2}), 3);
  parts.shape_funcs = {{"relax.dynamic_strided_slice", {true, true, true, true}}};
  Load(parts);  // a mask is a program's own, checked against the registry by the VM
  EXPECT_SHAPEFN_ERROR(MakeVM(parts), ErrorKind::kValue,
                       "the executable was compiled with data-dependence mask [True, True, True, True] for "
                       "'relax.dynamic_strided_slice', but this process registers [False, True, True, True]: "
                       "compile it again, or register the mask it was compiled with");
}

// A shape function the executable carries, compiled for one signature: the
// VM calls the build's kernel with the inputs as host tensors (values where
// the carried mask says) and one int64 vector per output.
ExecutableParts CarriedProgram(bool int_input) {
  Code code;
  if (int_input) {
    code.LoadInt({2, 3});
  } else {
    code.LoadShape({2, List{1, 2}});
  }
  code.InvokeShapeFunc({0, List{0, 1}, List{3}, List{}})
      .InvokeShapeFunc({0, List{0, 2}, List{4}, List{}})
      .MakeTuple({5, List{3, 4}})
      .Ret({5});
  ExecutableParts parts = Main(code, 6, {Param("x", kF32, {kN}), Param("v", kI64, {2})});
  parts.shape_funcs = {{"test.cpp.interpreter.carried", {false, true}}};  // registered nowhere
  parts.kernels = {"carried_build"};
  CarriedShapeFunc carried;
  carried.shape_func = 0;
  carried.builds.push_back(CarriedShapeFunc::Build{"float32:1,int64:1", 0, {1}});
  parts.carried_shape_funcs.push_back(carried);
  return parts;
}

// [len(x) + v[0] + v[1]]
tvm::ffi::Function CarriedBuild() {
  return tvm::ffi::Function::FromTyped([](DLTensor* x, DLTensor* v, DLTensor* out) {
    const int64_t* values = static_cast<const int64_t*>(v->data);
    static_cast<int64_t*>(out->data)[0] = x->shape[0] + values[0] + values[1];
  });
}

TEST(InterpreterShapeFuncs, CarriedShapeFunctionRunsItsBuild) {
  Outcome run = RunMain(CarriedProgram(false), {Iota({4}), Tensor<int64_t>(kI64, {2}, {10, 20})}, Sim(), {},
                        {{"carried_build", CarriedBuild()}});
  // A shape register has the signature of an int64 vector.
  EXPECT_EQ(Show(run.result), "([34], [7])");
  EXPECT_EQ(run.counters.d2h_bytes, 16);  // v; x by its shape only
  EXPECT_EQ(run.counters.shape_func_calls, 2);
  EXPECT_NE(Executable(CarriedProgram(false))
                .Disassemble()
                .find("shape_func test.cpp.interpreter.carried(float32:1,int64:1) = kernel carried_build"),
            std::string::npos);
}

TEST(InterpreterShapeFuncs, CarriedShapeFunctionHasNoBuildForOtherSignatures) {
  EXPECT_SHAPEFN_ERROR(RunMain(CarriedProgram(true), {Iota({4}), Tensor<int64_t>(kI64, {2}, {10, 20})}, Sim(), {},
                               {{"carried_build", CarriedBuild()}}),
                       ErrorKind::kType,
                       "the shape function of 'test.cpp.interpreter.carried' was not compiled for inputs "
                       "(float32:1,int64:0)");
}

// fail_*: what the verifier refuses.
TEST(InterpreterShapeFuncs, VerifierRefusals) {
  ExecutableParts index = Main(Code().InvokeShapeFunc({1, List{0}, List{1}, List{}}).Ret({1}), 2);
  index.shape_funcs = {Registered("shapefn.broadcast")};
  EXPECT_REJECTED(index, "invoke_shape_func refers to shape function #1 of 1 (operand 'shape_func')");
  ExecutableParts output = Main(Code().InvokeShapeFunc({0, List{0}, List{6}, List{}}).Ret({0}), 2);
  output.shape_funcs = {Registered("shapefn.broadcast")};
  EXPECT_REJECTED(output, "invoke_shape_func uses register %6 of 2 (operand 'outputs')");
  ExecutableParts truncated = Main(Code().InvokeShapeFunc({0, List{0}, List{1}}), 2);  // no attrs list
  truncated.shape_funcs = {Registered("shapefn.broadcast")};
  EXPECT_REJECTED(truncated, "truncated 'invoke_shape_func' at word 0");
}

}  // namespace
}  // namespace shapefn::bytecode
