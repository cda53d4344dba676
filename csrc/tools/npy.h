// NumPy .npy files (format versions 1.0-3.0) for shapefn-run: C order,
// little-endian, and only the dtypes the VM takes (bool, int8-64,
// uint8-64, float16-64). Anything else is rejected with a message naming
// the file and what to change, never read wrongly.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shapefn/shape_func.h"

namespace shapefn::npy {

struct Array {
  DLDataType dtype{};
  ShapeVec shape;
  // 64-byte aligned, as the VM's own allocations are, so kernels that
  // assume aligned buffers see no difference between inputs and temporaries.
  std::shared_ptr<void> data;
  size_t nbytes = 0;
};

// Throws shapefn::Error(kValue) naming `path` and the problem.
Array Read(const std::string& path);
void Write(const std::string& path, DLDataType dtype, const ShapeVec& shape, const void* data);

// 64-byte aligned host memory of at least `nbytes` bytes (one byte if 0).
std::shared_ptr<void> AllocAligned(size_t nbytes);

}  // namespace shapefn::npy
