// Device time on a TVM device from TVM's own device timer.
#pragma once

#include <dlpack/dlpack.h>
#include <tvm/runtime/device_api.h>

#include <memory>
#include <string>

#include "shapefn/device_timing.h"

namespace shapefn {

// Times spans with the timer TVM's runtime for `kind` registers as
// `runtime.timer.<kind>` (CUDA: a pair of CUDA events on the device's stream
// per span, in libtvm_runtime_cuda.so; CPU: the host's clock); nullptr
// when there is none.
std::unique_ptr<DeviceTiming> MakeTvmTiming(const std::string& kind, DLDevice device, tvm::runtime::DeviceAPI* api);

}  // namespace shapefn
