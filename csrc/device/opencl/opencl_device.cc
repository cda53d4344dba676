// The `opencl` Device: shapefn's VM on an OpenCL device through the runtime.
#include <array>
#include <map>
#include <mutex>

#include "event_recorder.h"
#include "opencl_runtime.h"
#include "shapefn/error.h"
#include "shapefn/opencl.h"

namespace shapefn {
namespace {

class OpenCLDevice final : public Device {
 public:
  explicit OpenCLDevice(int index) : index_(index), name_(OpenCLDeviceName(index)) {}

  std::string name() const override { return name_; }
  DLDevice kernel_device() const override { return DLDevice{kDLOpenCL, index_}; }
  size_t tensor_offset_alignment() const override {
    return static_cast<size_t>(opencl::Runtime::Global().info(index_).sub_buffer_alignment);
  }

  void* Alloc(size_t nbytes, size_t alignment) override {
    return opencl::Runtime::Global().Alloc(index_, nbytes, alignment);
  }
  void Free(void* ptr) override { opencl::Runtime::Global().Free(ptr); }
  double CopyToHost(void* host_dst, const void* src, size_t n) override {
    opencl::Runtime::Global().Read(host_dst, src, n);
    Record(true, n, 0.0);
    return 0.0;
  }
  double CopyFromHost(void* dst, const void* host_src, size_t n) override {
    opencl::Runtime::Global().Write(dst, host_src, n);
    Record(false, n, 0.0);
    return 0.0;
  }
  void Sync() override {
    opencl::Runtime::Global().Sync(index_);
    RecordSync();
  }
  void ReadCheckWords(int64_t* host_dst, const void* src, size_t n) override {
    opencl::Runtime::Global().ReadNow(host_dst, src, n);
  }
  void ClearCheckWords(void* dst, size_t n) override { opencl::Runtime::Global().ZeroNow(dst, n); }
  void Flush() override { opencl::Runtime::Global().Flush(index_); }
  std::unique_ptr<DeviceTiming> StartTiming() override { return std::make_unique<opencl::EventRecorder>(index_); }

 private:
  int index_;
  std::string name_;
};

int ParseIndex(const std::string& spec) {
  DeviceName parsed = ParseDeviceName(spec);
  if (parsed.kind != "opencl") Fail(ErrorKind::kValue, "device '" + spec + "' is not an OpenCL device");
  return parsed.index;
}

}  // namespace

std::string OpenCLDeviceName(int index) { return "opencl:" + std::to_string(index); }

std::vector<OpenCLDeviceInfo> OpenCLDevices() {
  opencl::Runtime& rt = opencl::Runtime::Global();
  std::vector<OpenCLDeviceInfo> out;
  for (int i = 0; i < rt.num_devices(); ++i) out.push_back(rt.info(i));
  return out;
}

std::string OpenCLUnavailableReason() { return opencl::Runtime::Global().unavailable_reason(); }

std::shared_ptr<Device> MakeOpenCLDevice(const std::string& spec) {
  const int index = ParseIndex(spec);
  opencl::Runtime& rt = opencl::Runtime::Global();
  rt.info(index);  // fails naming the devices there are
  // One Device per index: tensors from one VM are on the same device as another's.
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<Device>> devices;
  std::lock_guard<std::mutex> lock(mutex);
  auto& device = devices[index];
  if (!device) device = std::make_shared<OpenCLDevice>(index);
  return device;
}

OpenCLDeviceCounts OpenCLCounts(int index) { return opencl::Runtime::Global().counts(index); }
void ResetOpenCLCounts(int index) { opencl::Runtime::Global().ResetCounts(index); }

}  // namespace shapefn
