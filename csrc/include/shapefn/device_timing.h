// Device execution time of the work one profiled call issues, measured by
// the device's own clock: OpenCL profiling events, CUDA events through TVM's
// timer (`runtime.timer.<kind>`). A device starts it only for a profiled
// call (Device::StartTiming), so calls that are not profiled pay nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace shapefn {

// The device time of one span of work (one kernel call or copy).
struct DeviceSpanTime {
  // When the span's first command started, on the device's clock (an epoch
  // of its own); -1 when the timer gives durations only (TVM's timers).
  int64_t start_ns = -1;
  // The device's execution time of the span's commands, summed.
  int64_t duration_ns = 0;
  // False when the span queued no device work (a kernel over an empty tensor).
  bool ran = false;
};

class DeviceTiming {
 public:
  // Destroying it before Resolve abandons the spans (a call that failed).
  virtual ~DeviceTiming() = default;
  // Bracket the device work the calling thread issues between them; spans
  // do not nest.
  virtual void BeginSpan() = 0;
  virtual void EndSpan() = 0;
  // Waits for the spans' work and returns their times in the order they
  // began. Called once, after the last EndSpan, when the call's work is
  // issued: the wait is the profiler's, not one of the call's syncs.
  virtual std::vector<DeviceSpanTime> Resolve() = 0;
};

}  // namespace shapefn
