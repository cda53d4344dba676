// A shape function registered from Python runs as host code TVM compiled
// for one input signature (the dtype and rank of each input). Compiling it,
// and calling it with shapes as metadata and values as host tensors, is
// shared by shapefn's VM (csrc/vm/shape_func_call.cc, which keeps the cache,
// the profiler and the device's shape-work guard around it) and the builtins
// TVM's VM calls (csrc/relax/builtins.cc).
#pragma once

#include <dlpack/dlpack.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shapefn/registry.h"

namespace shapefn {

struct CompiledShapeFunc {
  std::vector<uint64_t> signature;  // per input: dtype code | bits << 8 | lanes << 16 | ndim << 32
  tvm::ffi::Function fn;
  std::vector<int64_t> out_ndims;
};

// The signature of `inputs`, into `key` (no allocation once it has room).
void ShapeFuncSignature(const ShapeFuncInput* inputs, int n, std::vector<uint64_t>* key);
// The same as text, "int64:1,float32:4": how compilers and messages name it.
std::string ShapeFuncSignatureText(const ShapeFuncInput* inputs, int n);
// The key of a signature given as text; raises Error(kFormat) naming
// `text` when it is malformed.
std::vector<uint64_t> ParseShapeFuncSignature(const std::string& text);

// `entry` compiled for the signature of `inputs`; a failure raises a
// runtime error naming the op and the signature, with TVM's error as cause.
// An entry that cannot compile (a shape function an executable carries,
// with no registration in this process) raises a type error naming both.
CompiledShapeFunc CompileShapeFunc(const ShapeFuncEntry& entry, const ShapeFuncInput* inputs, int n);

// The arguments of one call of a compiled shape function, reused from call
// to call: the inputs (a shape-only input's data is never read), then one
// int64 vector per output, written into `results`.
class CompiledShapeFuncCall {
 public:
  // Raises a value error if the function returns other than `n_out` shapes.
  void Prepare(const ShapeFuncEntry& entry, const CompiledShapeFunc& compiled, const ShapeFuncInput* inputs, int n_in,
               int n_out, ShapeVec* results);
  // Raises a runtime error naming the op, with the function's error as cause.
  void Invoke(const ShapeFuncEntry& entry, const CompiledShapeFunc& compiled);

 private:
  std::vector<DLTensor> tensors_;
  std::vector<tvm::ffi::AnyView> args_;
};

}  // namespace shapefn
