// VirtualMachine construction, argument checking and the call entry point.
#include <tvm/ffi/extra/c_env_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cpu_features.h"
#include "shapefn/error.h"
#include "verifier.h"
#include "vm_impl.h"

namespace shapefn {

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kEmpty: return "empty";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kShape: return "shape";
    case Value::Kind::kTensor: return "tensor";
    case Value::Kind::kTuple: return "tuple";
  }
  return "?";
}

VirtualMachine::VirtualMachine(std::shared_ptr<const Executable> exe, std::shared_ptr<Device> device, VMOptions options,
                               const std::map<std::string, tvm::ffi::Function>& kernels) {
  if (!exe) Fail(ErrorKind::kValue, "VirtualMachine needs an executable");
  if (!device) Fail(ErrorKind::kValue, "VirtualMachine needs a device");
  impl_ = std::make_unique<Impl>(std::move(exe), std::move(device), options, kernels);
}

VirtualMachine::~VirtualMachine() = default;

Value VirtualMachine::Invoke(const std::string& function, std::vector<Value> args) {
  return impl_->Invoke(impl_->executable().FunctionIndex(function), std::move(args), nullptr);
}
Value VirtualMachine::Invoke(int function_index, std::vector<Value> args) {
  return impl_->Invoke(function_index, std::move(args), nullptr);
}
Value VirtualMachine::Invoke(int function_index, std::vector<Value> args, Profiler* profiler) {
  return impl_->Invoke(function_index, std::move(args), profiler);
}
const Executable& VirtualMachine::executable() const { return impl_->executable(); }
const std::shared_ptr<Device>& VirtualMachine::device(int slot) const { return impl_->device(slot); }
Counters VirtualMachine::counters() const { return impl_->counters(); }
void VirtualMachine::ResetCounters() { impl_->ResetCounters(); }
const Counters& VirtualMachine::constant_counters() const { return impl_->constant_counters(); }
size_t VirtualMachine::pool_high_water_bytes(int slot) const { return impl_->pool_high_water_bytes(slot); }

namespace {

// The entry of a shape function the executable carries: its own mask, and
// no native code. Signatures it was not compiled for are compiled by the
// registration of the same shape function in this process, if there is one.
ShapeFuncEntryPtr CarriedEntry(const ShapeFuncUse& use, const CarriedShapeFunc& carried) {
  auto entry = std::make_shared<ShapeFuncEntry>();
  entry->name = use.op;
  entry->mask = use.mask;
  entry->arity = static_cast<int>(use.mask.size());
  entry->num_outputs = carried.num_outputs;
  ShapeFuncRegistry& registry = ShapeFuncRegistry::Global();
  if (registry.Contains(use.op)) {
    ShapeFuncEntryPtr registered = registry.Lookup(use.op);
    if (registered->native == nullptr && registered->mask == use.mask) entry->compiler = registered->compiler;
  }
  return entry;
}

// The registry's entry for a shape function the executable calls but does
// not carry: it must have the mask the program was compiled under, since the
// program copies exactly the inputs that mask names.
ShapeFuncEntryPtr RegisteredEntry(const ShapeFuncUse& use) {
  ShapeFuncEntryPtr registered = ShapeFuncRegistry::Global().Lookup(use.op);
  if (registered->mask != use.mask) {
    Fail(ErrorKind::kValue, "the executable was compiled with data-dependence mask " + FormatMask(use.mask) + " for '" +
                                use.op + "', but this process registers " + FormatMask(registered->mask) +
                                ": compile it again, or register the mask it was compiled with");
  }
  return registered;
}

}  // namespace

