// The builtins TVM's Relax VM calls in programs compiled with
// `shapefn.compiler.relax_vm.pipeline`: tvm-ffi global functions registered when
// libshapefn_core loads (`import shapefn`, or a C++ program linking it).
//
// * `shapefn.shape_func(op, attrs, *inputs) -> Shape | Array<Shape>`: the
//   shape function registered for `op`, handed what its mask says: the shape
//   of a tensor input whose flag is false (metadata, no copy), the value of
//   one whose flag is true (copied to the host when it lives on a device:
//   only those inputs, one sync for all of them).
// * `shapefn.shape_func_per_op(...)`: the same with every tensor input's
//   value copied, as a per-op declaration makes a VM do (for comparison).
// * `shapefn.read_counts(*counts) -> Array<Shape>`: the counts count-sized
//   kernels wrote (int64 tensors of one element), each as a one-dimensional
//   shape, read back together: one sync for every count of a phase.
// * `shapefn.upload(src, dst)`: a host tensor (shape arithmetic the host
//   computed) copied into a device tensor of the same shape and type,
//   enqueued without waiting (TVM's `vm.builtin.to_device` waits for the
//   device after every copy).
//
// (Views of upper-bound outputs are TVM's own `R.memory.view`, which TVM's
// memory planning knows aliases its input.)
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/runtime/device_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiled_shape_func.h"
#include "shapefn/error.h"
#include "shapefn/registry.h"
#include "shapefn/tensor.h"

namespace shapefn::relax {
namespace {

using tvm::ffi::Any;
using tvm::ffi::AnyView;
using tvm::ffi::Array;
using tvm::ffi::PackedArgs;
using tvm::ffi::Shape;
using tvm::ffi::String;
using tvm::ffi::Tensor;

// Raised as the tvm-ffi error of the same kind, which the caller's VM passes
// on (to Python as ValueError, TypeError, ...).
[[noreturn]] void Throw(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::kValue: TVM_FFI_THROW(ValueError) << e.what();
    case ErrorKind::kType: TVM_FFI_THROW(TypeError) << e.what();
    case ErrorKind::kKey: TVM_FFI_THROW(KeyError) << e.what();
    case ErrorKind::kIndex: TVM_FFI_THROW(IndexError) << e.what();
    default: TVM_FFI_THROW(RuntimeError) << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

size_t ByteSize(const DLTensor& t) {
  size_t n = (static_cast<size_t>(t.dtype.bits) * t.dtype.lanes + 7) / 8;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
  return n;
}

bool Contiguous(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// Host copies of device tensors: each copy is enqueued as it is added, and
// `Wait` syncs each device copied from once.
class HostCopies {
 public:
  // `t` readable on the host: itself if it is host memory, else a copy.
  const DLTensor* Add(const DLTensor& t, const std::string& what) {
    if (!Contiguous(t)) Fail(ErrorKind::kValue, what + " is not a contiguous tensor");
    if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) return &t;
    copies_.push_back(std::make_unique<Copy>());
    Copy& copy = *copies_.back();
    copy.bytes.resize(ByteSize(t));
    copy.shape.assign(t.shape, t.shape + t.ndim);
    copy.host = DLTensor{copy.bytes.data(), DLDevice{kDLCPU, 0}, t.ndim, t.dtype, copy.shape.data(), nullptr, 0};
    if (!copy.bytes.empty()) {
      tvm::runtime::DeviceAPI::Get(t.device)->CopyDataFromTo(const_cast<DLTensor*>(&t), &copy.host, nullptr);
      AddDevice(t.device);
    }
    return &copy.host;
  }

  void Wait() {
    for (const DLDevice& dev : devices_) tvm::runtime::DeviceAPI::Get(dev)->StreamSync(dev, nullptr);
    devices_.clear();
  }

 private:
  struct Copy {
    std::vector<uint8_t> bytes;
    std::vector<int64_t> shape;
    DLTensor host;
  };

  void AddDevice(DLDevice dev) {
    for (const DLDevice& d : devices_) {
      if (d.device_type == dev.device_type && d.device_id == dev.device_id) return;
    }
    devices_.push_back(dev);
  }

  std::vector<std::unique_ptr<Copy>> copies_;
  std::vector<DLDevice> devices_;
};

// The TVM-compiled form of a Python shape function for one input signature,
// built on first use and kept.
const CompiledShapeFunc& CompiledFor(const ShapeFuncEntry& entry, const ShapeFuncInput* inputs, int n) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::vector<uint64_t>>, CompiledShapeFunc> cache;
  std::vector<uint64_t> signature;
  ShapeFuncSignature(inputs, n, &signature);
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(entry.name, std::move(signature));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache.emplace(std::move(key), CompileShapeFunc(entry, inputs, n)).first->second;
}

void CallCompiled(const ShapeFuncEntry& entry, const ShapeFuncInput* inputs, int n, std::vector<ShapeVec>* results) {
  const CompiledShapeFunc& compiled = CompiledFor(entry, inputs, n);
  CompiledShapeFuncCall call;
  call.Prepare(entry, compiled, inputs, n, static_cast<int>(results->size()), results->data());
  call.Invoke(entry, compiled);
}

Shape CheckedShape(const ShapeFuncEntry& entry, size_t j, const ShapeVec& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) {
      std::string text;
      for (int64_t x : shape) text += (text.empty() ? "" : ", ") + std::to_string(x);
      Fail(ErrorKind::kValue, "shape function of '" + entry.name + "' returned [" + text + "] for output " +
                                  std::to_string(j) +
                                  (d < 0 ? ": a negative dimension" : ": its size overflows int64"));
    }
  }
  return Shape(shape.begin(), shape.end());
}

