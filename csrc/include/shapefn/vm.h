// The shapefn virtual machine: runs a verified Executable on a host and one
// execution device, handing each shape function only what its mask needs.
//
// Embedding (no Python needed):
//   auto exe = shapefn::Executable::Load("model.sfx");
//   shapefn::VirtualMachine vm(exe, shapefn::MakeSimDevice({}), {}, kernels);
//   shapefn::Value out = vm.Invoke("main", {shapefn::Value::Tensor(input)});
#pragma once

#include <tvm/ffi/function.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shapefn/counters.h"
#include "shapefn/device.h"
#include "shapefn/executable.h"
#include "shapefn/registry.h"
#include "shapefn/value.h"

namespace shapefn {

enum class Dependence {
  kPerInput,  // copy to host only the inputs a shape function reads values of
  kPerOp,     // copy every input of a data-dependent op whole (the old way)
};

struct VMOptions {
  Dependence dependence = Dependence::kPerInput;
  int max_call_depth = 512;
  // Instructions one call may execute before it is stopped (0: no limit).
  // Loops are legal, so a budget is the only bound on a runaway program;
  // without one, Ctrl-C still interrupts it (signals are checked on loops).
  int64_t max_instructions = 0;
};

class VirtualMachine {
 public:
  // `kernels` maps kernel names to functions; names it lacks are looked up
  // among tvm-ffi global functions. Shape functions are resolved in the global
  // registry now: later registrations do not affect this VM.
  VirtualMachine(std::shared_ptr<const Executable> exe, std::shared_ptr<Device> device,
                 VMOptions options, const std::map<std::string, tvm::ffi::Function>& kernels);
  ~VirtualMachine();

  // Calls are serialised: one VM runs one call at a time.
  Value Invoke(int function_index, std::vector<Value> args);
  Value Invoke(const std::string& function, std::vector<Value> args);

  const Executable& executable() const { return *exe_; }
  const std::shared_ptr<Device>& device(int slot) const { return devices_[slot]; }
  Counters counters() const;
  void ResetCounters();
  // What uploading the constants cost, once, when the VM was created.
  const Counters& constant_counters() const { return constant_counters_; }
  size_t pool_high_water_bytes(int slot) const;

 private:
  Value Run(int function_index, std::vector<Value>& registers, int depth);
  // Called on every backward jump: enforces the budget, checks for signals.
  void OnBackwardJump();
  void CheckArguments(const FunctionDef& fn, std::vector<Value>& args);
  TensorRef CopyTo(const TensorRef& src, int slot);
  // Enqueues a device-to-host copy of `src` (counted); the caller syncs once
  // for all the copies it staged.
  TensorRef StageToHost(const TensorRef& src);
  void ExecInvokeKernel(const Instruction& ins, std::vector<Value>& regs);
  void ExecInvokeShapeFunc(const Instruction& ins, std::vector<Value>& regs);
  void ExecReadback(const Instruction& ins, std::vector<Value>& regs);

  std::shared_ptr<const Executable> exe_;
  std::shared_ptr<Device> devices_[kNumDeviceSlots];
  std::shared_ptr<MemoryPool> pools_[kNumDeviceSlots];
  VMOptions options_;
  std::vector<tvm::ffi::Function> kernels_;
  std::vector<ShapeFuncEntryPtr> shape_funcs_;
  std::vector<Value> constants_;
  Counters counters_, constant_counters_;
  int64_t call_start_instructions_ = 0;
  uint32_t backward_jumps_ = 0;
  std::mutex call_mutex_;

  struct CompiledShapeFunc {
    tvm::ffi::Function fn;
    std::vector<int64_t> out_ndims;
  };
  // Per shape function: input signature -> compiled TVM host function.
  std::vector<std::map<std::string, CompiledShapeFunc>> compiled_;
  // Reused scratch to keep the dispatch path free of allocations.
  std::vector<DLTensor> scratch_tensors_;
  std::vector<tvm::ffi::AnyView> scratch_args_;
};

}  // namespace shapefn
