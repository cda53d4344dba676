// The dispatch loop and the handlers of the instructions that do real work.
// Operand indices were proven in range by Executable::Verify.
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstring>
#include <new>

#include "shapefn/error.h"
#include "shapefn/vm.h"

namespace shapefn {

namespace {

// The registers all frames of nested calls may hold together (~300 MB).
constexpr int64_t kMaxCallStackRegisters = int64_t{1} << 22;

// Counts a callee's frame in the call stack's registers while it lives.
class FrameRegisters {
 public:
  FrameRegisters(int64_t& total, int64_t n) : total_(total), n_(n) { total_ += n_; }
  ~FrameRegisters() { total_ -= n_; }

 private:
  int64_t& total_;
  int64_t n_;
};

[[noreturn]] void KindError(const Instruction& ins, const char* want, const Value& got) {
  Fail(ErrorKind::kType, std::string(GetOpInfo(ins.op).mnemonic) + " expects " + want + ", got " +
                             KindName(got.kind));
}

int64_t IntOf(const Instruction& ins, const Value& v) {
  if (v.kind != Value::Kind::kInt) KindError(ins, "an int", v);
  return v.i;
}
const ShapeVec& ShapeOf(const Instruction& ins, const Value& v) {
  if (v.kind != Value::Kind::kShape) KindError(ins, "a shape", v);
  return v.shape;
}
const TensorRef& TensorOf(const Instruction& ins, const Value& v) {
  if (v.kind != Value::Kind::kTensor) KindError(ins, "a tensor", v);
  return v.tensor;
}

// Element `index` of a shape (negative counts from the end).
int64_t DimAt(const Instruction& ins, const ShapeVec& shape, int64_t index) {
  int64_t i = index < 0 ? index + static_cast<int64_t>(shape.size()) : index;
  if (i < 0 || i >= static_cast<int64_t>(shape.size())) {
    Fail(ErrorKind::kIndex, std::string(GetOpInfo(ins.op).mnemonic) + ": index " + std::to_string(index) +
                                " out of range for rank " + std::to_string(shape.size()));
  }
  return shape[static_cast<size_t>(i)];
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == 0) Fail(ErrorKind::kValue, "floordiv by zero in shape arithmetic");
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == 0) Fail(ErrorKind::kValue, "floormod by zero in shape arithmetic");
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int64_t CheckedArith(Opcode op, int64_t a, int64_t b) {
  int64_t r = 0;
  bool overflow = false;
  switch (op) {
    case Opcode::kAdd: overflow = __builtin_add_overflow(a, b, &r); break;
    case Opcode::kSub: overflow = __builtin_sub_overflow(a, b, &r); break;
    case Opcode::kMul: overflow = __builtin_mul_overflow(a, b, &r); break;
    case Opcode::kFloorDiv: return FloorDiv(a, b);
    case Opcode::kFloorMod: return FloorMod(a, b);
    case Opcode::kMin: return a < b ? a : b;
    case Opcode::kMax: return a < b ? b : a;
    case Opcode::kLt: return a < b;
    case Opcode::kEq: return a == b;
    default: break;
  }
  if (overflow) Fail(ErrorKind::kValue, std::string(GetOpInfo(op).mnemonic) + " overflows int64 in shape arithmetic");
  return r;
}

// Stores a tensor in a register without building a temporary Value: every
// op of a program allocates its output through here.
void SetTensor(Value& dst, TensorRef t) {
  if (dst.kind != Value::Kind::kTensor && dst.kind != Value::Kind::kEmpty) dst = Value();
  dst.kind = Value::Kind::kTensor;
  dst.tensor = std::move(t);
}

[[gnu::always_inline]] inline void CallKernel(const tvm::ffi::Function& kernel,
                                              const std::vector<tvm::ffi::AnyView>& args, const std::string& name) {
  tvm::ffi::Any rv;
  try {
    kernel.CallPacked(args.data(), static_cast<int32_t>(args.size()), &rv);
  } catch (const tvm::ffi::Error& e) {
    FailFromCaught(ErrorKind::kRuntime, "kernel '" + name + "' failed: " + e.kind() + ": " + e.message());
  }
}

// A killed tensor of the right size class if there is one, else a new block.
[[gnu::always_inline]] inline TensorRef TakeOrAllocate(IdleTensors& idle, const std::shared_ptr<MemoryPool>& pool,
                                                       const ShapeVec& shape, DLDataType dtype) {
  TensorRef t = idle.Take(*pool, shape, dtype);
  if (!t) t = AllocTensor(pool, shape, dtype);
  return t;
}

// The profiled twins of the two events every op has, kept out of line so
// that the unprofiled path is the same code plus one test of the profiler.
[[gnu::noinline, gnu::cold]] void ProfiledCallKernel(Profiler& profiler, const tvm::ffi::Function& kernel,
                                                     const std::vector<tvm::ffi::AnyView>& args,
                                                     const std::string& name, const Device& device) {
  const int64_t start = profiler.Now();
  CallKernel(kernel, args, name);
  profiler.Kernel(name, device, start);
}

[[gnu::noinline, gnu::cold]] TensorRef ProfiledTakeOrAllocate(Profiler& profiler, const char* op, IdleTensors& idle,
                                                              const std::shared_ptr<MemoryPool>& pool,
                                                              const ShapeVec& shape, DLDataType dtype) {
  const int64_t start = profiler.Now();
  const int64_t from_device_before = pool->device_allocations();
  TensorRef t = TakeOrAllocate(idle, pool, shape, dtype);
  profiler.Alloc(op, *pool->device(), static_cast<int64_t>(t->nbytes()),
                 pool->device_allocations() == from_device_before, start);
  return t;
}

// Lends a VM tensor to a tvm-ffi callee as an owning Tensor: it holds the
// VM's reference while the callee (or anything it hands the Tensor to) keeps it.
struct LentStorage {
  TensorRef tensor;
  void AllocData(DLTensor* t) { t->data = tensor->data(); }
  void FreeData(DLTensor*) {}
};

tvm::ffi::Tensor LendTensor(const TensorRef& t) {
  return tvm::ffi::Tensor::FromNDAlloc(LentStorage{t}, tvm::ffi::Shape(t->shape.begin(), t->shape.end()), t->dtype,
                                       t->device()->kernel_device());
}

// Where a kernel ran, for the profiler: the device of its first tensor
// argument that is not on the host.
const Device& KernelDevice(const std::vector<Value>& regs, const int64_t* args, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Value& v = regs[args[i]];
    if (v.kind == Value::Kind::kTensor && !v.tensor->device()->is_host()) return *v.tensor->device();
  }
  return *HostDevice();
}

}  // namespace

