// Instruction family: kernel calls — invoke_kernel with kernels the VM is
// given (C++ functions here, as a kernel library's would be: tensors as
// DLTensor views, ints and shapes as scalars) and with tvm-ffi global
// functions (tensors lent as owning tvm-ffi Tensors), on the host and on sim;
// the errors kernels raise keep their kind; kernel names resolve when the VM
// is made and kernel indices are checked at load. The family has no Python
// half; kernels written in Python are tested in tests/test_extern_kernels.py.
#include <gtest/gtest.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

// out[i] = x[i] * k, as a compiled kernel would take them.
tvm::ffi::Function Scale() {
  return tvm::ffi::Function::FromTyped([](DLTensor* x, int64_t k, DLTensor* out) {
    if (x->device.device_type != kDLCPU || out->device.device_type != kDLCPU) {
      TVM_FFI_THROW(ValueError) << "scale runs on CPU memory";
    }
    const float* in = static_cast<const float*>(x->data);
    float* o = static_cast<float*>(out->data);
    for (int64_t i = 0; i < x->shape[0]; ++i) o[i] = in[i] * static_cast<float>(k);
  });
}

// out (int64[4]) = the four ints it was passed.
tvm::ffi::Function Record() {
  return tvm::ffi::Function::FromTyped([](DLTensor* out, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t* o = static_cast<int64_t*>(out->data);
    o[0] = a, o[1] = b, o[2] = c, o[3] = d;
  });
}

// main(x: float32[n]) = scale(x, 3).
ExecutableParts ScaleProgram() {
  Code code;
  code.ShapeOf({1, 0})
      .AllocTensor({2, kExecutionSlot, 1, EncodeDType(kF32)})
      .LoadInt({3, 3})
      .InvokeKernel({0, List{0, 3, 2}})
      .Ret({2});
  ExecutableParts parts = Main(code, 4);
  parts.kernels = {"scale"};
  return parts;
}

TEST(InterpreterKernels, KernelTakesTensorsAndInts) {
  for (bool on_sim : {false, true}) {
    SCOPED_TRACE(on_sim ? "sim" : "host");
    Outcome run = RunMain(ScaleProgram(), {Iota({5})}, on_sim ? Sim() : HostDevice(), {}, {{"scale", Scale()}});
    EXPECT_EQ(Show(run.result), on_sim ? "float32[5]@sim" : "float32[5]@host");
    EXPECT_EQ(Contents<float>(run.result), (std::vector<float>{0, 3, 6, 9, 12}));
    EXPECT_EQ(run.counters.kernel_calls, 1);
    EXPECT_EQ(run.counters.d2h_bytes, 0);  // the kernel reads device memory where it is
  }
  const std::string text = Executable(ScaleProgram()).Disassemble(true);
  EXPECT_NE(text.find("invoke_kernel kernel=kernel#0, args=[%0, %3, %2]"), std::string::npos) << text;
}

TEST(InterpreterKernels, ShapeArgumentsExpandToTheirDims) {
  Code code;
  code.LoadShape({1, List{4}})
      .AllocTensor({2, kHostSlot, 1, EncodeDType(kI64)})
      .LoadShape({3, List{7, 8}})
      .LoadInt({4, 9})
      .ShapeOf({5, 0})
      .InvokeKernel({0, List{2, 3, 4, 5}})  // out, 7, 8, 9, n
      .Ret({2});
  ExecutableParts parts = Main(code, 6);
  parts.kernels = {"record"};
  Outcome run = RunMain(parts, {Iota({6})}, HostDevice(), {}, {{"record", Record()}});
  EXPECT_EQ(Contents<int64_t>(run.result), (std::vector<int64_t>{7, 8, 9, 6}));
}

// A user's kernel: a tvm-ffi global function, found by name when no kernel
// of that name is given. It gets owning Tensors, and may keep one.
std::optional<tvm::ffi::Tensor> kept;

void RegisterGlobals() {
  tvm::ffi::Function::SetGlobal("test.cpp.interpreter.fill",
                                tvm::ffi::Function::FromTyped([](tvm::ffi::Tensor out, int64_t value) {
                                  const DLTensor* t = out.GetDLTensorPtr();
                                  float* data = static_cast<float*>(t->data);
                                  int64_t n = 1;
                                  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
                                  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(value);
                                  kept = out;
                                }),
                                true);
  tvm::ffi::Function::SetGlobal(
      "test.cpp.interpreter.shadowed",
      tvm::ffi::Function::FromTyped([](tvm::ffi::Tensor out, int64_t) { static_cast<float*>(out.data_ptr())[0] = -1; }),
      true);
}

// main(x: float32[n, 2]) = fill(empty_like(x), 5).
ExecutableParts FillProgram(const std::string& kernel) {
  Code code;
  code.ShapeOf({1, 0}).AllocTensor({2, kExecutionSlot, 1, EncodeDType(kF32)}).LoadInt({3, 5});
  code.InvokeKernel({0, List{2, 3}}).Ret({2});
  ExecutableParts parts = Main(code, 4, {Param("x", kF32, {kN, 2})});
  parts.kernels = {kernel};
  return parts;
}

