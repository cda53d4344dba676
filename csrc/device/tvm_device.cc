// Any TVM device (CUDA, ROCm, Vulkan, ...) through TVM's DeviceAPI. The API
// object is fetched from the tvm-ffi global function `device_api.<kind>`
// (registered by TVM's runtime when it is loaded) and used through its
// virtual interface only, so shapefn does not link TVM's runtime.
#include <tvm/ffi/function.h>
#include <tvm/runtime/device_api.h>

#include <string>
#include <vector>

#include "shapefn/device.h"
#include "shapefn/error.h"
#include "tvm_timing.h"

namespace shapefn {
namespace {

struct DeviceSpec {
  std::string kind;
  DLDevice device;
};

DeviceSpec ParseSpec(const std::string& spec) {
  static const std::pair<const char*, DLDeviceType> kKinds[] = {
      {"cpu", kDLCPU},       {"cuda", kDLCUDA},   {"cuda_host", kDLCUDAHost}, {"opencl", kDLOpenCL},
      {"vulkan", kDLVulkan}, {"metal", kDLMetal}, {"rocm", kDLROCM},          {"ext_dev", kDLExtDev}};
  DeviceName parsed = ParseDeviceName(spec);
  for (const auto& [name, type] : kKinds) {
    if (parsed.kind == name) return {parsed.kind, DLDevice{type, parsed.index}};
  }
  Fail(ErrorKind::kValue,
       "unknown device '" + spec +
           "' (expected host, sim, or a TVM device: cpu, cuda, opencl, vulkan, metal, rocm, ext_dev)");
}

tvm::runtime::DeviceAPI* FindApi(const std::string& kind) {
  auto getter = tvm::ffi::Function::GetGlobal("device_api." + kind);
  if (!getter.has_value()) return nullptr;
  return static_cast<tvm::runtime::DeviceAPI*>((*getter)().cast<void*>());
}

bool Exists(tvm::runtime::DeviceAPI* api, DLDevice device) {
  tvm::ffi::Any rv;
  api->GetAttr(device, tvm::runtime::kExist, &rv);
  return rv != nullptr && rv.cast<int64_t>() != 0;
}

class TvmDevice final : public Device {
 public:
  TvmDevice(std::string spec, std::string kind, DLDevice device, tvm::runtime::DeviceAPI* api)
      : spec_(std::move(spec)), kind_(std::move(kind)), device_(device), api_(api) {}

  std::string name() const override { return spec_; }
  DLDevice kernel_device() const override { return device_; }

  void* Alloc(size_t nbytes, size_t alignment) override {
    try {
      return api_->AllocDataSpace(device_, nbytes == 0 ? 1 : nbytes, alignment, DLDataType{kDLUInt, 8, 1});
    } catch (const std::exception& e) {
      FailFromCaught(ErrorKind::kRuntime,
                     spec_ + ": allocation of " + std::to_string(nbytes) + " bytes failed: " + e.what());
    }
  }
  void Free(void* ptr) override { api_->FreeDataSpace(device_, ptr); }

  double CopyToHost(void* host_dst, const void* src, size_t n) override {
    Copy(const_cast<void*>(src), device_, host_dst, DLDevice{kDLCPU, 0}, n);
    Record(true, n, 0.0);
    return 0.0;
  }
  double CopyFromHost(void* dst, const void* host_src, size_t n) override {
    Copy(const_cast<void*>(host_src), DLDevice{kDLCPU, 0}, dst, device_, n);
    Record(false, n, 0.0);
    return 0.0;
  }
  void Sync() override {
    api_->StreamSync(device_, nullptr);
    RecordSync();
  }
  void ReadCheckWords(int64_t* host_dst, const void* src, size_t n) override {
    Copy(const_cast<void*>(src), device_, host_dst, DLDevice{kDLCPU, 0}, n);
    api_->StreamSync(device_, nullptr);
  }
  void ClearCheckWords(void* dst, size_t n) override {
    std::vector<uint8_t> zeros(n, 0);
    Copy(zeros.data(), DLDevice{kDLCPU, 0}, dst, device_, n);
    api_->StreamSync(device_, nullptr);
  }
  std::unique_ptr<DeviceTiming> StartTiming() override { return MakeTvmTiming(kind_, device_, api_); }

 private:
  void Copy(void* from, DLDevice from_dev, void* to, DLDevice to_dev, size_t n) {
    if (n == 0) return;
    int64_t extent = static_cast<int64_t>(n);
    DLDataType u8{kDLUInt, 8, 1};
    DLTensor a{from, from_dev, 1, u8, &extent, nullptr, 0};
    DLTensor b{to, to_dev, 1, u8, &extent, nullptr, 0};
    try {
      api_->CopyDataFromTo(&a, &b, nullptr);
    } catch (const std::exception& e) {
      FailFromCaught(ErrorKind::kRuntime, spec_ + ": copy of " + std::to_string(n) + " bytes failed: " + e.what());
    }
  }

  std::string spec_;
  std::string kind_;
  DLDevice device_;
  tvm::runtime::DeviceAPI* api_;
};

}  // namespace

bool TvmDeviceExists(const std::string& spec) {
  DeviceSpec parsed = ParseSpec(spec);
  if (parsed.kind == "cuda") {
    // TVM's CUDA runtime is loaded on demand (as MakeDevice does): without
    // a driver or a CUDA runtime there is no CUDA device.
    try {
      LoadCudaRuntime();
    } catch (const Error&) {
      return false;
    }
  }
  tvm::runtime::DeviceAPI* api = FindApi(parsed.kind);
  return api != nullptr && Exists(api, parsed.device);
}

std::shared_ptr<Device> MakeTvmDevice(const std::string& spec) {
  DeviceSpec parsed = ParseSpec(spec);
  tvm::runtime::DeviceAPI* api = FindApi(parsed.kind);
  if (api == nullptr) {
    Fail(ErrorKind::kValue, "device '" + spec + "': TVM's runtime has no DeviceAPI for '" + parsed.kind +
                                "' in this process (is TVM built with it, and imported?)");
  }
  if (!Exists(api, parsed.device)) Fail(ErrorKind::kValue, "device '" + spec + "' does not exist on this machine");
  return std::make_shared<TvmDevice>(spec, parsed.kind, parsed.device, api);
}

}  // namespace shapefn
