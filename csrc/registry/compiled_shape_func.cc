#include "compiled_shape_func.h"

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <string>
#include <utility>

#include "shapefn/error.h"
#include "shapefn/tensor.h"

namespace shapefn {
namespace {

// Shape-only inputs get this as their data pointer: never read, but TVM's
// argument checks want non-null.
alignas(64) int64_t kNeverRead[8] = {0};

uint64_t InputKey(const ShapeFuncInput& input) {
  return static_cast<uint64_t>(input.dtype.code) | static_cast<uint64_t>(input.dtype.bits) << 8 |
         static_cast<uint64_t>(input.dtype.lanes) << 16 | static_cast<uint64_t>(input.ndim) << 32;
}

}  // namespace

void ShapeFuncSignature(const ShapeFuncInput* inputs, int n, std::vector<uint64_t>* key) {
  key->clear();
  for (int i = 0; i < n; ++i) key->push_back(InputKey(inputs[i]));
}

std::string ShapeFuncSignatureText(const ShapeFuncInput* inputs, int n) {
  std::string signature;
  for (int i = 0; i < n; ++i) {
    if (i) signature += ",";
    signature += DTypeToString(inputs[i].dtype) + ":" + std::to_string(inputs[i].ndim);
  }
  return signature;
}

std::vector<uint64_t> ParseShapeFuncSignature(const std::string& text) {
  std::vector<uint64_t> key;
  if (text.empty()) return key;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t colon = item.find(':');
    const std::string rank = colon == std::string::npos ? "" : item.substr(colon + 1);
    if (rank.empty() || rank.size() > 4 || rank.find_first_not_of("0123456789") != std::string::npos) {
      Fail(ErrorKind::kFormat, "malformed shape-function signature '" + text + "': '" + item + "' is not dtype:ndim");
    }
    DLDataType dtype;
    try {
      dtype = DTypeFromString(item.substr(0, colon));
    } catch (const Error&) {
      Fail(ErrorKind::kFormat, "malformed shape-function signature '" + text + "': unknown dtype in '" + item + "'");
    }
    const ShapeFuncInput input{nullptr, std::stoi(rank), dtype, nullptr};
    key.push_back(InputKey(input));
    if (end == text.size()) return key;
    start = end + 1;
  }
}

CompiledShapeFunc CompileShapeFunc(const ShapeFuncEntry& entry, const ShapeFuncInput* inputs, int n) {
  const std::string signature = ShapeFuncSignatureText(inputs, n);
  if (!entry.compiler.defined()) {
    Fail(ErrorKind::kType, "the shape function of '" + entry.name + "' was not compiled for inputs (" + signature +
                               "): the executable carries it only for the signatures its program was compiled "
                               "with, and no shape function of that name is registered in this process to compile "
                               "others (shapefn.register_shape_func)");
  }
  CompiledShapeFunc compiled;
  ShapeFuncSignature(inputs, n, &compiled.signature);
  try {
    auto result = entry.compiler(tvm::ffi::String(signature)).cast<tvm::ffi::Array<tvm::ffi::Any>>();
    compiled.fn = result[0].cast<tvm::ffi::Function>();
    for (size_t j = 1; j < result.size(); ++j) compiled.out_ndims.push_back(result[j].cast<int64_t>());
  } catch (const tvm::ffi::Error& e) {
    FailFromCaught(ErrorKind::kRuntime, "compiling the shape function of '" + entry.name + "' for (" + signature +
                                            ") failed: " + e.kind() + ": " + e.message());
  }
  return compiled;
}

void CompiledShapeFuncCall::Prepare(const ShapeFuncEntry& entry, const CompiledShapeFunc& compiled,
                                    const ShapeFuncInput* inputs, int n_in, int n_out, ShapeVec* results) {
  if (compiled.out_ndims.size() != static_cast<size_t>(n_out)) {
    Fail(ErrorKind::kValue, "shape function of '" + entry.name + "' returned " +
                                std::to_string(compiled.out_ndims.size()) + " shapes, the program expects " +
                                std::to_string(n_out));
  }
  tensors_.resize(static_cast<size_t>(n_in + n_out));  // sized before the AnyViews point into it
  for (int i = 0; i < n_in; ++i) {
    const ShapeFuncInput& input = inputs[i];
    tensors_[static_cast<size_t>(i)] =
        input.value != nullptr
            ? *input.value
            : DLTensor{
                  kNeverRead, DLDevice{kDLCPU, 0}, input.ndim, input.dtype, const_cast<int64_t*>(input.shape), nullptr,
                  0};
  }
  for (int j = 0; j < n_out; ++j) {
    ShapeVec& shape = results[j];
    shape.assign(static_cast<size_t>(compiled.out_ndims[static_cast<size_t>(j)]), 0);
    tensors_[static_cast<size_t>(n_in + j)] =
        DLTensor{shape.data(),
                 DLDevice{kDLCPU, 0},
                 1,
                 DLDataType{kDLInt, 64, 1},
                 const_cast<int64_t*>(&compiled.out_ndims[static_cast<size_t>(j)]),
                 nullptr,
                 0};
  }
  args_.clear();
  for (DLTensor& t : tensors_) args_.emplace_back(&t);
}

void CompiledShapeFuncCall::Invoke(const ShapeFuncEntry& entry, const CompiledShapeFunc& compiled) {
  tvm::ffi::Any rv;
  try {
    compiled.fn.CallPacked(args_.data(), static_cast<int32_t>(args_.size()), &rv);
  } catch (const tvm::ffi::Error& e) {
    FailFromCaught(ErrorKind::kRuntime,
                   "shape function of '" + entry.name + "' failed: " + e.kind() + ": " + e.message());
  }
}

}  // namespace shapefn