TEST(InterpreterKernels, GlobalFunctionKernelGetsOwningTensors) {
  RegisterGlobals();
  for (bool on_sim : {false, true}) {
    SCOPED_TRACE(on_sim ? "sim" : "host");
    Outcome run = RunMain(FillProgram("test.cpp.interpreter.fill"), {Iota({3, 2})}, on_sim ? Sim() : HostDevice());
    EXPECT_EQ(Contents<float>(run.result), (std::vector<float>(6, 5.0f)));
    EXPECT_EQ(run.counters.kernel_calls, 1);
    // The Tensor the kernel kept is the VM's tensor, and holds it.
    ASSERT_TRUE(kept.has_value());
    EXPECT_EQ(kept->data_ptr(), run.result.tensor->data());
    const long holders = run.result.tensor.use_count();
    kept.reset();
    EXPECT_EQ(run.result.tensor.use_count(), holders - 1);
  }
}

TEST(InterpreterKernels, AKernelGivenToTheVMShadowsAGlobalOfTheSameName) {
  RegisterGlobals();
  tvm::ffi::Function given = tvm::ffi::Function::FromTyped(
      [](DLTensor* out, int64_t value) { static_cast<float*>(out->data)[0] = static_cast<float>(value) * 10; });
  Outcome run = RunMain(FillProgram("test.cpp.interpreter.shadowed"), {Iota({1, 2})}, HostDevice(), {},
                        {{"test.cpp.interpreter.shadowed", given}});
  EXPECT_EQ(Contents<float>(run.result)[0], 50.0f);
}

TEST(InterpreterKernels, KernelErrorsKeepTheirKind) {
  struct Case {
    const char* name;
    ErrorKind kind;
  };
  for (const Case& c : {Case{"ValueError", ErrorKind::kValue}, Case{"TypeError", ErrorKind::kType},
                        Case{"IndexError", ErrorKind::kIndex}, Case{"RuntimeError", ErrorKind::kRuntime},
                        Case{"AssertionError", ErrorKind::kRuntime}}) {
    SCOPED_TRACE(c.name);
    const std::string kind = c.name;
    tvm::ffi::Function failing = tvm::ffi::Function::FromPacked(
        [kind](tvm::ffi::PackedArgs, tvm::ffi::Any*) { throw tvm::ffi::Error(kind, "the kernel refuses", ""); });
    ExecutableParts parts = ScaleProgram();
    EXPECT_SHAPEFN_ERROR(RunMain(parts, {Iota({2})}, HostDevice(), {}, {{"scale", failing}}), c.kind,
                         "kernel 'scale' failed: " + kind + ": the kernel refuses");
    // The kernel's own error is kept as the cause.
    try {
      RunMain(parts, {Iota({2})}, HostDevice(), {}, {{"scale", failing}});
    } catch (const Error& e) {
      ASSERT_TRUE(e.cause());
      EXPECT_THROW(std::rethrow_exception(e.cause()), tvm::ffi::Error);
    }
  }
}

TEST(InterpreterKernels, KernelsTakeTensorsIntsAndShapesOnly) {
  Code code;
  code.MakeTuple({1, List{}}).InvokeKernel({0, List{0, 1}}).Ret({0});
  ExecutableParts parts = Main(code, 2);
  parts.kernels = {"scale"};
  EXPECT_SHAPEFN_ERROR(RunMain(parts, {Iota({1})}, HostDevice(), {}, {{"scale", Scale()}}), ErrorKind::kType,
                       "kernel 'scale' argument 1 is tuple; kernels take tensors, ints and shapes");
}

TEST(InterpreterKernels, UnknownKernelIsNamedWhenTheVMIsMade) {
  ExecutableParts parts = ScaleProgram();
  parts.kernels = {"test.cpp.interpreter.nowhere"};
  EXPECT_SHAPEFN_ERROR(MakeVM(parts), ErrorKind::kKey,
                       "kernel 'test.cpp.interpreter.nowhere' is neither in the executable's library nor a registered "
                       "global function");
}

// fail_*: what the verifier refuses.
TEST(InterpreterKernels, VerifierRefusals) {
  ExecutableParts index = Main(Code().InvokeKernel({1, List{0}}).Ret({0}), 1);
  index.kernels = {"scale"};
  EXPECT_REJECTED(index, "invoke_kernel refers to kernel #1 of 1 (operand 'kernel')");
  ExecutableParts args = Main(Code().InvokeKernel({0, List{0, 1}}).Ret({0}), 1);
  args.kernels = {"scale"};
  EXPECT_REJECTED(args, "invoke_kernel uses register %1 of 1 (operand 'args')");
  ExecutableParts unnamed = Main(Code().Ret({0}), 1);
  unnamed.kernels = {""};
  EXPECT_REJECTED(unnamed, "kernel name is empty or not UTF-8");
  ExecutableParts not_utf8 = Main(Code().Ret({0}), 1);
  not_utf8.kernels = {"scale\xff"};
  EXPECT_REJECTED(not_utf8, "kernel name is empty or not UTF-8");
}

}  // namespace
}  // namespace shapefn::bytecode