// args: op name, attrs (a shape), then the op's inputs: tensors (on any
// device), shapes or integers.
void ShapeFunc(PackedArgs args, Any* rv, bool every_value) {
  if (args.size() < 2) Fail(ErrorKind::kType, "shapefn.shape_func takes (op, attrs, *inputs)");
  const std::string op = args[0].cast<String>();
  const Shape attrs = args[1].cast<Shape>();
  ShapeFuncEntryPtr entry = ShapeFuncRegistry::Global().Lookup(op);
  const int n = args.size() - 2;
  if (entry->arity >= 0 && n != entry->arity) {
    Fail(ErrorKind::kValue, "shape function of '" + entry->name + "' takes " + std::to_string(entry->arity) +
                                " inputs, the program passes " + std::to_string(n));
  }
  if (entry->native == nullptr && !entry->compiler.defined()) {
    Fail(ErrorKind::kKey, "'" + entry->name + "' has a data-dependence mask but no shape function");
  }
  std::vector<Tensor> tensors(static_cast<size_t>(n));  // keeps the inputs alive
  std::vector<std::vector<int64_t>> vectors(static_cast<size_t>(n));
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  std::vector<DLTensor> host_vectors(static_cast<size_t>(n));
  std::vector<ShapeFuncInput> inputs(static_cast<size_t>(n));
  HostCopies copies;
  for (int i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    AnyView arg = args[i + 2];
    if (auto tensor = arg.try_cast<Tensor>()) {
      tensors[k] = *tensor;
      const DLTensor& t = *tensors[k].GetDLTensorPtr();
      const bool value = every_value || entry->NeedsValue(i);
      inputs[k] = ShapeFuncInput{t.shape, t.ndim, t.dtype,
                                 value ? copies.Add(t, "input " + std::to_string(i) + " of '" + op + "'") : nullptr};
      continue;
    }
    // Shapes and integers are host values already: int64 vectors and scalars.
    if (auto shape = arg.try_cast<Shape>()) {
      vectors[k].assign(shape->begin(), shape->end());
    } else if (auto integer = arg.try_cast<int64_t>()) {
      vectors[k] = {*integer};
    } else {
      Fail(ErrorKind::kType, "input " + std::to_string(i) + " of '" + op + "' is a " + arg.GetTypeKey() +
                                 ", not a tensor, shape or integer");
    }
    const bool scalar = arg.type_index() == kTVMFFIInt;
    lengths[k] = static_cast<int64_t>(vectors[k].size());
    host_vectors[k] = DLTensor{
        vectors[k].data(), DLDevice{kDLCPU, 0}, scalar ? 0 : 1, DLDataType{kDLInt, 64, 1}, &lengths[k], nullptr, 0};
    inputs[k] = ShapeFuncInput{&lengths[k], scalar ? 0 : 1, host_vectors[k].dtype, &host_vectors[k]};
  }
  copies.Wait();

  std::vector<ShapeVec> results(static_cast<size_t>(entry->num_outputs));
  if (entry->native != nullptr) {
    entry->native(inputs.data(), n, ShapeFuncAttrs{attrs.data(), static_cast<int>(attrs.size())}, results.data());
  } else {
    CallCompiled(*entry, inputs.data(), n, &results);
  }
  if (results.size() == 1) {
    *rv = CheckedShape(*entry, 0, results[0]);
    return;
  }
  Array<Shape> shapes;
  for (size_t j = 0; j < results.size(); ++j) shapes.push_back(CheckedShape(*entry, j, results[j]));
  *rv = shapes;
}

