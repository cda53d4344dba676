// shapefn's OpenCL runtime: the devices found, their contexts and queues,
// device memory and the copies between it and the host. The TVM DeviceAPI
// (opencl_device_api.cc), the loader of TVM's OpenCL modules
// (opencl_module.cc) and shapefn's `opencl` Device all go through it.
//
// Device memory is named by *device addresses*: each allocation is a
// cl_mem, and the runtime gives it a range of addresses of its own, in a
// part of the address space the host can never dereference (non-canonical
// on x86-64). A tensor's data pointer is such an address, so byte offsets
// work as with any device pointer (`data + offset`), and a host read of
// device memory faults at once instead of reading garbage. Kernel
// arguments and copies resolve an address to its cl_mem and offset; a
// kernel argument inside an allocation becomes a sub-buffer, which OpenCL
// allows only at offsets aligned to the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cl_api.h"
#include "shapefn/opencl.h"

namespace shapefn::opencl {

using DeviceInfo = OpenCLDeviceInfo;
using DeviceCounts = OpenCLDeviceCounts;

// Where a device address points.
struct Region {
  cl_mem mem = nullptr;
  size_t offset = 0;     // from the start of `mem`
  size_t available = 0;  // bytes from the address to the end of its allocation
  int device = 0;
};

struct StagingBuffer;

class Runtime {
 public:
  // The process's runtime; finds the platforms and devices on first use.
  static Runtime& Global();
  ~Runtime();

  // False when there is no ICD loader or no device; `unavailable_reason()`
  // then says what to install.
  bool available() const { return !devices_.empty(); }
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  // Throws Error(kValue) naming the devices there are when `device` is not one.
  const DeviceInfo& info(int device) const;
  const ClApi& api() const { return *api_; }
  cl_device_id device_id(int device) const;
  cl_context context(int device);
  // The queue the calling thread enqueues on: the device's own, or while the
  // thread records a profiled call (event_recorder.h), the profiling queue.
  cl_command_queue queue(int device);
  // The device's second queue, with CL_QUEUE_PROFILING_ENABLE: made on first use.
  cl_command_queue profiling_queue(int device);

  // A new allocation of at least one byte; its address is aligned to `alignment`.
  void* Alloc(int device, size_t nbytes, size_t alignment);
  void Free(void* address);
  Region Resolve(const void* address) const;
  // The buffer to pass a kernel for `address`: its allocation's cl_mem, or a
  // sub-buffer starting at it (kept until the allocation is freed).
  cl_mem KernelArgument(const void* address);

  // Copies are enqueued on the device's queue and ordered with its kernels.
  // The host source of a write is staged, so the caller may reuse it at
  // once; a read's destination must stay untouched until Sync.
  void Write(void* device_dst, const void* host_src, size_t nbytes);
  void Read(void* host_dst, const void* device_src, size_t nbytes);
  void CopyWithin(void* device_dst, const void* device_src, size_t nbytes);
  // A read, and a zero fill, that complete before they return and are not
  // counted: of the few words of an index-check record, on an idle queue.
  void ReadNow(void* host_dst, const void* device_src, size_t nbytes);
  void ZeroNow(void* device_dst, size_t nbytes);
  // The host waits for everything queued on the device.
  void Sync(int device);
  // Submits what is queued on the device (clFlush), without waiting.
  void Flush(int device);

  void CountLaunch(int device);
  DeviceCounts counts(int device) const;
  void ResetCounts(int device);

  // Fails with Error(kRuntime) naming `what` when `code` is not CL_SUCCESS.
  static void Check(cl_int code, const std::string& what);

 private:
  Runtime();
  struct Device;
  struct Allocation {
    cl_mem mem = nullptr;
    size_t size = 0;
    int device = 0;
    std::map<size_t, cl_mem> sub_buffers;  // by offset
  };
  Device& state(int device) const;
  // The allocation holding `address` (mutex_ held) or nullptr.
  const Allocation* Find(uintptr_t address, uintptr_t* base) const;
  // Releases the staging buffers of the writes that have completed (kept
  // for reuse up to a limit). uploads_mutex held.
  void ReapUploads(Device& d);
  // A host buffer of at least `nbytes` to stage a write from.
  StagingBuffer TakeStaging(Device& d, size_t nbytes);

  const ClApi* api_ = nullptr;
  std::string unavailable_reason_;
  std::vector<std::unique_ptr<Device>> devices_;
  mutable std::mutex mutex_;  // allocations_ and next_address_
  std::map<uintptr_t, Allocation> allocations_;
  uintptr_t next_address_;
};

// The device TVM's generated host code last selected on this thread
// (DeviceAPI::SetDevice); kernels without buffer arguments launch there.
void SetCurrentDevice(int device);
int CurrentDevice();

}  // namespace shapefn::opencl
