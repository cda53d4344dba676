// The dispatch loop and the handlers of the instructions that do real work.
// Operands are read by name (isa.def); their indices were proven in range
// when the executable was verified and linked (verifier.cc).
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstring>
#include <new>

#include "shapefn/error.h"
#include "vm_impl.h"

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
  Fail(ErrorKind::kType, std::string(GetOpInfo(ins.op).mnemonic) + " expects " + want + ", got " + KindName(got.kind));
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

std::string ShapeText(const ShapeVec& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// match_shape: `shape` (of a tensor if `is_tensor`) has the rank and the
// sizes the instruction asks for.
void MatchShape(const Instruction& ins, const ShapeVec& shape, bool is_tensor, const std::vector<Value>& regs) {
  ops::MatchShape op(ins);
  const char* what = is_tensor ? "a tensor" : "a shape";
  if (static_cast<int64_t>(shape.size()) != op.rank()) {
    Fail(ErrorKind::kValue, std::string(what) + " of rank " + std::to_string(shape.size()) +
                                " where the program expects rank " + std::to_string(op.rank()));
  }
  const OperandList axes = op.axes();
  const OperandList pattern = op.pattern();
  const OperandList dims = op.dims();
  for (int64_t i = 0; i < axes.size; ++i) {
    int64_t want = pattern[i] >= 0 ? pattern[i] : IntOf(ins, regs[static_cast<size_t>(dims[-1 - pattern[i]])]);
    int64_t got = shape[static_cast<size_t>(axes[i])];
    if (got != want) {
      Fail(ErrorKind::kValue, std::string(what) + " of size " + std::to_string(got) + " along axis " +
                                  std::to_string(axes[i]) + " where the program expects " + std::to_string(want) +
                                  " (shape " + ShapeText(shape) + ")");
    }
  }
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == 0) Fail(ErrorKind::kValue, "floordiv by zero in shape arithmetic");
  if (b == -1 && a == INT64_MIN) Fail(ErrorKind::kValue, "floordiv overflows int64 in shape arithmetic");
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == 0) Fail(ErrorKind::kValue, "floormod by zero in shape arithmetic");
  if (b == -1) return 0;  // (C++'s % traps on INT64_MIN % -1)
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
    // A kernel refusing its arguments (TVM's checks raise ValueError) or a
    // user kernel raising ValueError, TypeError or IndexError keeps its kind.
    const std::string kind = e.kind();
    ErrorKind as = kind == "ValueError"   ? ErrorKind::kValue
                   : kind == "TypeError"  ? ErrorKind::kType
                   : kind == "IndexError" ? ErrorKind::kIndex
                                          : ErrorKind::kRuntime;
    FailFromCaught(as, "kernel '" + name + "' failed: " + kind + ": " + e.message());
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
  const int64_t start = profiler.StartDeviceWork(device);
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
const Device& KernelDevice(const std::vector<Value>& regs, OperandList args) {
  for (int64_t r : args) {
    const Value& v = regs[r];
    if (v.kind == Value::Kind::kTensor && !v.tensor->device()->is_host()) return *v.tensor->device();
  }
  return *HostDevice();
}

// The arithmetic instructions share one handler, reading them as `add`.
static_assert(ops::SameOperands(ops::kAddOperands, ops::kSubOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kMulOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kFloorDivOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kFloorModOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kMinOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kMaxOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kLtOperands) &&
              ops::SameOperands(ops::kAddOperands, ops::kEqOperands));

}  // namespace