Array<Shape> ReadCounts(PackedArgs args) {
  std::vector<Tensor> counts;
  HostCopies copies;
  std::vector<const DLTensor*> host;
  for (int i = 0; i < args.size(); ++i) {
    auto tensor = args[i].try_cast<Tensor>();
    if (!tensor) Fail(ErrorKind::kType, "shapefn.read_counts: argument " + std::to_string(i) + " is not a tensor");
    counts.push_back(*tensor);
    const DLTensor& t = *counts.back().GetDLTensorPtr();
    int64_t numel = 1;
    for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
    if (numel != 1 || t.dtype.code != kDLInt || t.dtype.bits != 64) {
      Fail(ErrorKind::kValue,
           "shapefn.read_counts: argument " + std::to_string(i) + " is not an int64 tensor of one element");
    }
    host.push_back(copies.Add(t, "count " + std::to_string(i)));
  }
  copies.Wait();
  Array<Shape> shapes;
  for (size_t i = 0; i < host.size(); ++i) {
    int64_t count;
    std::memcpy(&count, host[i]->data, sizeof(count));
    if (count < 0) Fail(ErrorKind::kValue, "a kernel wrote a negative count (" + std::to_string(count) + ")");
    shapes.push_back(Shape({count}));
  }
  return shapes;
}

void Upload(DLTensor* src, DLTensor* dst) {
  if (src->device.device_type != kDLCPU) Fail(ErrorKind::kValue, "shapefn.upload: the source is not a host tensor");
  if (src->ndim != dst->ndim || src->dtype.code != dst->dtype.code || src->dtype.bits != dst->dtype.bits ||
      src->dtype.lanes != dst->dtype.lanes || !std::equal(src->shape, src->shape + src->ndim, dst->shape)) {
    Fail(ErrorKind::kValue, "shapefn.upload: source and destination differ in shape or type");
  }
  if (!Contiguous(*src) || !Contiguous(*dst)) Fail(ErrorKind::kValue, "shapefn.upload: a tensor is not contiguous");
  if (ByteSize(*src) == 0) return;
  const DLDevice device = dst->device.device_type == kDLCPU ? src->device : dst->device;
  tvm::runtime::DeviceAPI::Get(device)->CopyDataFromTo(src, dst, nullptr);
}

template <typename F>
auto Translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    Throw(e);
  }
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def_packed("shapefn.shape_func",
                  [](PackedArgs args, Any* rv) { Translated([&] { ShapeFunc(args, rv, false); }); })
      .def_packed("shapefn.shape_func_per_op",
                  [](PackedArgs args, Any* rv) { Translated([&] { ShapeFunc(args, rv, true); }); })
      .def_packed("shapefn.read_counts",
                  [](PackedArgs args, Any* rv) { *rv = Translated([&] { return ReadCounts(args); }); })
      .def("shapefn.upload", [](DLTensor* src, DLTensor* dst) { Translated([&] { Upload(src, dst); }); });
}

}  // namespace shapefn::relax