VirtualMachine::Impl::Impl(std::shared_ptr<const Executable> exe, std::shared_ptr<Device> device, VMOptions options,
                           const std::map<std::string, tvm::ffi::Function>& kernels)
    : exe_(std::move(exe)), checks_(exe_), options_(options) {
  RequireDeviceCode(*exe_, DeviceCodeOf(device->kernel_device()), device->name());
  RequireCpuFeatures(exe_->host_cpu_features());
  devices_[kHostSlot] = HostDevice();
  devices_[kExecutionSlot] = device;
  pools_[kHostSlot] = std::make_shared<MemoryPool>(devices_[kHostSlot]);
  pools_[kExecutionSlot] = device->is_host() ? pools_[kHostSlot] : std::make_shared<MemoryPool>(device);
  idle_.Own(pools_[kHostSlot].get());
  if (pools_[kExecutionSlot] != pools_[kHostSlot]) idle_.Own(pools_[kExecutionSlot].get());

  for (const std::string& name : exe_->kernels()) {
    auto it = kernels.find(name);
    if (it != kernels.end()) {
      kernels_.push_back(it->second);
      kernel_takes_tensors_.push_back(false);
      continue;
    }
    auto global = tvm::ffi::Function::GetGlobal(name);
    if (!global.has_value()) {
      Fail(ErrorKind::kKey,
           "kernel '" + name + "' is neither in the executable's library nor a registered global function");
    }
    kernels_.push_back(*global);
    kernel_takes_tensors_.push_back(true);
  }
  compiled_.resize(exe_->shape_funcs().size());
  for (size_t i = 0; i < exe_->shape_funcs().size(); ++i) {
    const CarriedShapeFunc* carried = exe_->CarriedShapeFuncOf(i);
    if (carried == nullptr) {
      shape_funcs_.push_back(RegisteredEntry(exe_->shape_funcs()[i]));
      continue;
    }
    shape_funcs_.push_back(CarriedEntry(exe_->shape_funcs()[i], *carried));
    for (const CarriedShapeFunc::Build& build : carried->builds) {
      compiled_[i].push_back(CompiledShapeFunc{ParseShapeFuncSignature(build.signature),
                                               kernels_[static_cast<size_t>(build.kernel)], build.out_ndims});
    }
  }
  for (const ShapeFuncEntryPtr& entry : shape_funcs_) {
    const bool all = options_.dependence == Dependence::kPerOp && entry->AnyValue();
    uint64_t bits = 0;
    const int known = entry->arity < 0 ? 64 : std::min(entry->arity, 64);
    for (int i = 0; i < known; ++i) bits |= static_cast<uint64_t>(all || entry->NeedsValue(i)) << i;
    shape_func_plans_.push_back(ShapeFuncPlan{entry.get(), entry->native, bits, all});
  }
  guard_host_shape_work_ = devices_[kExecutionSlot]->guards_host_shape_work();
  // What the dispatch loop relies on about these shape functions is proven
  // here, once, with the rest of verification.
  code_ = Link(*exe_, shape_funcs_);

  // Constants go to their device once, now; what that costs is kept apart
  // from the counters of calls.
  for (const ConstantDef& c : exe_->constants()) {
    TensorRef t = AllocTensor(pools_[c.device_slot], c.shape, c.dtype);
    const auto& dev = devices_[c.device_slot];
    double seconds = dev->CopyFromHost(t->data(), c.bytes.data(), c.bytes.size());
    if (!dev->is_host()) {
      constant_counters_.h2d_copies += 1;
      constant_counters_.h2d_bytes += static_cast<int64_t>(c.bytes.size());
      constant_counters_.modelled_transfer_s += seconds;
    }
    constant_counters_.allocations += 1;
    constants_.push_back(Value::Tensor(std::move(t)));
  }
}

Counters VirtualMachine::Impl::counters() const {
  std::lock_guard<std::mutex> lock(call_mutex_);
  return counters_;
}

void VirtualMachine::Impl::ResetCounters() {
  std::lock_guard<std::mutex> lock(call_mutex_);
  counters_ = Counters();
}

size_t VirtualMachine::Impl::pool_high_water_bytes(int slot) const {
  if (slot < 0 || slot >= kNumDeviceSlots) Fail(ErrorKind::kIndex, "device slot out of range");
  return pools_[slot]->high_water_bytes();
}

