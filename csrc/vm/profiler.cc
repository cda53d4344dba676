// Records the events of one profiled VM call and places device work on the
// stream's timeline (see profiler.h for what each time means).
#include "shapefn/profiler.h"

#include <algorithm>
#include <limits>

namespace shapefn {

namespace {

int64_t Nanoseconds(double seconds) { return static_cast<int64_t>(seconds * 1e9 + 0.5); }

// Kernels and copies of a device whose kernels are CPU code (host, sim, TVM's
// cpu) have finished when the call returns; elsewhere they are only queued.
TimeSource HostCallSource(const Device& device) {
  return device.kernel_device().device_type == kDLCPU ? TimeSource::kMeasured : TimeSource::kHostCall;
}

}  // namespace

const char* ProfileCategoryName(ProfileCategory category) {
  switch (category) {
    case ProfileCategory::kCall: return "call";
    case ProfileCategory::kKernel: return "kernel";
    case ProfileCategory::kShapeFunc: return "shape_func";
    case ProfileCategory::kCompile: return "compile";
    case ProfileCategory::kCopy: return "copy";
    case ProfileCategory::kSync: return "sync";
    case ProfileCategory::kAlloc: return "alloc";
    case ProfileCategory::kReadback: return "readback";
  }
  return "?";
}

const char* TimeSourceName(TimeSource source) {
  switch (source) {
    case TimeSource::kMeasured: return "measured";
    case TimeSource::kModelled: return "modelled";
    case TimeSource::kHostCall: return "host_call";
    case TimeSource::kDevice: return "device";
  }
  return "?";
}

void Profiler::BeginCall(const std::string& function, Device& execution, const Counters& before) {
  // Before the call's clock starts: a timer may first wait for earlier work.
  timed_events_.clear();
  timing_ = execution.StartTiming();
  timed_device_ = &execution;
  function_ = function;
  device_ = execution.name();
  before_ = before;
  counters_ = Counters();
  finished_ = false;
  events_.clear();
  events_.reserve(1024);
  stall_ns_ = 0;
  stream_free_at_ = 0;
  origin_ = std::chrono::steady_clock::now();
}

void Profiler::EndCall(const Counters& after) {
  const int64_t host_end = Now();
  const int64_t device_end = timing_ ? PlaceDeviceTimes() : 0;
  EndDeviceTiming();
  ProfileEvent call;
  call.category = ProfileCategory::kCall;
  call.track = ProfileTrack::kHost;
  call.time_source = stall_ns_ > 0 ? TimeSource::kModelled : TimeSource::kMeasured;
  call.name = function_;
  call.device = device_;
  call.duration_ns = std::max(host_end, device_end);
  call.modelled_ns = stall_ns_;
  call.measured_ns = host_end - stall_ns_;
  events_.push_back(std::move(call));
#define SHAPEFN_COUNTER_DELTA(name) counters_.name = after.name - before_.name;
  SHAPEFN_INT_COUNTERS(SHAPEFN_COUNTER_DELTA)
#undef SHAPEFN_COUNTER_DELTA
  counters_.modelled_transfer_s = after.modelled_transfer_s - before_.modelled_transfer_s;
  finished_ = true;
}

ProfileEvent& Profiler::Host(ProfileCategory category, std::string name, const Device& device, int64_t start) {
  ProfileEvent e;
  e.category = category;
  e.track = ProfileTrack::kHost;
  e.time_source = TimeSource::kMeasured;
  e.name = std::move(name);
  e.device = device.name();
  e.start_ns = start;
  e.measured_ns = e.duration_ns = Now() - start;
  events_.push_back(std::move(e));
  return events_.back();
}

void Profiler::OnStream(const ProfileEvent& host, int64_t duration_ns, TimeSource source) {
  ProfileEvent e = host;
  e.track = ProfileTrack::kDevice;
  e.time_source = source;
  e.start_ns = std::max(host.start_ns, stream_free_at_);
  e.duration_ns = duration_ns;
  e.measured_ns = 0;
  stream_free_at_ = e.start_ns + duration_ns;
  events_.push_back(std::move(e));
}

bool Profiler::OnDeviceClock(const ProfileEvent& host, const Device& device) {
  if (!timing_ || &device != timed_device_) return false;
  timing_->EndSpan();
  ProfileEvent e = host;
  e.track = ProfileTrack::kDevice;
  e.time_source = TimeSource::kDevice;
  e.measured_ns = 0;
  timed_events_.push_back(events_.size());
  events_.push_back(std::move(e));
  return true;
}

int64_t Profiler::PlaceDeviceTimes() {
  const std::vector<DeviceSpanTime> spans = timing_->Resolve();
  // A command cannot start before the host issued it: the least offset from
  // the device's clock to the trace's that keeps every one after its issue.
  int64_t offset = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].ran && spans[i].start_ns >= 0) {
      offset = std::max(offset, events_[timed_events_[i]].start_ns - spans[i].start_ns);
    }
  }
  int64_t stream_free = 0;
  std::vector<bool> idle(events_.size(), false);
  for (size_t i = 0; i < spans.size(); ++i) {
    ProfileEvent& e = events_[timed_events_[i]];
    if (!spans[i].ran) {
      idle[timed_events_[i]] = true;  // no device work: no device event
      continue;
    }
    e.start_ns = spans[i].start_ns >= 0 ? spans[i].start_ns + offset : std::max(e.start_ns, stream_free);
    e.duration_ns = spans[i].duration_ns;
    stream_free = e.start_ns + e.duration_ns;
  }
  size_t kept = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (idle[i]) continue;
    if (kept != i) events_[kept] = std::move(events_[i]);
    ++kept;
  }
  events_.resize(kept);
  timed_events_.clear();
  return stream_free;
}

