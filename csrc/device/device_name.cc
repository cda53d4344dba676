// Device names, parsed in this one place: "host", "sim", "opencl[:i]", and
// TVM's device kinds ("cuda:1", ...). The Python API (shapefn.device) and
// shapefn-run reach devices through MakeDevice.
#include <mutex>
#include <string>

#include "shapefn/device.h"
#include "shapefn/error.h"
#include "shapefn/opencl.h"

namespace shapefn {

DeviceName ParseDeviceName(const std::string& name) {
  const size_t colon = name.find(':');
  if (colon == std::string::npos) return DeviceName{name, 0};
  DeviceName parsed{name.substr(0, colon), 0};
  const std::string digits = name.substr(colon + 1);
  // At most six digits: an index, never large enough to overflow an int.
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) {
    Fail(ErrorKind::kValue, "device '" + name + "': expected '" + parsed.kind + "' or '" + parsed.kind +
                                ":<index>' (the index after ':' must be a non-negative integer)");
  }
  parsed.index = std::stoi(digits);
  return parsed;
}

std::shared_ptr<Device> MakeDevice(const std::string& name) {
  if (name == "host") return HostDevice();
  if (name == "sim") {
    static std::shared_ptr<Device> sim = MakeSimDevice(SimConfig{});
    return sim;
  }
  const std::string kind = ParseDeviceName(name).kind;
  if (kind == "opencl") return MakeOpenCLDevice(name);
  if (kind == "cuda") LoadCudaRuntime();
  return MakeTvmDevice(name);
}

}  // namespace shapefn