Value VirtualMachine::Impl::Invoke(int function_index, std::vector<Value> args, Profiler* profiler) {
  if (function_index < 0 || function_index >= static_cast<int>(exe_->functions().size())) {
    Fail(ErrorKind::kIndex, "function index " + std::to_string(function_index) + " out of range");
  }
  // Device first, then VM: the one lock order, so two VMs cannot deadlock.
  std::unique_lock<std::recursive_mutex> device_lock;
  if (std::recursive_mutex* m = devices_[kExecutionSlot]->exclusive_use_mutex()) {
    device_lock = std::unique_lock<std::recursive_mutex>(*m);
  }
  std::lock_guard<std::mutex> lock(call_mutex_);
  const FunctionDef& fn = exe_->functions()[static_cast<size_t>(function_index)];
  // The profiler is this call's alone: cleared however the call ends, and
  // its device timing (which may hold the device's attention) stopped.
  struct ProfilerScope {
    Profiler*& slot;
    ~ProfilerScope() {
      if (slot != nullptr) slot->EndDeviceTiming();
      slot = nullptr;
    }
  } scope{profiler_};
  profiler_ = profiler;
  if (profiler_ != nullptr) profiler_->BeginCall(fn.name, *devices_[kExecutionSlot], counters_);
  CheckArguments(fn, args);
  // The outermost call's registers are reused from call to call (a frame as
  // large as the program is costly to allocate and zero); what a call leaves
  // in them is dropped when it ends, however it ends.
  const size_t num_registers = static_cast<size_t>(fn.num_registers);
  if (frame_.size() < num_registers) frame_.resize(num_registers);
  struct FrameScope {
    std::vector<Value>& regs;
    size_t n;
    ~FrameScope() {
      for (size_t i = 0; i < n; ++i) {
        if (regs[i].kind != Value::Kind::kEmpty) regs[i] = Value();
      }
    }
  } frame_scope{frame_, num_registers};
  checks_.BeginCall();
  for (const Value& arg : args) InheritChecks(arg);
  for (size_t i = 0; i < args.size(); ++i) frame_[i] = std::move(args[i]);
  call_start_instructions_ = counters_.instructions;
  Value result;
  try {
    result = Run(function_index, frame_, 0);
  } catch (const Error& e) {
    // An index out of range on the device is the likelier cause of what
    // failed after it (sizes read back from wrong data): it is raised instead.
    if (checks_.any() && e.kind() != ErrorKind::kInterrupted && e.kind() != ErrorKind::kIndex) {
      try {
        SyncWith(*devices_[kExecutionSlot]);
      } catch (const Error&) {
        checks_.AbandonCall();
        throw;
      }
    }
    checks_.AbandonCall();
    throw;
  } catch (...) {
    checks_.AbandonCall();
    throw;
  }
  if (std::shared_ptr<const DeviceChecks> checks = checks_.EndCall()) result = WithChecks(std::move(result), checks);
  // What the call queued runs while the caller goes on.
  devices_[kExecutionSlot]->Flush();
  if (profiler_ != nullptr) profiler_->EndCall(counters_);
  return result;
}

Value VirtualMachine::Impl::WithChecks(Value result, const std::shared_ptr<const DeviceChecks>& checks, int depth) {
  if (result.kind == Value::Kind::kTensor) {
    // A copy of the tensor object: the same memory, whatever else (a
    // constant, an argument passed through) holds the object keeps its own checks.
    auto t = std::make_shared<TensorObj>(*result.tensor);
    t->checks = checks;
    result.tensor = std::move(t);
  } else if (result.kind == Value::Kind::kTuple && depth < 64) {
    std::vector<Value> fields;
    for (const Value& v : *result.tuple) fields.push_back(WithChecks(v, checks, depth + 1));
    result = Value::Tuple(std::move(fields));
  }
  return result;
}

void VirtualMachine::Impl::InheritChecks(const Value& arg, int depth) {
  if (arg.kind == Value::Kind::kTensor) {
    if (arg.tensor->checks) checks_.Inherit(*arg.tensor);
  } else if (arg.kind == Value::Kind::kTuple && depth < 64) {
    for (const Value& v : *arg.tuple) InheritChecks(v, depth + 1);
  }
}