int64_t Profiler::StartDeviceWork(const Device& device) {
  if (timing_ && &device == timed_device_) timing_->BeginSpan();
  return Now();
}

void Profiler::Kernel(const std::string& name, const Device& device, int64_t start) {
  ProfileEvent& e = Host(ProfileCategory::kKernel, name, device, start);
  if (!device.is_host() && !OnDeviceClock(ProfileEvent(e), device)) {
    OnStream(ProfileEvent(e), e.measured_ns, HostCallSource(device));
  }
}

void Profiler::ShapeFunc(const std::string& op, bool native, int64_t start) {
  Host(ProfileCategory::kShapeFunc, op, *HostDevice(), start).detail = native ? "native" : "tvm";
}

void Profiler::Compile(const std::string& op, int64_t start) {
  Host(ProfileCategory::kCompile, op, *HostDevice(), start);
}

void Profiler::Copy(bool to_host, const Device& device, int64_t bytes, double modelled_s, int64_t start) {
  ProfileEvent& e = Host(ProfileCategory::kCopy, to_host ? "d2h" : "h2d", device, start);
  e.bytes = bytes;
  e.modelled_ns = Nanoseconds(modelled_s);
  ProfileEvent host = e;
  if (OnDeviceClock(host, device)) return;
  if (host.modelled_ns > 0) {
    OnStream(host, host.modelled_ns, TimeSource::kModelled);
  } else {
    OnStream(host, host.measured_ns, HostCallSource(device));
  }
}

void Profiler::Sync(const Device& device, int64_t start) {
  ProfileEvent& e = Host(ProfileCategory::kSync, "sync", device, start);
  // The host cannot go on before the stream is done: on a modelled device
  // that is later than the (instant) simulated sync returned.
  int64_t end = e.start_ns + e.measured_ns;
  int64_t stall = std::max<int64_t>(0, stream_free_at_ - end);
  e.modelled_ns = stall;
  e.duration_ns += stall;
  if (stall > 0) e.time_source = TimeSource::kModelled;
  stall_ns_ += stall;
  stream_free_at_ = end + stall;
}

void Profiler::Alloc(const char* op, const Device& device, int64_t bytes, bool from_pool, int64_t start) {
  ProfileEvent& e = Host(ProfileCategory::kAlloc, op, device, start);
  e.bytes = bytes;
  e.detail = from_pool ? "pool" : "device";
}

void Profiler::Readback(int64_t bytes, int64_t start) {
  // The span holds its copies and sync; a stall in that sync is modelled,
  // not measured.
  int64_t stalled = 0;
  for (auto it = events_.rbegin(); it != events_.rend() && it->start_ns >= start; ++it) {
    if (it->category == ProfileCategory::kSync) stalled += it->modelled_ns;
  }
  ProfileEvent& e = Host(ProfileCategory::kReadback, "readback", *HostDevice(), start);
  e.device = device_;
  e.bytes = bytes;
  e.modelled_ns = stalled;
  e.measured_ns -= stalled;
}

}  // namespace shapefn