Value VirtualMachine::Run(int function_index, std::vector<Value>& regs, int depth) {
  if (depth > options_.max_call_depth) {
    Fail(ErrorKind::kRuntime, "call depth exceeds " + std::to_string(options_.max_call_depth));
  }
  const FunctionDef& fn = exe_->functions[static_cast<size_t>(function_index)];
  const Instruction* code = fn.decoded.data();
  size_t pc = 0;
  while (true) {
    const Instruction& ins = code[pc];
    counters_.instructions += 1;
    switch (ins.op) {
      case Opcode::kMove:
        regs[ins.op_at(0)] = regs[ins.op_at(1)];
        break;
      case Opcode::kLoadInt:
        regs[ins.op_at(0)] = Value::Int(ins.op_at(1));
        break;
      case Opcode::kLoadConst:
        regs[ins.op_at(0)] = constants_[static_cast<size_t>(ins.op_at(1))];
        break;
      case Opcode::kLoadShape:
        regs[ins.op_at(0)] = Value::Shape(ShapeVec(ins.list(0), ins.list(0) + ins.list_size(0)));
        break;
      case Opcode::kKill: {
        Value& v = regs[ins.op_at(0)];
        if (v.kind == Value::Kind::kTensor) {
          idle_.Keep(v.tensor);  // the next allocation of its size reuses it
          v.tensor.reset();
          v.kind = Value::Kind::kEmpty;
        } else {
          v = Value();
        }
        break;
      }
      case Opcode::kAllocStorage: {
        int64_t nbytes = IntOf(ins, regs[ins.op_at(2)]);
        if (nbytes < 0) Fail(ErrorKind::kValue, "alloc_storage of negative size " + std::to_string(nbytes));
        regs[ins.op_at(0)] = Value::Tensor(
            Allocate(static_cast<int>(ins.op_at(1)), ShapeVec{nbytes}, DLDataType{kDLUInt, 8, 1}, "alloc_storage"));
        break;
      }
      case Opcode::kAllocTensor: {
        const ShapeVec& shape = ShapeOf(ins, regs[ins.op_at(2)]);
        SetTensor(regs[ins.op_at(0)],
                  Allocate(static_cast<int>(ins.op_at(1)), shape, DecodeDType(ins.op_at(3)), "alloc_tensor"));
        break;
      }
      case Opcode::kTensorInStorage: {
        const TensorRef& storage = TensorOf(ins, regs[ins.op_at(1)]);
        int64_t offset = IntOf(ins, regs[ins.op_at(2)]);
        auto t = std::make_shared<TensorObj>();
        t->shape = ShapeOf(ins, regs[ins.op_at(3)]);
        t->dtype = DecodeDType(ins.op_at(4));
        size_t need = CheckedNBytes(t->shape, t->dtype);
        if (offset < 0 || static_cast<size_t>(offset) > storage->nbytes() ||
            need > storage->nbytes() - static_cast<size_t>(offset)) {
          Fail(ErrorKind::kValue, "tensor_in_storage: " + std::to_string(need) + " bytes at offset " +
                                      std::to_string(offset) + " do not fit a storage of " +
                                      std::to_string(storage->nbytes()) + " bytes");
        }
        t->storage = storage->storage;
        t->byte_offset = storage->byte_offset + static_cast<size_t>(offset);
        const size_t alignment = storage->device()->tensor_offset_alignment();
        if (t->byte_offset % alignment != 0) {
          Fail(ErrorKind::kValue, "tensor_in_storage: offset " + std::to_string(t->byte_offset) + " on device '" +
                                      storage->device()->name() + "', which places tensors at multiples of " +
                                      std::to_string(alignment) + " bytes");
        }
        regs[ins.op_at(0)] = Value::Tensor(std::move(t));
        break;
      }
      case Opcode::kView: {
        const TensorRef& src = TensorOf(ins, regs[ins.op_at(1)]);
        auto t = std::make_shared<TensorObj>(*src);
        t->shape = ShapeOf(ins, regs[ins.op_at(2)]);
        if (CheckedNBytes(t->shape, t->dtype) > src->nbytes()) {
          Fail(ErrorKind::kValue, "view: the new shape needs more bytes than the tensor has");
        }
        regs[ins.op_at(0)] = Value::Tensor(std::move(t));
        break;
      }
      case Opcode::kInvokeKernel:
        ExecInvokeKernel(ins, regs);
        break;
      case Opcode::kInvokeShapeFunc:
        ExecInvokeShapeFunc(ins, regs);
        break;
      case Opcode::kCopy:
        regs[ins.op_at(0)] = Value::Tensor(CopyTo(TensorOf(ins, regs[ins.op_at(1)]), static_cast<int>(ins.op_at(2))));
        break;
      case Opcode::kReadback:
        ExecReadback(ins, regs);
        break;
      case Opcode::kShapeOf:
        regs[ins.op_at(0)] = Value::Shape(TensorOf(ins, regs[ins.op_at(1)])->shape);
        break;
      case Opcode::kShapeGet:
        regs[ins.op_at(0)] = Value::Int(DimAt(ins, ShapeOf(ins, regs[ins.op_at(1)]), ins.op_at(2)));
        break;
      case Opcode::kShapeMake: {
        ShapeVec s(static_cast<size_t>(ins.list_size(0)));
        for (size_t i = 0; i < s.size(); ++i) s[i] = IntOf(ins, regs[ins.list(0)[i]]);
        regs[ins.op_at(0)] = Value::Shape(std::move(s));
        break;
      }
      case Opcode::kShapeBuild: {
        ShapeVec s(static_cast<size_t>(ins.list_size(0)));
        const int64_t* pattern = ins.list(0);
        for (size_t i = 0; i < s.size(); ++i) {
          s[i] = pattern[i] >= 0 ? pattern[i] : IntOf(ins, regs[ins.list(1)[-1 - pattern[i]]]);
        }
        regs[ins.op_at(0)] = Value::Shape(std::move(s));
        break;
      }
      case Opcode::kTensorDim:
        regs[ins.op_at(0)] = Value::Int(DimAt(ins, TensorOf(ins, regs[ins.op_at(1)])->shape, ins.op_at(2)));
        break;
      case Opcode::kShapeNumel: {
        int64_t n = 1;
        for (int64_t d : ShapeOf(ins, regs[ins.op_at(1)])) n = CheckedArith(Opcode::kMul, n, d);
        regs[ins.op_at(0)] = Value::Int(n);
        break;
      }
      case Opcode::kAdd:
      case Opcode::kSub:
      case Opcode::kMul:
      case Opcode::kFloorDiv:
      case Opcode::kFloorMod:
      case Opcode::kMin:
      case Opcode::kMax:
      case Opcode::kLt:
      case Opcode::kEq:
        regs[ins.op_at(0)] = Value::Int(
            CheckedArith(ins.op, IntOf(ins, regs[ins.op_at(1)]), IntOf(ins, regs[ins.op_at(2)])));
        break;
      case Opcode::kMakeTuple: {
        std::vector<Value> fields(static_cast<size_t>(ins.list_size(0)));
        for (size_t i = 0; i < fields.size(); ++i) fields[i] = regs[ins.list(0)[i]];
        regs[ins.op_at(0)] = Value::Tuple(std::move(fields));
        break;
      }
      case Opcode::kGetItem: {
        const Value& t = regs[ins.op_at(1)];
        if (t.kind != Value::Kind::kTuple) KindError(ins, "a tuple", t);
        size_t i = static_cast<size_t>(ins.op_at(2));
        if (i >= t.tuple->size()) Fail(ErrorKind::kIndex, "get_item: index " + std::to_string(i) + " out of range for a tuple of " + std::to_string(t.tuple->size()));
        Value field = (*t.tuple)[i];
        regs[ins.op_at(0)] = std::move(field);
        break;
      }
      case Opcode::kCall: {
        int callee = static_cast<int>(ins.op_at(1));
        const FunctionDef& target = exe_->functions[static_cast<size_t>(callee)];
        // Checked before the frame is allocated: max_call_depth frames of up
        // to 2^20 registers each would exhaust memory first.
        if (target.num_registers > kMaxCallStackRegisters - call_stack_registers_) {
          Fail(ErrorKind::kRuntime, "nested calls hold more than " + std::to_string(kMaxCallStackRegisters) +
                                        " registers");
        }
        FrameRegisters held(call_stack_registers_, target.num_registers);
        std::vector<Value> frame(static_cast<size_t>(target.num_registers));
        for (int64_t i = 0; i < ins.list_size(0); ++i) frame[static_cast<size_t>(i)] = regs[ins.list(0)[i]];
        regs[ins.op_at(0)] = Run(callee, frame, depth + 1);
        break;
      }
      case Opcode::kIf:
        if (IntOf(ins, regs[ins.op_at(0)]) == 0) {
          size_t target = static_cast<size_t>(ins.op_at(1));
          if (target <= pc) OnBackwardJump();
          pc = target;
          continue;
        }
        break;
      case Opcode::kGoto: {
        size_t target = static_cast<size_t>(ins.op_at(0));
        if (target <= pc) OnBackwardJump();
        pc = target;
        continue;
      }
      case Opcode::kRet:
        return std::move(regs[ins.op_at(0)]);
      case Opcode::kCount:
        break;
    }
    ++pc;
  }
}

