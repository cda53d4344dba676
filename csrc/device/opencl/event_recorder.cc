// Profiling events of a profiled call's OpenCL commands (see event_recorder.h).
#include "event_recorder.h"

#include "opencl_runtime.h"
#include "shapefn/opencl.h"

namespace shapefn::opencl {
namespace {
thread_local EventRecorder* active = nullptr;
}  // namespace

EventRecorder::EventRecorder(int device) : device_(device), outer_(active) {
  Runtime& rt = Runtime::Global();
  // Before this thread's commands move to the profiling queue: whatever the
  // device's own queue holds (earlier calls, other threads) runs first.
  Runtime::Check(rt.api().clFinish(rt.queue(device)),
                 OpenCLDeviceName(device) + ": waiting for the device before a profiled call (clFinish)");
  queue_ = rt.profiling_queue(device);
  active = this;
}

EventRecorder::~EventRecorder() {
  active = outer_;
  Finish();
}

EventRecorder* EventRecorder::Active(int device) {
  return active != nullptr && active->device_ == device ? active : nullptr;
}

void EventRecorder::BeginSpan() {
  span_begins_.push_back(events_.size());
  open_ = true;
}

void EventRecorder::EndSpan() { open_ = false; }

void EventRecorder::Keep(cl_event event) {
  if (!open_) return;
  Runtime::Global().api().clRetainEvent(event);
  events_.push_back(event);
}

std::vector<DeviceSpanTime> EventRecorder::Resolve() {
  const ClApi& cl = Runtime::Global().api();
  Runtime::Check(cl.clFinish(queue_), OpenCLDeviceName(device_) + ": waiting for a profiled call's work (clFinish)");
  std::vector<DeviceSpanTime> spans(span_begins_.size());
  for (size_t s = 0; s < spans.size(); ++s) {
    const size_t end = s + 1 < spans.size() ? span_begins_[s + 1] : events_.size();
    for (size_t i = span_begins_[s]; i < end; ++i) {
      cl_ulong start = 0, stop = 0;
      const std::string what = OpenCLDeviceName(device_) + ": reading a command's profiling times";
      Runtime::Check(cl.clGetEventProfilingInfo(events_[i], CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr),
                     what);
      Runtime::Check(cl.clGetEventProfilingInfo(events_[i], CL_PROFILING_COMMAND_END, sizeof(stop), &stop, nullptr),
                     what);
      if (!spans[s].ran) spans[s].start_ns = static_cast<int64_t>(start);
      spans[s].duration_ns += static_cast<int64_t>(stop - start);
      spans[s].ran = true;
    }
  }
  Finish();
  return spans;
}

void EventRecorder::Finish() {
  const ClApi& cl = Runtime::Global().api();
  // After this, commands on the device's own queue follow the call's.
  cl.clFinish(queue_);
  for (cl_event event : events_) cl.clReleaseEvent(event);
  events_.clear();
  span_begins_.clear();
}

}  // namespace shapefn::opencl
