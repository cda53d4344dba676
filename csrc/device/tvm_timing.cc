// TVM's device timers as the device timing of a profiled call (tvm_timing.h).
// A timer is used through its virtual interface only, like the DeviceAPI, so
// shapefn links no device runtime: the timer comes from a tvm-ffi global
// function that the device's runtime registers when it is loaded.
#include "tvm_timing.h"

#include <tvm/ffi/c_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/object.h>

#include <cstring>
#include <vector>

#include "shapefn/error.h"

namespace shapefn {
namespace tvm_abi {

// The interface of tvm::runtime::TimerNode, declared as TVM 0.27 declares it
// (tvm/runtime/timer.h: an ffi::Object, then these virtuals in this order),
// so its vtable is TVM's. That header cannot be included: it pulls in
// headers the wheel does not ship (tvm/support/io.h). IsTimer checks an
// object's type before it is used as one. It must not be in an anonymous
// namespace: a class no other translation unit can derive from has only the
// overriders this one sees (pure ones), and the compiler calls those
// directly ("pure virtual method called") instead of through TVM's vtable.
class TimerNode : public tvm::ffi::Object {
 public:
  virtual void Start() = 0;
  virtual void Stop() = 0;
  virtual int64_t SyncAndGetElapsedNanos() = 0;
  virtual ~TimerNode() {}
};

}  // namespace tvm_abi

namespace {

using tvm_abi::TimerNode;

constexpr const char* kTimerTypeKey = "runtime.TimerNode";

bool IsTimer(const tvm::ffi::ObjectRef& object) {
  const TVMFFITypeInfo* info = TVMFFIGetTypeInfo(object->type_index());
  for (int32_t depth = 0; info != nullptr && depth <= info->type_depth; ++depth) {
    const TVMFFITypeInfo* t = depth == info->type_depth ? info : info->type_ancestors[depth];
    if (t->type_key.size == std::strlen(kTimerTypeKey) &&
        std::memcmp(t->type_key.data, kTimerTypeKey, t->type_key.size) == 0) {
      return true;
    }
  }
  return false;
}

// A timer: the reference keeps it alive, the pointer calls it.
struct Timer {
  tvm::ffi::ObjectRef ref;
  TimerNode* node;
};

class TvmTiming final : public DeviceTiming {
 public:
  TvmTiming(std::string kind, DLDevice device, tvm::runtime::DeviceAPI* api, tvm::ffi::Function make_timer)
      : kind_(std::move(kind)), device_(device), api_(api), make_timer_(std::move(make_timer)) {}

  void BeginSpan() override {
    Guard("starting", [&] {
      // TVM's CUDA timer records on the stream of the current device.
      api_->SetDevice(device_);
      tvm::ffi::ObjectRef timer = make_timer_(device_).cast<tvm::ffi::ObjectRef>();
      if (!IsTimer(timer)) {
        Fail(ErrorKind::kRuntime,
             "runtime.timer." + kind_ + " returned a " + std::string(timer->GetTypeKey()) + ", not a " + kTimerTypeKey);
      }
      auto* node = static_cast<TimerNode*>(const_cast<tvm::ffi::Object*>(timer.get()));
      node->Start();
      timers_.push_back(Timer{std::move(timer), node});
    });
  }
  void EndSpan() override {
    Guard("stopping", [&] { timers_.back().node->Stop(); });
  }
  std::vector<DeviceSpanTime> Resolve() override {
    std::vector<DeviceSpanTime> spans(timers_.size());
    Guard("reading", [&] {
      for (size_t i = 0; i < timers_.size(); ++i) {
        spans[i].duration_ns = timers_[i].node->SyncAndGetElapsedNanos();
        spans[i].ran = true;  // the timer cannot tell an empty span: it takes ~0 ns
      }
    });
    timers_.clear();
    return spans;
  }

 private:
  template <typename F>
  void Guard(const char* what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      FailFromCaught(ErrorKind::kRuntime,
                     std::string(what) + " TVM's device timer (runtime.timer." + kind_ + ") failed: " + e.what());
    }
  }

  std::string kind_;
  DLDevice device_;
  tvm::runtime::DeviceAPI* api_;
  tvm::ffi::Function make_timer_;
  std::vector<Timer> timers_;
};

}  // namespace

std::unique_ptr<DeviceTiming> MakeTvmTiming(const std::string& kind, DLDevice device, tvm::runtime::DeviceAPI* api) {
  auto make_timer = tvm::ffi::Function::GetGlobal("runtime.timer." + kind);
  if (!make_timer.has_value()) return nullptr;
  return std::make_unique<TvmTiming>(kind, device, api, *make_timer);
}

}  // namespace shapefn
