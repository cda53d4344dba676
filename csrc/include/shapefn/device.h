// Devices the VM places memory and kernels on: the host CPU, the simulated
// accelerator `sim`, and any TVM device (CUDA, ...) through TVM's DeviceAPI.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "shapefn/device_timing.h"

namespace shapefn {

// Byte counts of one device's copy engine since creation (or last reset).
struct CopyEngineStats {
  int64_t d2h_copies = 0, d2h_bytes = 0, h2d_copies = 0, h2d_bytes = 0, syncs = 0;
  double modelled_transfer_s = 0.0;
};

class Device {
 public:
  virtual ~Device() = default;
  // "host", "sim", "cuda:0", ...
  virtual std::string name() const = 0;
  virtual bool is_host() const { return false; }
  // How kernels see this device's memory: CPU for host and sim.
  virtual DLDevice kernel_device() const = 0;
  // A tensor placed inside a larger allocation must start at a multiple of
  // this many bytes for kernels to take it (OpenCL: CL_DEVICE_MEM_BASE_ADDR_ALIGN).
  virtual size_t tensor_offset_alignment() const { return 1; }

  virtual void* Alloc(size_t nbytes, size_t alignment) = 0;
  virtual void Free(void* ptr) = 0;
  // Copies enqueue on the device stream; the return value is the modelled
  // transfer time in seconds (0 for devices without a cost model).
  virtual double CopyToHost(void* host_dst, const void* src, size_t nbytes) = 0;
  virtual double CopyFromHost(void* dst, const void* host_src, size_t nbytes) = 0;
  // The host waits for all work queued on the device.
  virtual void Sync() = 0;
  // The words of an index-check record (the VM's check_record), read or
  // zeroed by the host after the device has synced, with no kernel using
  // them. Neither counts as a copy: the host and sim read and write their
  // memory in place (the default); OpenCL and TVM devices make a blocking
  // transfer of the few bytes on their idle queue.
  virtual void ReadCheckWords(int64_t* host_dst, const void* src, size_t nbytes);
  virtual void ClearCheckWords(void* dst, size_t nbytes);
  // Starts work queued on the device without waiting for it (OpenCL may
  // hold enqueued commands until then). The VM calls it when a call ends.
  virtual void Flush() {}
  // Times the device work of one profiled call on the device's own clock
  // (device_timing.h); nullptr for a device without a timer, whose queued
  // work the profiler then times as the host-side call that queued it.
  virtual std::unique_ptr<DeviceTiming> StartTiming() { return nullptr; }

  // Brackets host shape-function work; the sim device in strict mode makes
  // its memory unreadable in between so accidental host reads fault.
  virtual void BeginHostShapeWork() {}
  virtual void EndHostShapeWork() {}
  // False when both of those do nothing (the VM then skips them).
  virtual bool guards_host_shape_work() const { return false; }
  // Non-null for a device that one call at a time may use (sim in strict
  // mode: its memory is unreadable to every thread while one call's shape
  // functions run). VMs hold it for a whole call and the device's copies
  // take it, so calls and copies from other threads wait instead of faulting.
  virtual std::recursive_mutex* exclusive_use_mutex() { return nullptr; }

  CopyEngineStats stats() const;
  void ResetStats();

 protected:
  void Record(bool to_host, size_t nbytes, double seconds);
  void RecordSync();

 private:
  mutable std::mutex stats_mutex_;
  CopyEngineStats stats_;
};

std::shared_ptr<Device> HostDevice();

struct SimConfig {
  // PCIe 4.0 x16: ~25 GB/s achievable of 31.5 GB/s nominal, ~10 us per transfer.
  double latency_s = 10e-6;
  double bandwidth_bytes_per_s = 25e9;
  size_t arena_bytes = size_t{4} << 30;  // reserved address space, committed lazily
  bool strict = false;
  // Busy-wait the modelled transfer time so wall-clock figures include it.
  bool realtime = false;
};

std::shared_ptr<Device> MakeSimDevice(const SimConfig& config);

// A device name: "host", "sim", "opencl", "opencl:1", "cuda:0", ...: a kind
// and an index (0 when the name has none).
struct DeviceName {
  std::string kind;
  int index = 0;
};
// Splits a name at ':'. Throws Error(kValue) when what follows ':' is not a
// non-negative integer; the kind is not checked here.
DeviceName ParseDeviceName(const std::string& name);
// The device a name gives: "host"; "sim", one simulated accelerator with the
// default SimConfig shared by the whole process; "opencl[:i]" (opencl.h); any
// other name a TVM device (MakeTvmDevice). Throws Error(kValue) for names
// that give no device here.
std::shared_ptr<Device> MakeDevice(const std::string& name);
// A TVM device ("cuda", "cuda:1", "cpu", ...) reached through TVM's DeviceAPI.
// Throws Error(kValue) when TVM has no DeviceAPI for it or the device is absent.
std::shared_ptr<Device> MakeTvmDevice(const std::string& spec);
// Whether TVM reports the device as present (false when its runtime is missing;
// "cuda" loads TVM's CUDA runtime first, as MakeDevice does).
bool TvmDeviceExists(const std::string& spec);
// Loads TVM's CUDA runtime (libtvm_runtime_cuda.so, beside libtvm_runtime.so)
// unless `device_api.cuda` is registered already; MakeDevice calls it for
// "cuda" names. Throws Error(kRuntime) naming what is missing: the NVIDIA
// driver (libcuda.so.1), the CUDA 13 runtime (libcudart.so.13) or TVM's CUDA
// runtime.
void LoadCudaRuntime();

// For tests of strict mode: reads one byte at `ptr` from the host.
uint8_t ReadByteFromHost(const void* ptr);

}  // namespace shapefn
