// Timing of one VM call: `vm.Invoke(function, args, &profiler)` records an
// event per kernel call, shape function, copy, sync, allocation and readback.
//
// Two tracks: the host (the thread running the VM) and the execution
// device's stream, where copies and kernels run in the order they were
// issued. Times are steady_clock on the host, with exceptions that the
// events name in `time_source`:
//   * a device with a cost model (sim) gives each copy its modelled time on
//     the device track; a sync then waits, on the trace timeline, until the
//     modelled work is done, and later host events shift by that stall, so
//     the trace reads like a run on the modelled device;
//   * a device with a timer (device_timing.h: OpenCL's profiling events, the
//     CUDA events of TVM's timer) gives each kernel call and copy its
//     execution time on the device's own clock (`device`). The profiler
//     reads the times when the call's work is issued, after its last sync:
//     the wait for them adds no sync to the call, and the call's event spans
//     its device work. Device clocks that give start times (OpenCL) place
//     the events at them, shifted by the least offset that starts no command
//     before the host issued it; durations alone (TVM's timers) are placed
//     one after another from when they were issued;
//   * on other devices whose kernels are not CPU code, a kernel call or copy
//     returns once the work is queued: its time is the host-side call
//     (`host_call`), not device execution. Only syncs measure real device
//     time there.
//
// The VM reaches the profiler through a pointer that is null unless the call
// is profiled, checked only where the work is already expensive (kernel
// calls, shape functions, copies, syncs, allocations): an unprofiled call
// pays one predictable branch per such event and nothing per instruction,
// and no device timing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shapefn/counters.h"
#include "shapefn/device.h"
#include "shapefn/device_timing.h"

namespace shapefn {

enum class ProfileCategory : uint8_t {
  kCall,       // the whole call
  kKernel,     // invoke_kernel
  kShapeFunc,  // invoke_shape_func (the function itself; its input copies and sync are events of their own)
  kCompile,    // compiling a Python shape function for a new input signature
  kCopy,       // h2d or d2h
  kSync,       // the host waits for the device
  kAlloc,      // alloc_storage, alloc_tensor, or a buffer for a copy
  kReadback,   // readback: its copies and sync, as one span
};
const char* ProfileCategoryName(ProfileCategory category);

enum class ProfileTrack : uint8_t { kHost, kDevice };

enum class TimeSource : uint8_t {
  kMeasured,  // host wall-clock time of the work itself
  kModelled,  // the device's cost model (sim copies; a sync's stall on them)
  kHostCall,  // the host-side call that queued asynchronous device work
  kDevice,    // execution on the device, by the device's own clock
};
const char* TimeSourceName(TimeSource source);

struct ProfileEvent {
  ProfileCategory category;
  ProfileTrack track;
  TimeSource time_source;
  std::string name;         // kernel name, shape-function op, "h2d"/"d2h", "sync", "alloc_tensor", ...
  std::string device;       // where the work ran or the memory lives: "host", "sim", "cuda:0"
  std::string detail;       // shape functions: "native"/"tvm"; allocations: "pool"/"device"
  int64_t start_ns = 0;     // on the trace timeline, from the start of the call
  int64_t duration_ns = 0;  // on the trace timeline
  int64_t measured_ns = 0;  // host wall-clock time (0 for device-track events)
  int64_t modelled_ns = 0;  // time from a cost model: a modelled copy, a sync's stall
  int64_t bytes = 0;        // copied, read back or allocated (as requested)
};

class Profiler {
 public:
  // Trace time now: nanoseconds since BeginCall plus the modelled stalls so far.
  int64_t Now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count() +
           stall_ns_;
  }

  // The VM brackets a profiled call with these; a Profiler records one call.
  void BeginCall(const std::string& function, Device& execution, const Counters& before);
  void EndCall(const Counters& after);
  // Stops timing the call's device work, however the call ended (EndCall
  // has read the times of a call that finished).
  void EndDeviceTiming() { timing_.reset(); }

  // The trace time now, for a kernel call or copy on `device`: what the
  // thread issues on the device until the Kernel or Copy event is timed by
  // the device's timer, if it has one.
  int64_t StartDeviceWork(const Device& device);

  // Each takes the trace time its work started (from Now() or
  // StartDeviceWork()) and ends now.
  void Kernel(const std::string& name, const Device& device, int64_t start);
  void ShapeFunc(const std::string& op, bool native, int64_t start);
  void Compile(const std::string& op, int64_t start);
  // `device` is the non-host side; `modelled_s` what its copy engine returned.
  void Copy(bool to_host, const Device& device, int64_t bytes, double modelled_s, int64_t start);
  void Sync(const Device& device, int64_t start);
  void Alloc(const char* op, const Device& device, int64_t bytes, bool from_pool, int64_t start);
  void Readback(int64_t bytes, int64_t start);

  const std::vector<ProfileEvent>& events() const { return events_; }
  const std::string& function() const { return function_; }
  const std::string& device() const { return device_; }
  // What the call did: the VM's counters after it minus before.
  const Counters& counters() const { return counters_; }
  bool finished() const { return finished_; }

 private:
  ProfileEvent& Host(ProfileCategory category, std::string name, const Device& device, int64_t start);
  // Queues the device-track twin of `host` on the stream: it starts when
  // both the host issued it and the stream finished earlier work.
  void OnStream(const ProfileEvent& host, int64_t duration_ns, TimeSource source);
  // Whether `device`'s work is timed by the device: ends its span, and
  // leaves the device-track twin of `host` for PlaceDeviceTimes.
  bool OnDeviceClock(const ProfileEvent& host, const Device& device);
  // Gives the twins the device's times; returns when the last one ends.
  int64_t PlaceDeviceTimes();

  std::chrono::steady_clock::time_point origin_;
  int64_t stall_ns_ = 0;
  int64_t stream_free_at_ = 0;  // trace time the device stream finishes its queued work
  std::string function_, device_;
  Counters before_, counters_;
  bool finished_ = false;
  std::vector<ProfileEvent> events_;
  std::unique_ptr<DeviceTiming> timing_;  // null when the device has no timer
  const Device* timed_device_ = nullptr;
  std::vector<size_t> timed_events_;  // the twin of each timed span, in events_
};

}  // namespace shapefn
