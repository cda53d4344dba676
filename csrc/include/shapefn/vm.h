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
#include <string>
#include <vector>

#include "shapefn/counters.h"
#include "shapefn/device.h"
#include "shapefn/executable.h"
#include "shapefn/profiler.h"
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
  VirtualMachine(std::shared_ptr<const Executable> exe, std::shared_ptr<Device> device, VMOptions options,
                 const std::map<std::string, tvm::ffi::Function>& kernels);
  ~VirtualMachine();

  // Calls are serialised: one VM runs one call at a time.
  Value Invoke(int function_index, std::vector<Value> args);
  Value Invoke(const std::string& function, std::vector<Value> args);
  // Runs one call with `profiler` (if not null) recording its events.
  Value Invoke(int function_index, std::vector<Value> args, Profiler* profiler);

  const Executable& executable() const;
  const std::shared_ptr<Device>& device(int slot) const;
  // Both wait for a running call to finish: counters always describe whole calls.
  Counters counters() const;
  void ResetCounters();
  // What uploading the constants cost, once, when the VM was created.
  const Counters& constant_counters() const;
  size_t pool_high_water_bytes(int slot) const;

 private:
  class Impl;  // csrc/vm/vm_impl.h
  std::unique_ptr<Impl> impl_;
};

}  // namespace shapefn
