// The profiler's placement of device times (profiler.h) with a device whose
// timer gives durations only, as TVM's timers (CUDA events) do: the path a
// GPU takes, driven here without one. OpenCL's timestamps are tested on PoCL
// (tests/test_profiler.py).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "shapefn/profiler.h"

namespace shapefn {
namespace {

struct TimingLog {
  int spans_begun = 0;
  bool open = false;
  bool destroyed = false;
};

class DurationsOnly final : public DeviceTiming {
 public:
  DurationsOnly(std::vector<int64_t> durations, TimingLog* log) : durations_(std::move(durations)), log_(log) {}
  ~DurationsOnly() override { log_->destroyed = true; }
  void BeginSpan() override {
    EXPECT_FALSE(log_->open);
    log_->open = true;
    log_->spans_begun += 1;
  }
  void EndSpan() override {
    EXPECT_TRUE(log_->open);
    log_->open = false;
  }
  std::vector<DeviceSpanTime> Resolve() override {
    EXPECT_EQ(static_cast<size_t>(log_->spans_begun), durations_.size());
    std::vector<DeviceSpanTime> spans;
    for (int64_t d : durations_) spans.push_back(DeviceSpanTime{-1, d, true});
    return spans;
  }

 private:
  std::vector<int64_t> durations_;
  TimingLog* log_;
};

// A device whose kernels are not CPU code, with or without a timer.
class FakeGpu final : public Device {
 public:
  FakeGpu(std::vector<int64_t> durations, bool has_timer) : durations_(std::move(durations)), has_timer_(has_timer) {}
  std::string name() const override { return "cuda:0"; }
  DLDevice kernel_device() const override { return DLDevice{kDLCUDA, 0}; }
  void* Alloc(size_t, size_t) override { return nullptr; }
  void Free(void*) override {}
  double CopyToHost(void*, const void*, size_t) override { return 0.0; }
  double CopyFromHost(void*, const void*, size_t) override { return 0.0; }
  void Sync() override {}
  std::unique_ptr<DeviceTiming> StartTiming() override {
    if (!has_timer_) return nullptr;
    return std::make_unique<DurationsOnly>(durations_, &log);
  }
  TimingLog log;

 private:
  std::vector<int64_t> durations_;
  bool has_timer_;
};

// h2d, a device kernel, a host kernel, d2h.
void RecordCall(Profiler& p, FakeGpu& gpu) {
  p.BeginCall("main", gpu, Counters());
  p.Copy(false, gpu, 16, 0.0, p.StartDeviceWork(gpu));
  p.Kernel("scale", gpu, p.StartDeviceWork(gpu));
  p.Kernel("shape_to_tensor", *HostDevice(), p.StartDeviceWork(*HostDevice()));
  p.Copy(true, gpu, 8, 0.0, p.StartDeviceWork(gpu));
  p.EndCall(Counters());
}

std::vector<ProfileEvent> Track(const Profiler& p, ProfileTrack track) {
  std::vector<ProfileEvent> out;
  for (const ProfileEvent& e : p.events()) {
    if (e.track == track) out.push_back(e);
  }
  return out;
}

TEST(Profiler, DurationsOnlyTimerPlacesDeviceWorkOnTheStreamInIssueOrder) {
  // Seconds: far longer than the host takes to record the call, whatever the machine.
  const std::vector<int64_t> durations = {1'000'000'000, 2'000'000'000, 3'000'000'000};
  FakeGpu gpu(durations, true);
  Profiler p;
  RecordCall(p, gpu);
  EXPECT_EQ(gpu.log.spans_begun, 3);  // not the host kernel
  EXPECT_TRUE(gpu.log.destroyed);
  const std::vector<ProfileEvent> device = Track(p, ProfileTrack::kDevice);
  ASSERT_EQ(device.size(), 3u);
  std::vector<ProfileEvent> issued;
  for (const ProfileEvent& e : Track(p, ProfileTrack::kHost)) {
    if (e.device == "cuda:0" && e.category != ProfileCategory::kCall) issued.push_back(e);
  }
  ASSERT_EQ(issued.size(), 3u);
  int64_t stream_free = 0;
  for (size_t i = 0; i < device.size(); ++i) {
    const ProfileEvent& e = device[i];
    EXPECT_EQ(e.time_source, TimeSource::kDevice);
    EXPECT_EQ(e.duration_ns, durations[i]);
    EXPECT_EQ(e.measured_ns, 0);
    EXPECT_EQ(e.name, issued[i].name);
    // It starts once issued and once the stream finished what came before.
    EXPECT_EQ(e.start_ns, std::max(issued[i].start_ns, stream_free));
    stream_free = e.start_ns + e.duration_ns;
  }
  const ProfileEvent& call = p.events().back();
  ASSERT_EQ(call.category, ProfileCategory::kCall);
  EXPECT_EQ(call.duration_ns, stream_free);  // the call's span holds its device work
  EXPECT_LT(call.measured_ns, call.duration_ns);
}

TEST(Profiler, DeviceWithoutTimerKeepsTheHostCall) {
  FakeGpu gpu({}, false);
  Profiler p;
  RecordCall(p, gpu);
  const std::vector<ProfileEvent> device = Track(p, ProfileTrack::kDevice);
  ASSERT_EQ(device.size(), 3u);
  for (const ProfileEvent& e : device) EXPECT_EQ(e.time_source, TimeSource::kHostCall);
}

TEST(Profiler, AFailedCallStopsItsDeviceTiming) {
  FakeGpu gpu({1000}, true);
  Profiler p;
  p.BeginCall("main", gpu, Counters());
  p.StartDeviceWork(gpu);  // the kernel call then fails: no Kernel event, no EndCall
  EXPECT_TRUE(gpu.log.open);
  p.EndDeviceTiming();
  EXPECT_TRUE(gpu.log.destroyed);
  EXPECT_FALSE(p.finished());
}

}  // namespace
}  // namespace shapefn
