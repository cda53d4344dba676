// OpenCL devices of shapefn's own OpenCL runtime (csrc/device/opencl): what
// is found on this machine, and the `opencl` Device the VM runs on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shapefn/device.h"

namespace shapefn {

struct OpenCLDeviceInfo {
  int index = 0;  // "opencl:<index>", in the order platforms and their devices are listed
  std::string platform, platform_vendor, platform_version;
  std::string name, vendor, version, driver_version, type;  // type: "gpu", "cpu", "accelerator", "other"
  int64_t compute_units = 0, max_clock_mhz = 0;
  int64_t max_work_group_size = 0;
  int64_t max_work_item_sizes[3] = {0, 0, 0};
  int64_t global_mem_bytes = 0, local_mem_bytes = 0, max_alloc_bytes = 0;
  int64_t sub_buffer_alignment = 0;  // bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN)
  bool available = false;
};

// What the runtime did on one device, whoever asked: shapefn's VM, TVM's
// (tensors on `tvm.opencl(i)`), a compiled kernel's workspaces.
struct OpenCLDeviceCounts {
  int64_t d2h_copies = 0, d2h_bytes = 0, h2d_copies = 0, h2d_bytes = 0, d2d_copies = 0, d2d_bytes = 0;
  int64_t syncs = 0, kernel_launches = 0, allocations = 0;
};

// The devices found (empty when there is no driver or ICD loader).
std::vector<OpenCLDeviceInfo> OpenCLDevices();
// Why there is no device, naming what to install ("" when there is one).
std::string OpenCLUnavailableReason();
// "opencl" (device 0) or "opencl:<index>"; one Device per index in a
// process. Throws Error(kValue) when there is no such device.
std::shared_ptr<Device> MakeOpenCLDevice(const std::string& spec);
// "opencl:<index>": the name of OpenCL device `index`.
std::string OpenCLDeviceName(int index);
OpenCLDeviceCounts OpenCLCounts(int index);
void ResetOpenCLCounts(int index);

}  // namespace shapefn
