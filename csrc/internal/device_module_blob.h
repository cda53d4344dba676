// The serialized form of the device modules TVM's GPU code generators emit
// (OpenCL, CUDA): a format name, a table of kernels (argument types, launch
// parameter tags), then the code (source or binary). Little-endian u64
// lengths and counts, as TVM 0.27 writes them.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shapefn {

struct DeviceKernelInfo {
  std::string key;  // its key in the table (TVM writes the kernel's name)
  std::string name;
  std::vector<DLDataType> arg_types;
  std::vector<std::string> launch_tags;
  std::vector<int32_t> arg_extra_tags;
};

struct DeviceModuleBlob {
  std::string format;  // "cl", "cuda" (source), "ptx", "cubin", "fatbin", ...
  std::vector<DeviceKernelInfo> kernels;
  std::string code;
};

// Throws Error(kFormat) saying what is wrong when `bytes` is not such a module.
DeviceModuleBlob ParseDeviceModule(const char* bytes, size_t size);
std::string SerializeDeviceModule(const DeviceModuleBlob& blob);

}  // namespace shapefn
