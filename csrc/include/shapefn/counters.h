// What crossed the host/device boundary and what the VM did during calls.
// The same names are used in Python, the profiler and the benchmarks.
#pragma once

#include <cstdint>

namespace shapefn {

#define SHAPEFN_INT_COUNTERS(X) \
  X(d2h_copies)                 \
  X(d2h_bytes)                  \
  X(h2d_copies)                 \
  X(h2d_bytes)                  \
  X(syncs)                      \
  X(shape_func_calls)           \
  X(kernel_calls)               \
  X(allocations)                \
  X(instructions)

struct Counters {
#define SHAPEFN_DECLARE_COUNTER(name) int64_t name = 0;
  SHAPEFN_INT_COUNTERS(SHAPEFN_DECLARE_COUNTER)
#undef SHAPEFN_DECLARE_COUNTER
  double modelled_transfer_s = 0.0;
};

}  // namespace shapefn