TensorRef VirtualMachine::StageToHost(const TensorRef& src) {
  TensorRef h = Allocate(kHostSlot, src->shape, src->dtype, "copy_buffer");
  size_t nbytes = src->nbytes();
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  double modelled_s = src->device()->CopyToHost(h->data(), src->data(), nbytes);
  counters_.modelled_transfer_s += modelled_s;
  counters_.d2h_copies += 1;
  counters_.d2h_bytes += static_cast<int64_t>(nbytes);
  if (profiler_ != nullptr) profiler_->Copy(true, *src->device(), static_cast<int64_t>(nbytes), modelled_s, start);
  return h;
}

TensorRef VirtualMachine::Allocate(int slot, const ShapeVec& shape, DLDataType dtype, const char* op) {
  TensorRef t = __builtin_expect(profiler_ != nullptr, 0)
                    ? ProfiledTakeOrAllocate(*profiler_, op, idle_, pools_[slot], shape, dtype)
                    : TakeOrAllocate(idle_, pools_[slot], shape, dtype);
  counters_.allocations += 1;
  return t;
}

void VirtualMachine::SyncWith(Device& device) {
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  device.Sync();
  counters_.syncs += 1;
  if (profiler_ != nullptr) profiler_->Sync(device, start);
}

void VirtualMachine::ExecInvokeKernel(const Instruction& ins, std::vector<Value>& regs) {
  size_t k = static_cast<size_t>(ins.op_at(0));
  const int64_t n = ins.list_size(0);
  const int64_t* args = ins.list(0);
  // Sized up front: the AnyViews below point into it.
  if (scratch_tensors_.size() < static_cast<size_t>(n)) scratch_tensors_.resize(static_cast<size_t>(n));
  DLTensor* next_tensor = scratch_tensors_.data();
  scratch_args_.clear();
  const bool lend = kernel_takes_tensors_[k];
  for (int64_t i = 0; i < n; ++i) {
    const Value& v = regs[args[i]];
    switch (v.kind) {
      case Value::Kind::kTensor:
        if (lend) {
          scratch_objects_.push_back(LendTensor(v.tensor));
          scratch_args_.emplace_back(scratch_objects_.back());
          break;
        }
        // Built in place (guaranteed copy elision): a DLTensor returned on the
        // stack and then copied stalls on store forwarding, a third of a call.
        ::new (next_tensor) DLTensor(v.tensor->AsDLTensor());
        scratch_args_.emplace_back(next_tensor++);
        break;
      case Value::Kind::kInt:
        scratch_args_.emplace_back(v.i);
        break;
      case Value::Kind::kShape:
        for (int64_t d : v.shape) scratch_args_.emplace_back(d);
        break;
      default:
        Fail(ErrorKind::kType, "kernel '" + exe_->kernels[k] + "' argument " + std::to_string(i) +
                                   " is " + KindName(v.kind) + "; kernels take tensors, ints and shapes");
    }
  }
  // The lent Tensors are released however the call ends.
  struct ReleaseLent {
    std::vector<tvm::ffi::Tensor>& objects;
    ~ReleaseLent() { objects.clear(); }
  } release{scratch_objects_};
  if (__builtin_expect(profiler_ != nullptr, 0)) {
    ProfiledCallKernel(*profiler_, kernels_[k], scratch_args_, exe_->kernels[k], KernelDevice(regs, args, n));
  } else {
    CallKernel(kernels_[k], scratch_args_, exe_->kernels[k]);
  }
  counters_.kernel_calls += 1;
}