Value VirtualMachine::Impl::Run(int function_index, std::vector<Value>& regs, int depth) {
  if (depth > options_.max_call_depth) {
    Fail(ErrorKind::kRuntime, "call depth exceeds " + std::to_string(options_.max_call_depth));
  }
  const Instruction* code = code_[static_cast<size_t>(function_index)].data();
  size_t pc = 0;
  try {
    while (true) {
      const Instruction& ins = code[pc];
      counters_.instructions += 1;
      switch (ins.op) {
        case Opcode::kMove: {
          ops::Move op(ins);
          regs[op.dst()] = regs[op.src()];
          break;
        }
        case Opcode::kLoadInt: {
          ops::LoadInt op(ins);
          regs[op.dst()] = Value::Int(op.value());
          break;
        }
        case Opcode::kLoadConst: {
          ops::LoadConst op(ins);
          regs[op.dst()] = constants_[static_cast<size_t>(op.constant())];
          break;
        }
        case Opcode::kLoadShape: {
          ops::LoadShape op(ins);
          regs[op.dst()] = Value::Shape(ShapeVec(op.dims().begin(), op.dims().end()));
          break;
        }
        case Opcode::kKill: {
          Value& v = regs[ops::Kill(ins).reg()];
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
          ops::AllocStorage op(ins);
          int64_t nbytes = IntOf(ins, regs[op.nbytes()]);
          if (nbytes < 0) Fail(ErrorKind::kValue, "alloc_storage of negative size " + std::to_string(nbytes));
          regs[op.dst()] = Value::Tensor(
              Allocate(static_cast<int>(op.device()), ShapeVec{nbytes}, DLDataType{kDLUInt, 8, 1}, "alloc_storage"));
          break;
        }
        case Opcode::kAllocTensor: {
          ops::AllocTensor op(ins);
          const ShapeVec& shape = ShapeOf(ins, regs[op.shape()]);
          SetTensor(regs[op.dst()],
                    Allocate(static_cast<int>(op.device()), shape, DecodeDType(op.dtype()), "alloc_tensor"));
          break;
        }
        case Opcode::kTensorInStorage: {
          ops::TensorInStorage op(ins);
          const TensorRef& storage = TensorOf(ins, regs[op.storage()]);
          int64_t offset = IntOf(ins, regs[op.offset()]);
          auto t = std::make_shared<TensorObj>();
          t->shape = ShapeOf(ins, regs[op.shape()]);
          t->dtype = DecodeDType(op.dtype());
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
          regs[op.dst()] = Value::Tensor(std::move(t));
          break;
        }
        case Opcode::kView: {
          ops::View op(ins);
          const TensorRef& src = TensorOf(ins, regs[op.tensor()]);
          auto t = std::make_shared<TensorObj>(*src);
          t->shape = ShapeOf(ins, regs[op.shape()]);
          if (CheckedNBytes(t->shape, t->dtype) > src->nbytes()) {
            Fail(ErrorKind::kValue, "view: the new shape needs more bytes than the tensor has");
          }
          regs[op.dst()] = Value::Tensor(std::move(t));
          break;
        }
        case Opcode::kInvokeKernel: ExecInvokeKernel(ins, regs); break;
        case Opcode::kInvokeShapeFunc: ExecInvokeShapeFunc(ins, regs); break;
        case Opcode::kCopy: {
          ops::Copy op(ins);
          regs[op.dst()] = Value::Tensor(CopyTo(TensorOf(ins, regs[op.src()]), static_cast<int>(op.device())));
          break;
        }
        case Opcode::kReadback: ExecReadback(ins, regs); break;
        case Opcode::kShapeOf: {
          ops::ShapeOf op(ins);
          regs[op.dst()] = Value::Shape(TensorOf(ins, regs[op.tensor()])->shape);
          break;
        }
        case Opcode::kShapeGet: {
          ops::ShapeGet op(ins);
          regs[op.dst()] = Value::Int(DimAt(ins, ShapeOf(ins, regs[op.shape()]), op.index()));
          break;
        }
        case Opcode::kShapeMake: {
          ops::ShapeMake op(ins);
          const OperandList dims = op.dims();
          ShapeVec s(static_cast<size_t>(dims.size));
          for (size_t i = 0; i < s.size(); ++i) s[i] = IntOf(ins, regs[dims[i]]);
          regs[op.dst()] = Value::Shape(std::move(s));
          break;
        }
        case Opcode::kShapeBuild: {
          ops::ShapeBuild op(ins);
          const OperandList pattern = op.pattern();
          const OperandList dims = op.dims();
          ShapeVec s(static_cast<size_t>(pattern.size));
          for (size_t i = 0; i < s.size(); ++i) {
            s[i] = pattern[i] >= 0 ? pattern[i] : IntOf(ins, regs[dims[-1 - pattern[i]]]);
          }
          regs[op.dst()] = Value::Shape(std::move(s));
          break;
        }
        case Opcode::kTensorDim: {
          ops::TensorDim op(ins);
          regs[op.dst()] = Value::Int(DimAt(ins, TensorOf(ins, regs[op.tensor()])->shape, op.axis()));
          break;
        }
        case Opcode::kShapeNumel: {
          ops::ShapeNumel op(ins);
          int64_t n = 1;
          for (int64_t d : ShapeOf(ins, regs[op.shape()])) n = CheckedArith(Opcode::kMul, n, d);
          regs[op.dst()] = Value::Int(n);
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
        case Opcode::kEq: {
          ops::Add op(ins);
          regs[op.dst()] = Value::Int(CheckedArith(ins.op, IntOf(ins, regs[op.lhs()]), IntOf(ins, regs[op.rhs()])));
          break;
        }
        case Opcode::kMakeTuple: {
          ops::MakeTuple op(ins);
          const OperandList src = op.fields();
          std::vector<Value> fields(static_cast<size_t>(src.size));
          for (size_t i = 0; i < fields.size(); ++i) fields[i] = regs[src[i]];
          regs[op.dst()] = Value::Tuple(std::move(fields));
          break;
        }
        case Opcode::kGetItem: {
          ops::GetItem op(ins);
          const Value& t = regs[op.tuple()];
          if (t.kind != Value::Kind::kTuple) KindError(ins, "a tuple", t);
          size_t i = static_cast<size_t>(op.index());
          if (i >= t.tuple->size())
            Fail(ErrorKind::kIndex, "get_item: index " + std::to_string(i) + " out of range for a tuple of " +
                                        std::to_string(t.tuple->size()));
          Value field = (*t.tuple)[i];
          regs[op.dst()] = std::move(field);
          break;
        }
        case Opcode::kCall: {
          ops::Call op(ins);
          int callee = static_cast<int>(op.function());
          const FunctionDef& target = exe_->functions()[static_cast<size_t>(callee)];
          // Checked before the frame is allocated: max_call_depth frames of up
          // to 2^20 registers each would exhaust memory first.
          if (target.num_registers > kMaxCallStackRegisters - call_stack_registers_) {
            Fail(ErrorKind::kRuntime,
                 "nested calls hold more than " + std::to_string(kMaxCallStackRegisters) + " registers");
          }
          FrameRegisters held(call_stack_registers_, target.num_registers);
          std::vector<Value> frame(static_cast<size_t>(target.num_registers));
          const OperandList args = op.args();
          for (int64_t i = 0; i < args.size; ++i) frame[static_cast<size_t>(i)] = regs[args[i]];
          regs[op.dst()] = Run(callee, frame, depth + 1);
          break;
        }
        case Opcode::kIf: {
          ops::If op(ins);
          if (IntOf(ins, regs[op.cond()]) == 0) {
            size_t target = static_cast<size_t>(op.target());
            if (target <= pc) OnBackwardJump();
            pc = target;
            continue;
          }
          break;
        }
        case Opcode::kGoto: {
          size_t target = static_cast<size_t>(ops::Goto(ins).target());
          if (target <= pc) OnBackwardJump();
          pc = target;
          continue;
        }
        case Opcode::kRet: return std::move(regs[ops::Ret(ins).value()]);
        case Opcode::kMatchShape: {
          const Value& v = regs[ops::MatchShape(ins).value()];
          bool is_tensor = v.kind == Value::Kind::kTensor;
          MatchShape(ins, is_tensor ? v.tensor->shape : ShapeOf(ins, v), is_tensor, regs);
          break;
        }
        case Opcode::kCheckRecord: {
          ops::CheckRecord op(ins);
          SetTensor(regs[op.dst()], checks_.RecordFor(devices_[op.device()]));
          break;
        }
        case Opcode::kCount: break;
      }
      ++pc;
    }
  } catch (const Error& e) {
    // The innermost function with a source for the failing instruction names it.
    const std::string& source = exe_->functions()[static_cast<size_t>(function_index)].SourceOf(pc);
    if (e.has_source() || source.empty() || e.kind() == ErrorKind::kInterrupted) throw;
    throw e.WithSource(source);
  }
}

TensorRef VirtualMachine::Impl::StageToHost(const TensorRef& src) {
  TensorRef h = Allocate(kHostSlot, src->shape, src->dtype, "copy_buffer");
  size_t nbytes = src->nbytes();
  const int64_t start = profiler_ != nullptr ? profiler_->StartDeviceWork(*src->device()) : 0;
  double modelled_s = src->device()->CopyToHost(h->data(), src->data(), nbytes);
  counters_.modelled_transfer_s += modelled_s;
  counters_.d2h_copies += 1;
  counters_.d2h_bytes += static_cast<int64_t>(nbytes);
  if (profiler_ != nullptr) profiler_->Copy(true, *src->device(), static_cast<int64_t>(nbytes), modelled_s, start);
  return h;
}

TensorRef VirtualMachine::Impl::Allocate(int slot, const ShapeVec& shape, DLDataType dtype, const char* op) {
  TensorRef t = __builtin_expect(profiler_ != nullptr, 0)
                    ? ProfiledTakeOrAllocate(*profiler_, op, idle_, pools_[slot], shape, dtype)
                    : TakeOrAllocate(idle_, pools_[slot], shape, dtype);
  counters_.allocations += 1;
  return t;
}

void VirtualMachine::Impl::SyncWith(Device& device) {
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  device.Sync();
  counters_.syncs += 1;
  if (profiler_ != nullptr) profiler_->Sync(device, start);
  // Before anything reads what the device computed: an index out of range
  // there made it wrong.
  if (checks_.any()) checks_.AfterSync(device);
}

void VirtualMachine::Impl::ExecInvokeKernel(const Instruction& ins, std::vector<Value>& regs) {
  ops::InvokeKernel op(ins);
  const size_t k = static_cast<size_t>(op.kernel());
  const OperandList args = op.args();
  const int64_t n = args.size;
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
      case Value::Kind::kInt: scratch_args_.emplace_back(v.i); break;
      case Value::Kind::kShape:
        for (int64_t d : v.shape) scratch_args_.emplace_back(d);
        break;
      default:
        Fail(ErrorKind::kType, "kernel '" + exe_->kernels()[k] + "' argument " + std::to_string(i) + " is " +
                                   KindName(v.kind) + "; kernels take tensors, ints and shapes");
    }
  }
  // The lent Tensors are released however the call ends.
  struct ReleaseLent {
    std::vector<tvm::ffi::Tensor>& objects;
    ~ReleaseLent() { objects.clear(); }
  } release{scratch_objects_};
  if (__builtin_expect(profiler_ != nullptr, 0)) {
    ProfiledCallKernel(*profiler_, kernels_[k], scratch_args_, exe_->kernels()[k], KernelDevice(regs, args));
  } else {
    CallKernel(kernels_[k], scratch_args_, exe_->kernels()[k]);
  }
  counters_.kernel_calls += 1;
  checks_.CheckHost();
}

void VirtualMachine::Impl::ExecReadback(const Instruction& ins, std::vector<Value>& regs) {
  ops::Readback op(ins);
  const OperandList dsts = op.dsts(), srcs = op.srcs(), forms = op.forms();
  const int64_t n = dsts.size;
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  int64_t bytes = 0;
  std::vector<TensorRef> host(static_cast<size_t>(n));
  Device* wait_on = nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const TensorRef& src = TensorOf(ins, regs[srcs[i]]);
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
      regs[dsts[i]] = Value::Tensor(std::move(host[static_cast<size_t>(i)]));
      continue;
    }
    const TensorObj& t = *host[static_cast<size_t>(i)];
    DLTensor view = t.AsHostDLTensor();
    if (t.shape.empty()) {
      regs[dsts[i]] = Value::Int(ValueAsInt64(view, 0));
    } else {
      ShapeVec s(static_cast<size_t>(t.numel()));
      for (size_t j = 0; j < s.size(); ++j) s[j] = ValueAsInt64(view, static_cast<int64_t>(j));
      regs[dsts[i]] = Value::Shape(std::move(s));
    }
  }
  if (profiler_ != nullptr) profiler_->Readback(bytes, start);
}

}  // namespace shapefn
