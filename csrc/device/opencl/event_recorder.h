// Device time of a profiled call on OpenCL, from profiling events.
//
// Only profiled calls pay for it. While a call is profiled, the commands the
// calling thread enqueues on the device go to a second queue of the device,
// created with CL_QUEUE_PROFILING_ENABLE on first use, and those of a span
// (one kernel call or copy) return events; every other command goes to the
// device's own queue without an event, as before, so a driver that slows a
// profiling queue (timestamps per command, less batching) slows no other
// call. The queues are not ordered with each other: the recorder waits for
// the device's queue when it starts and for its own when it ends, so the
// call's commands run after the work queued before it and before the work
// queued after it, as on one queue.
#pragma once

#include <vector>

#include "cl_api.h"
#include "shapefn/device_timing.h"

namespace shapefn::opencl {

class EventRecorder final : public DeviceTiming {
 public:
  // Records the commands this thread enqueues on `device` until destroyed.
  explicit EventRecorder(int device);
  ~EventRecorder() override;
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  void BeginSpan() override;
  void EndSpan() override;
  std::vector<DeviceSpanTime> Resolve() override;

  // The recorder of the calling thread on `device`, or nullptr.
  static EventRecorder* Active(int device);
  cl_command_queue queue() const { return queue_; }
  // Where a command enqueued now leaves its event: `event` inside a span,
  // nullptr (no event made) outside one.
  cl_event* EventOut(cl_event* event) const { return open_ ? event : nullptr; }
  // Takes a reference to the event of a command of the open span (ignored
  // outside one).
  void Keep(cl_event event);

 private:
  // Waits for the call's commands and releases their events.
  void Finish();

  int device_;
  cl_command_queue queue_;
  EventRecorder* outer_;  // the thread's recorder before this one (another VM's call nested in a kernel)
  bool open_ = false;
  std::vector<cl_event> events_;
  std::vector<size_t> span_begins_;  // index of each span's first event
};

// Enqueues a command through `enqueue(cl_event* event)`, which passes
// `event` to the OpenCL call: inside a span of the thread's recorder it is
// where the command's event goes, else nullptr (no event is made).
template <typename Enqueue>
cl_int EnqueueRecorded(const ClApi& cl, int device, Enqueue&& enqueue) {
  EventRecorder* recorder = EventRecorder::Active(device);
  cl_event event = nullptr;
  const cl_int code = enqueue(recorder != nullptr ? recorder->EventOut(&event) : nullptr);
  if (event != nullptr) {
    recorder->Keep(event);
    cl.clReleaseEvent(event);
  }
  return code;
}

}  // namespace shapefn::opencl