void VirtualMachine::ExecReadback(const Instruction& ins, std::vector<Value>& regs) {
  const int64_t n = ins.list_size(0);
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  int64_t bytes = 0;
  std::vector<TensorRef> host(static_cast<size_t>(n));
  Device* wait_on = nullptr;
  const int64_t* forms = ins.list(2);
  for (int64_t i = 0; i < n; ++i) {
    const TensorRef& src = TensorOf(ins, regs[ins.list(1)[i]]);
    if (forms[i] == kReadValues && src->dtype.code != kDLInt && src->dtype.code != kDLUInt &&
        src->dtype.code != kDLBool) {
      Fail(ErrorKind::kType, "readback reads integer or bool tensors, got " + DTypeToString(src->dtype));
    }
    if (src->device()->is_host()) {
      host[static_cast<size_t>(i)] = src;
      continue;
    }
    host[static_cast<size_t>(i)] = StageToHost(src);
    bytes += static_cast<int64_t>(src->nbytes());
    wait_on = src->device().get();
  }
  // All readbacks of one instruction wait on the device once.
  if (wait_on != nullptr) SyncWith(*wait_on);
  for (int64_t i = 0; i < n; ++i) {
    if (forms[i] == kReadTensor) {
      regs[ins.list(0)[i]] = Value::Tensor(std::move(host[static_cast<size_t>(i)]));
      continue;
    }
    const TensorObj& t = *host[static_cast<size_t>(i)];
    DLTensor view = t.AsHostDLTensor();
    if (t.shape.empty()) {
      regs[ins.list(0)[i]] = Value::Int(ValueAsInt64(view, 0));
    } else {
      ShapeVec s(static_cast<size_t>(t.numel()));
      for (size_t j = 0; j < s.size(); ++j) s[j] = ValueAsInt64(view, static_cast<int64_t>(j));
      regs[ins.list(0)[i]] = Value::Shape(std::move(s));
    }
  }
  if (profiler_ != nullptr) profiler_->Readback(bytes, start);
}

}  // namespace shapefn
