// invoke_shape_func: a shape function's inputs handed over as it declares
// them (shapes as metadata, values through the smallest copy), native or
// TVM-compiled, and its results checked before they become registers.
// Operand indices were proven in range when the executable was verified
// and linked (verifier.cc).
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstring>
#include <string>

#include "shapefn/error.h"
#include "vm_impl.h"

namespace shapefn {

void VirtualMachine::Impl::ExecInvokeShapeFunc(const Instruction& ins, std::vector<Value>& regs) {
  // This runs once per dynamic op: the common case (shapes of tensors in,
  // a native function, well-formed shapes out) stays on a short straight
  // path, and everything else is out of line.
  ops::InvokeShapeFunc op(ins);
  const size_t sf = static_cast<size_t>(op.shape_func());
  const ShapeFuncPlan& plan = shape_func_plans_[sf];
  const OperandList in = op.inputs(), out = op.outputs();
  const int n_in = static_cast<int>(in.size);
  const int n_out = static_cast<int>(out.size);

  // Scratch reused from call to call (sized before pointers into it are taken).
  ShapeFuncScratch& scratch = shape_func_scratch_;
  if (scratch.inputs.size() < static_cast<size_t>(n_in)) scratch.Resize(static_cast<size_t>(n_in));
  ShapeFuncInput* inputs = scratch.inputs.data();
  std::vector<TensorRef> staged;  // host copies of device values, alive until the shape function returns
  for (int i = 0; i < n_in; ++i) {
    const Value& v = regs[in[i]];
    if (v.kind == Value::Kind::kTensor) {
      const TensorObj& t = *v.tensor;
      inputs[i] = ShapeFuncInput{t.shape.data(), static_cast<int>(t.shape.size()), t.dtype, nullptr};
      if (plan.ReadsValue(i)) inputs[i].value = HostValueOf(v.tensor, static_cast<size_t>(i), &staged);
    } else {
      ShapeOrIntInput(plan, v, i);
    }
  }
  if (!staged.empty()) SyncWith(*devices_[kExecutionSlot]);

  // The output vectors keep their storage from call to call (each is swapped
  // with its register's previous shape below), so steady state allocates nothing.
  std::vector<ShapeVec>& results = scratch.results;
  if (results.size() < static_cast<size_t>(n_out)) results.resize(static_cast<size_t>(n_out));
  for (int j = 0; j < n_out; ++j) results[static_cast<size_t>(j)].clear();
  const ShapeFuncAttrs attrs{op.attrs().data, static_cast<int>(op.attrs().size)};
  if (plan.native != nullptr && profiler_ == nullptr && !guard_host_shape_work_) {
    // n_out == entry.num_outputs: checked when the VM linked the executable.
    plan.native(inputs, n_in, attrs, results.data());
  } else if (plan.native != nullptr) {
    CallNativeShapeFunc(plan, attrs, n_in, results.data());
  } else {
    CallCompiledShapeFunc(sf, n_in, n_out, results.data());
  }
  counters_.shape_func_calls += 1;

  for (int j = 0; j < n_out; ++j) {
    ShapeVec& shape = results[static_cast<size_t>(j)];
    // A size no tensor can have is reported here, naming the op, rather than
    // where it is first allocated.
    int64_t numel = 1;
    bool bad = false;
    for (int64_t d : shape) bad |= (d < 0) | __builtin_mul_overflow(numel, d, &numel);
    if (bad) FailShapeFuncResult(*plan.entry, j, shape);
    // Stored in place, without a temporary Value.
    Value& dst = regs[out[j]];
    if (dst.kind != Value::Kind::kShape) {
      dst = Value();  // drops whatever it held
      dst.kind = Value::Kind::kShape;
    }
    dst.shape.swap(shape);  // its old vector is this output's storage at the next call
  }
}

const DLTensor* VirtualMachine::Impl::HostValueOf(const TensorRef& tensor, size_t i, std::vector<TensorRef>* staged) {
  DLTensor& value = shape_func_scratch_.values[i];
  if (tensor->device()->is_host()) {
    value = tensor->AsHostDLTensor();
  } else {
    // Only this input's bytes cross; the caller syncs once for all of them.
    staged->push_back(StageToHost(tensor));
    value = staged->back()->AsHostDLTensor();
  }
  return &value;
}

void VirtualMachine::Impl::ShapeOrIntInput(const ShapeFuncPlan& plan, const Value& v, int i) {
  ShapeFuncScratch& scratch = shape_func_scratch_;
  if (v.kind != Value::Kind::kShape && v.kind != Value::Kind::kInt) {
    Fail(ErrorKind::kType,
         "shape function of '" + plan.entry->name + "' input " + std::to_string(i) + " is " + KindName(v.kind));
  }
  // Values already on the host: shapes are int64 vectors, ints scalars.
  const bool scalar = v.kind == Value::Kind::kInt;
  int64_t* length = &scratch.value_lengths[static_cast<size_t>(i)];  // the vector's 1-d shape
  *length = static_cast<int64_t>(v.shape.size());
  const int ndim = scalar ? 0 : 1;
  DLTensor& value = scratch.values[static_cast<size_t>(i)];
  value = DLTensor{const_cast<int64_t*>(scalar ? &v.i : v.shape.data()),
                   DLDevice{kDLCPU, 0},
                   ndim,
                   DLDataType{kDLInt, 64, 1},
                   length,
                   nullptr,
                   0};
  scratch.inputs[static_cast<size_t>(i)] = ShapeFuncInput{length, ndim, value.dtype, &value};
}

void VirtualMachine::Impl::CallNativeShapeFunc(const ShapeFuncPlan& plan, const ShapeFuncAttrs& attrs, int n_in,
                                               ShapeVec* results) {
  Device& device = *devices_[kExecutionSlot];
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  device.BeginHostShapeWork();
  try {
    plan.native(shape_func_scratch_.inputs.data(), n_in, attrs, results);
  } catch (...) {
    device.EndHostShapeWork();
    throw;
  }
  device.EndHostShapeWork();
  if (profiler_ != nullptr) profiler_->ShapeFunc(plan.entry->name, true, start);
}

void VirtualMachine::Impl::FailShapeFuncResult(const ShapeFuncEntry& entry, int j, const ShapeVec& shape) {
  std::string text;
  for (int64_t d : shape) text += (text.empty() ? "" : ", ") + std::to_string(d);
  for (int64_t d : shape) {
    if (d < 0) {
      Fail(ErrorKind::kValue, "shape function of '" + entry.name + "' returned a negative dimension " +
                                  std::to_string(d) + " for output " + std::to_string(j) + " ([" + text + "])");
    }
  }
  Fail(ErrorKind::kValue, "shape function of '" + entry.name + "' returned [" + text + "] for output " +
                              std::to_string(j) + ", whose element count overflows int64");
}

void VirtualMachine::Impl::CallCompiledShapeFunc(size_t sf, int n_in, int n_out, ShapeVec* results) {
  const ShapeFuncEntry& entry = *shape_funcs_[sf];
  ShapeFuncScratch& scratch = shape_func_scratch_;
  const ShapeFuncInput* inputs = scratch.inputs.data();
  // Found in the cache by the signature's numbers: its text is built only
  // for a compile.
  ShapeFuncSignature(inputs, n_in, &scratch.signature);
  std::vector<CompiledShapeFunc>& cache = compiled_[sf];
  const CompiledShapeFunc* compiled = nullptr;
  for (const CompiledShapeFunc& c : cache) {
    if (c.signature == scratch.signature) {
      compiled = &c;
      break;
    }
  }
  if (compiled == nullptr) {
    const int64_t compile_start = profiler_ != nullptr ? profiler_->Now() : 0;
    cache.push_back(CompileShapeFunc(entry, inputs, n_in));
    compiled = &cache.back();
    if (profiler_ != nullptr) profiler_->Compile(entry.name, compile_start);
  }
  scratch.compiled_call.Prepare(entry, *compiled, inputs, n_in, n_out, results);
  Device& device = *devices_[kExecutionSlot];
  const int64_t start = profiler_ != nullptr ? profiler_->Now() : 0;
  device.BeginHostShapeWork();
  try {
    scratch.compiled_call.Invoke(entry, *compiled);
  } catch (...) {
    device.EndHostShapeWork();
    throw;
  }
  device.EndHostShapeWork();
  if (profiler_ != nullptr) profiler_->ShapeFunc(entry.name, false, start);
}

}  // namespace shapefn
