// The virtual machine's state and the handlers of its instructions, behind
// the public VirtualMachine (vm.h). Private to csrc/vm.
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiled_shape_func.h"
#include "idle_tensors.h"
#include "index_checks.h"
#include "isa.h"
#include "shapefn/registry.h"
#include "shapefn/vm.h"

namespace shapefn {

class VirtualMachine::Impl {
 public:
  Impl(std::shared_ptr<const Executable> exe, std::shared_ptr<Device> device, VMOptions options,
       const std::map<std::string, tvm::ffi::Function>& kernels);

  Value Invoke(int function_index, std::vector<Value> args, Profiler* profiler);
  const Executable& executable() const { return *exe_; }
  const std::shared_ptr<Device>& device(int slot) const { return devices_[slot]; }
  Counters counters() const;
  void ResetCounters();
  const Counters& constant_counters() const { return constant_counters_; }
  size_t pool_high_water_bytes(int slot) const;

 private:
  Value Run(int function_index, std::vector<Value>& registers, int depth);
  // Called on every backward jump: enforces the budget, checks for signals.
  void OnBackwardJump();
  void CheckArguments(const FunctionDef& fn, std::vector<Value>& args);
  TensorRef CopyTo(const TensorRef& src, int slot);
  // A host argument whose data is not aligned as TVM's kernels assume
  // (kKernelBufferAlignment), copied into memory that is.
  TensorRef AlignedHostCopy(const TensorObj& t);
  // Enqueues a device-to-host copy of `src` (counted); the caller syncs once
  // for all the copies it staged.
  TensorRef StageToHost(const TensorRef& src);
  void ExecInvokeKernel(const Instruction& ins, std::vector<Value>& regs);
  void ExecInvokeShapeFunc(const Instruction& ins, std::vector<Value>& regs);
  struct ShapeFuncPlan;
  // The host view of shape-function input `i`'s value: a host tensor in
  // place, a device tensor staged into `staged` (the caller syncs).
  const DLTensor* HostValueOf(const TensorRef& tensor, size_t i, std::vector<TensorRef>* staged);
  // Input `i` given as a shape or an int value (anything else is an error).
  void ShapeOrIntInput(const ShapeFuncPlan& plan, const Value& v, int i);
  // A native shape function run bracketed for the device and the profiler.
  void CallNativeShapeFunc(const ShapeFuncPlan& plan, const ShapeFuncAttrs& attrs, int n_in, ShapeVec* results);
  [[noreturn]] static void FailShapeFuncResult(const ShapeFuncEntry& entry, int output, const ShapeVec& shape);
  // Runs shape function `sf` written in Python (TVM-compiled per input
  // signature, compiled on first use) on shape_func_scratch_.inputs.
  void CallCompiledShapeFunc(size_t sf, int n_in, int n_out, ShapeVec* results);
  void ExecReadback(const Instruction& ins, std::vector<Value>& regs);
  // Every allocation and every wait on a device goes through these, so each
  // is counted (and profiled) in one place. `op` names the allocation.
  TensorRef Allocate(int slot, const ShapeVec& shape, DLDataType dtype, const char* op);
  void SyncWith(Device& device);
  // The running call's result, each tensor in it waiting on `checks`.
  static Value WithChecks(Value result, const std::shared_ptr<const DeviceChecks>& checks, int depth = 0);
  void InheritChecks(const Value& arg, int depth = 0);

  std::shared_ptr<const Executable> exe_;
  // Per function: its decoded instructions (pointing into exe_'s code).
  std::vector<std::vector<Instruction>> code_;
  std::shared_ptr<Device> devices_[kNumDeviceSlots];
  std::shared_ptr<MemoryPool> pools_[kNumDeviceSlots];
  IdleTensors idle_;  // killed tensors, reused whole by Allocate
  IndexChecks checks_;
  VMOptions options_;
  std::vector<tvm::ffi::Function> kernels_;
  // Per kernel: true for a global function (a user's kernel, maybe written in
  // Python), which gets owning tvm-ffi Tensors (DLPack export works on them);
  // the executable's own TVM-compiled kernels get DLTensor views.
  std::vector<bool> kernel_takes_tensors_;
  std::vector<ShapeFuncEntryPtr> shape_funcs_;
  // What a call of each shape function needs of its entry, decoded at load.
  struct ShapeFuncPlan {
    const ShapeFuncEntry* entry;
    NativeShapeFunc native;
    // Bit i: input i's value goes to the shape function (every input of a
    // data-dependent op under Dependence::kPerOp). Inputs past 63 ask `entry`.
    uint64_t value_bits;
    bool all_values;  // per-op dependence: inputs past 63 too
    bool ReadsValue(int i) const {
      return i < 64 ? ((value_bits >> i) & 1) != 0 : (all_values || entry->NeedsValue(i));
    }
  };
  std::vector<ShapeFuncPlan> shape_func_plans_;
  // The execution device brackets host shape work (sim in strict mode).
  bool guard_host_shape_work_ = false;
  std::vector<Value> constants_;
  Profiler* profiler_ = nullptr;  // set only for the duration of a profiled call
  Counters counters_, constant_counters_;
  int64_t call_start_instructions_ = 0;
  uint32_t backward_jumps_ = 0;
  int64_t call_stack_registers_ = 0;  // held by the frames of the running call's nested calls
  mutable std::mutex call_mutex_;     // held for a whole call, and to read or reset counters_

  // Per shape function: its compiled TVM host functions, one per input
  // signature (searched in order: there are one or two).
  std::vector<std::vector<CompiledShapeFunc>> compiled_;
  // Reused by every shape-function call (calls are serialised).
  struct ShapeFuncScratch {
    std::vector<ShapeFuncInput> inputs;
    std::vector<DLTensor> values;        // host views of the inputs whose values are read
    std::vector<int64_t> value_lengths;  // the 1-d shape of each shape-valued input
    void Resize(size_t n_in) {
      inputs.resize(n_in);
      values.resize(n_in);
      value_lengths.resize(n_in);
    }
    std::vector<ShapeVec> results;
    std::vector<uint64_t> signature;
    CompiledShapeFuncCall compiled_call;  // arguments of a TVM-compiled shape function
  } shape_func_scratch_;
  // The registers of the outermost call (calls are serialised).
  std::vector<Value> frame_;
  // Reused scratch to keep the dispatch path free of allocations.
  std::vector<DLTensor> scratch_tensors_;
  std::vector<tvm::ffi::AnyView> scratch_args_;
  std::vector<tvm::ffi::Tensor> scratch_objects_;  // the Tensors a global-function kernel's call holds
};

}  // namespace shapefn
