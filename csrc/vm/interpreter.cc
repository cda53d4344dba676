// The dispatch loop and the handlers of the instructions that do real work.
// Operand indices were proven in range by Executable::Verify.
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstring>

#include "shapefn/error.h"
#include "shapefn/vm.h"

namespace shapefn {

namespace {

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

DLTensor HostView(const TensorObj& t) {
  DLTensor d = t.AsDLTensor();
  d.device = DLDevice{kDLCPU, 0};
  return d;
}

// Shape-only inputs of a TVM-compiled shape function get this as their data
// pointer: verified never to be read, but TVM's argument checks want non-null.
alignas(64) int64_t kNeverRead[8] = {0};

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
      case Opcode::kKill:
        regs[ins.op_at(0)] = Value();
        break;
      case Opcode::kAllocStorage: {
        int64_t nbytes = IntOf(ins, regs[ins.op_at(2)]);
        if (nbytes < 0) Fail(ErrorKind::kValue, "alloc_storage of negative size " + std::to_string(nbytes));
        regs[ins.op_at(0)] = Value::Tensor(
            AllocTensor(pools_[ins.op_at(1)], ShapeVec{nbytes}, DLDataType{kDLUInt, 8, 1}));
        counters_.allocations += 1;
        break;
      }
      case Opcode::kAllocTensor: {
        const ShapeVec& shape = ShapeOf(ins, regs[ins.op_at(2)]);
        regs[ins.op_at(0)] = Value::Tensor(AllocTensor(pools_[ins.op_at(1)], shape, DecodeDType(ins.op_at(3))));
        counters_.allocations += 1;
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
  TensorRef h = AllocTensor(pools_[kHostSlot], src->shape, src->dtype);
  size_t nbytes = src->nbytes();
  counters_.modelled_transfer_s += src->device()->CopyToHost(h->data(), src->data(), nbytes);
  counters_.d2h_copies += 1;
  counters_.d2h_bytes += static_cast<int64_t>(nbytes);
  counters_.allocations += 1;
  return h;
}

void VirtualMachine::ExecInvokeKernel(const Instruction& ins, std::vector<Value>& regs) {
  size_t k = static_cast<size_t>(ins.op_at(0));
  const int64_t n = ins.list_size(0);
  const int64_t* args = ins.list(0);
  scratch_tensors_.clear();
  scratch_tensors_.reserve(static_cast<size_t>(n));
  scratch_args_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const Value& v = regs[args[i]];
    switch (v.kind) {
      case Value::Kind::kTensor:
        scratch_tensors_.push_back(v.tensor->AsDLTensor());
        scratch_args_.emplace_back(&scratch_tensors_.back());
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
  tvm::ffi::Any rv;
  try {
    kernels_[k].CallPacked(scratch_args_.data(), static_cast<int32_t>(scratch_args_.size()), &rv);
  } catch (const tvm::ffi::Error& e) {
    Fail(ErrorKind::kRuntime, "kernel '" + exe_->kernels[k] + "' failed: " + e.kind() + ": " + e.message());
  }
  counters_.kernel_calls += 1;
}

void VirtualMachine::ExecInvokeShapeFunc(const Instruction& ins, std::vector<Value>& regs) {
  size_t sf = static_cast<size_t>(ins.op_at(0));
  const ShapeFuncEntry& entry = *shape_funcs_[sf];
  const int n_in = static_cast<int>(ins.list_size(0));
  const int64_t* in = ins.list(0);
  const int n_out = static_cast<int>(ins.list_size(1));
  const int64_t* out = ins.list(1);
  const bool per_op = options_.dependence == Dependence::kPerOp && entry.AnyValue();

  std::vector<ShapeFuncInput> inputs(static_cast<size_t>(n_in));
  std::vector<DLTensor> values(static_cast<size_t>(n_in));
  std::vector<ShapeVec> host_shapes(static_cast<size_t>(n_in));
  std::vector<TensorRef> staged;
  Device* wait_on = nullptr;
  for (int i = 0; i < n_in; ++i) {
    const Value& v = regs[in[i]];
    const bool wants_value = entry.NeedsValue(i);
    ShapeFuncInput& input = inputs[static_cast<size_t>(i)];
    DLTensor& value = values[static_cast<size_t>(i)];
    switch (v.kind) {
      case Value::Kind::kTensor: {
        const TensorObj& t = *v.tensor;
        input = ShapeFuncInput{t.shape.data(), static_cast<int>(t.shape.size()), t.dtype, nullptr};
        if (!wants_value && !per_op) break;
        if (t.device()->is_host()) {
          value = HostView(t);
        } else {
          // Only this input's bytes cross; the sync waits for them once below.
          staged.push_back(StageToHost(v.tensor));
          wait_on = t.device().get();
          value = HostView(*staged.back());
        }
        input.value = &value;
        break;
      }
      case Value::Kind::kShape:
      case Value::Kind::kInt: {
        // Values already on the host: shapes are int64 vectors, ints scalars.
        bool scalar = v.kind == Value::Kind::kInt;
        host_shapes[static_cast<size_t>(i)] = scalar ? ShapeVec{} : ShapeVec{static_cast<int64_t>(v.shape.size())};
        const ShapeVec& meta = host_shapes[static_cast<size_t>(i)];
        value = DLTensor{const_cast<int64_t*>(scalar ? &v.i : v.shape.data()), DLDevice{kDLCPU, 0},
                         scalar ? 0 : 1, DLDataType{kDLInt, 64, 1}, const_cast<int64_t*>(meta.data()),
                         nullptr, 0};
        input = ShapeFuncInput{meta.data(), static_cast<int>(meta.size()), value.dtype, &value};
        break;
      }
      default:
        Fail(ErrorKind::kType, "shape function of '" + entry.name + "' input " + std::to_string(i) +
                                   " is " + KindName(v.kind));
    }
  }
  if (wait_on != nullptr) {
    wait_on->Sync();
    counters_.syncs += 1;
  }

  std::vector<ShapeVec> results;
  Device& device = *devices_[kExecutionSlot];
  if (entry.native != nullptr) {
    ShapeFuncAttrs attrs{ins.list(2), static_cast<int>(ins.list_size(2))};
    device.BeginHostShapeWork();
    try {
      entry.native(inputs.data(), n_in, attrs, &results);
    } catch (...) {
      device.EndHostShapeWork();
      throw;
    }
    device.EndHostShapeWork();
  } else {
    // A shape function written in Python: TVM-compiled per input signature.
    std::string signature;
    for (int i = 0; i < n_in; ++i) {
      if (i) signature += ",";
      signature += DTypeToString(inputs[static_cast<size_t>(i)].dtype) + ":" + std::to_string(inputs[static_cast<size_t>(i)].ndim);
    }
    auto& cache = compiled_[sf];
    auto it = cache.find(signature);
    if (it == cache.end()) {
      CompiledShapeFunc compiled;
      try {
        auto result = entry.compiler(signature).cast<tvm::ffi::Array<tvm::ffi::Any>>();
        compiled.fn = result[0].cast<tvm::ffi::Function>();
        for (size_t j = 1; j < result.size(); ++j) compiled.out_ndims.push_back(result[j].cast<int64_t>());
      } catch (const tvm::ffi::Error& e) {
        Fail(ErrorKind::kRuntime, "compiling the shape function of '" + entry.name + "' for (" + signature +
                                      ") failed: " + e.kind() + ": " + e.message());
      }
      it = cache.emplace(signature, std::move(compiled)).first;
    }
    const CompiledShapeFunc& compiled = it->second;
    results.resize(compiled.out_ndims.size());
    std::vector<DLTensor> arg_tensors;
    arg_tensors.reserve(static_cast<size_t>(n_in) + results.size());
    std::vector<int64_t> out_extent(results.size());
    for (int i = 0; i < n_in; ++i) {
      const ShapeFuncInput& input = inputs[static_cast<size_t>(i)];
      if (input.value != nullptr) {
        arg_tensors.push_back(*input.value);
      } else {
        arg_tensors.push_back(DLTensor{kNeverRead, DLDevice{kDLCPU, 0}, input.ndim, input.dtype,
                                       const_cast<int64_t*>(input.shape), nullptr, 0});
      }
    }
    for (size_t j = 0; j < results.size(); ++j) {
      results[j].assign(static_cast<size_t>(compiled.out_ndims[j]), 0);
      out_extent[j] = compiled.out_ndims[j];
      arg_tensors.push_back(DLTensor{results[j].data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLInt, 64, 1},
                                     &out_extent[j], nullptr, 0});
    }
    std::vector<tvm::ffi::AnyView> args;
    for (DLTensor& t : arg_tensors) args.emplace_back(&t);
    tvm::ffi::Any rv;
    device.BeginHostShapeWork();
    try {
      compiled.fn.CallPacked(args.data(), static_cast<int32_t>(args.size()), &rv);
    } catch (const tvm::ffi::Error& e) {
      device.EndHostShapeWork();
      Fail(ErrorKind::kRuntime, "shape function of '" + entry.name + "' failed: " + e.kind() + ": " + e.message());
    }
    device.EndHostShapeWork();
  }
  counters_.shape_func_calls += 1;

  if (static_cast<int>(results.size()) != n_out) {
    Fail(ErrorKind::kValue, "shape function of '" + entry.name + "' returned " + std::to_string(results.size()) +
                                " shapes, the program expects " + std::to_string(n_out));
  }
  for (int j = 0; j < n_out; ++j) {
    for (int64_t d : results[static_cast<size_t>(j)]) {
      if (d < 0) {
        Fail(ErrorKind::kValue, "shape function of '" + entry.name + "' returned a negative dimension " +
                                    std::to_string(d) + " for output " + std::to_string(j));
      }
    }
    regs[out[j]] = Value::Shape(std::move(results[static_cast<size_t>(j)]));
  }
}

void VirtualMachine::ExecReadback(const Instruction& ins, std::vector<Value>& regs) {
  const int64_t n = ins.list_size(0);
  std::vector<TensorRef> host(static_cast<size_t>(n));
  Device* wait_on = nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const TensorRef& src = TensorOf(ins, regs[ins.list(1)[i]]);
    if (src->dtype.code != kDLInt && src->dtype.code != kDLUInt && src->dtype.code != kDLBool) {
      Fail(ErrorKind::kType, "readback reads integer or bool tensors, got " + DTypeToString(src->dtype));
    }
    if (src->device()->is_host()) {
      host[static_cast<size_t>(i)] = src;
      continue;
    }
    host[static_cast<size_t>(i)] = StageToHost(src);
    wait_on = src->device().get();
  }
  // All readbacks of one instruction wait on the device once.
  if (wait_on != nullptr) {
    wait_on->Sync();
    counters_.syncs += 1;
  }
  for (int64_t i = 0; i < n; ++i) {
    const TensorObj& t = *host[static_cast<size_t>(i)];
    DLTensor view = HostView(t);
    if (t.shape.empty()) {
      regs[ins.list(0)[i]] = Value::Int(ValueAsInt64(view, 0));
    } else {
      ShapeVec s(static_cast<size_t>(t.numel()));
      for (size_t j = 0; j < s.size(); ++j) s[j] = ValueAsInt64(view, static_cast<int64_t>(j));
      regs[ins.list(0)[i]] = Value::Shape(std::move(s));
    }
  }
}

}  // namespace shapefn
