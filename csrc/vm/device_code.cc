// Which device an executable's kernels run on, checked before a VM (or
// shapefn-run) touches the device: a CUDA build given an OpenCL device, or a
// CPU build given a GPU, would otherwise fail inside its first kernel call,
// after the constants were uploaded, with TVM's message about a device type.
#include <dlpack/dlpack.h>

#include <string>
#include <utility>

#include "shapefn/device.h"
#include "shapefn/error.h"
#include "shapefn/executable.h"

namespace shapefn {
namespace {

constexpr std::pair<DLDeviceType, const char*> kCodeKinds[] = {
    {kDLCPU, "cpu"},     {kDLCUDA, "cuda"}, {kDLOpenCL, "opencl"}, {kDLVulkan, "vulkan"},
    {kDLMetal, "metal"}, {kDLROCM, "rocm"}, {kDLExtDev, "ext_dev"}};

std::string Describe(const std::string& device_code) {
  return device_code == "cpu" ? "the CPU (devices 'host' and 'sim')" : "'" + device_code + "'";
}

}  // namespace

bool IsDeviceCode(const std::string& kind) {
  if (kind.empty()) return true;
  for (const auto& [type, name] : kCodeKinds) {
    if (kind == name) return true;
  }
  return false;
}

std::string DeviceCodeOf(DLDevice kernel_device) {
  for (const auto& [type, name] : kCodeKinds) {
    if (kernel_device.device_type == type) return name;
  }
  return "device type " + std::to_string(static_cast<int>(kernel_device.device_type));
}

std::string DeviceCodeOfName(const std::string& name) {
  if (name == "host" || name == "sim") return "cpu";
  return ParseDeviceName(name).kind;
}

void RequireDeviceCode(const Executable& exe, const std::string& device_code, const std::string& device_name) {
  if (exe.device_code().empty() || exe.device_code() == device_code) return;
  Fail(ErrorKind::kValue,
       "the executable was compiled for " + Describe(exe.device_code()) + " and cannot run on device '" + device_name +
           "', which runs code for " + Describe(device_code) + ": compile it for that device, or run it on a " +
           (exe.device_code() == "cpu" ? std::string("'host' or 'sim'") : "'" + exe.device_code() + "'") + " device");
}

}  // namespace shapefn