void VirtualMachine::Impl::CheckArguments(const FunctionDef& fn, std::vector<Value>& args) {
  if (args.size() != fn.params.size()) {
    Fail(ErrorKind::kType, "'" + fn.name + "' takes " + std::to_string(fn.params.size()) + " arguments, got " +
                               std::to_string(args.size()));
  }
  // Sizes bound by earlier dimensions; on the stack for the usual few symbols.
  int64_t small_symbols[8];
  std::vector<int64_t> many_symbols;
  int64_t* symbols = small_symbols;
  if (fn.symbols.size() > 8) {
    many_symbols.resize(fn.symbols.size());
    symbols = many_symbols.data();
  }
  std::fill(symbols, symbols + fn.symbols.size(), -1);
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamSpec& p = fn.params[i];
    if (p.device_slot == kAnySlot) continue;
    // Built only for an error: on the call path, formatting it costs more than the check.
    auto where = [&] { return "'" + fn.name + "' argument " + std::to_string(i) + " ('" + p.name + "')"; };
    if (args[i].kind != Value::Kind::kTensor) {
      Fail(ErrorKind::kType, where() + " must be a tensor, got " + KindName(args[i].kind));
    }
    const TensorObj& t = *args[i].tensor;
    if (t.dtype.code != p.dtype.code || t.dtype.bits != p.dtype.bits || t.dtype.lanes != p.dtype.lanes) {
      Fail(ErrorKind::kType,
           where() + " must have dtype " + DTypeToString(p.dtype) + ", got " + DTypeToString(t.dtype));
    }
    if (t.shape.size() != p.dims.size()) {
      Fail(ErrorKind::kValue, where() + " must have rank " + std::to_string(p.dims.size()) + ", got rank " +
                                  std::to_string(t.shape.size()));
    }
    for (size_t d = 0; d < p.dims.size(); ++d) {
      int64_t want = p.dims[d];
      int64_t got = t.shape[d];
      if (want >= 0) {
        if (got != want) {
          Fail(ErrorKind::kValue, where() + " dimension " + std::to_string(d) + " must be " + std::to_string(want) +
                                      ", got " + std::to_string(got));
        }
        continue;
      }
      size_t s = static_cast<size_t>(-1 - want);
      if (symbols[s] < 0) {
        symbols[s] = got;
      } else if (symbols[s] != got) {
        Fail(ErrorKind::kValue, where() + " dimension " + std::to_string(d) + " is " + std::to_string(got) + " but '" +
                                    fn.symbols[s] + "' is " + std::to_string(symbols[s]) +
                                    " from an earlier dimension");
      }
    }
    if (t.device() != devices_[p.device_slot]) {
      // A tensor on another device than this VM's (a host VM included) is
      // refused: it is copied only between the host and this VM's device.
      if (!t.device()->is_host() && t.device() != devices_[kExecutionSlot]) {
        const std::string& mine = devices_[kExecutionSlot]->name();
        Fail(ErrorKind::kValue,
             where() + " is on device '" + t.device()->name() + "', " +
                 (t.device()->name() == mine ? "another instance than this VM's" : "this VM runs on '" + mine + "'") +
                 "; pass tensor.numpy() to copy it through the host");
      }
      args[i] = Value::Tensor(CopyTo(args[i].tensor, p.device_slot));
    } else if (reinterpret_cast<uintptr_t>(t.data()) % kKernelBufferAlignment != 0) {
      args[i] = Value::Tensor(AlignedHostCopy(t));
    }
  }
}

TensorRef VirtualMachine::Impl::AlignedHostCopy(const TensorObj& t) {
  // Part of taking the argument, like lending it, not an allocation of the
  // program: whether one is needed depends on where the caller's allocator
  // put the array. So it is neither counted nor taken from the pools.
  const size_t nbytes = t.nbytes();
  const size_t rounded = (nbytes / kKernelBufferAlignment + 1) * kKernelBufferAlignment;
  void* data = std::aligned_alloc(kKernelBufferAlignment, rounded);
  if (data == nullptr) Fail(ErrorKind::kMemory, "out of host memory copying an argument");
  std::memcpy(data, t.data(), nbytes);
  DLTensor view{data,
                DLDevice{kDLCPU, 0},
                static_cast<int32_t>(t.shape.size()),
                t.dtype,
                const_cast<int64_t*>(t.shape.data()),
                nullptr,
                0};
  return WrapHostTensor(
      view, [](void* p) { std::free(p); }, data);
}

void VirtualMachine::Impl::OnBackwardJump() {
  if (options_.max_instructions > 0 && counters_.instructions - call_start_instructions_ > options_.max_instructions) {
    Fail(ErrorKind::kRuntime,
         "the call exceeded its budget of " + std::to_string(options_.max_instructions) + " instructions");
  }
  // Checking for Ctrl-C takes the GIL, so only every 4096th loop iteration.
  if ((++backward_jumps_ & 4095u) == 0 && TVMFFIEnvCheckSignals() != 0) {
    Fail(ErrorKind::kInterrupted, "interrupted while the VM ran");
  }
}

TensorRef VirtualMachine::Impl::CopyTo(const TensorRef& src, int slot) {
  const auto& target = devices_[slot];
  if (src->device() == target) return src;
  if (target->is_host()) {
    TensorRef dst = StageToHost(src);
    SyncWith(*src->device());
    return dst;
  }
  if (!src->device()->is_host()) {
    Fail(ErrorKind::kValue, "cannot copy between devices '" + src->device()->name() + "' and '" + target->name() + "'");
  }
  TensorRef dst = Allocate(slot, src->shape, src->dtype, "copy_buffer");
  size_t n = src->nbytes();
  const int64_t start = profiler_ != nullptr ? profiler_->StartDeviceWork(*target) : 0;
  double modelled_s = target->CopyFromHost(dst->data(), src->data(), n);
  counters_.modelled_transfer_s += modelled_s;
  counters_.h2d_copies += 1;
  counters_.h2d_bytes += static_cast<int64_t>(n);
  if (profiler_ != nullptr) profiler_->Copy(false, *target, static_cast<int64_t>(n), modelled_s, start);
  return dst;
}

}  // namespace shapefn
