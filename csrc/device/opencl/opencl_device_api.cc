// TVM's DeviceAPI for OpenCL over shapefn's runtime, registered as
// `device_api.opencl` with the module loader when libshapefn_core loads: TVM
// tensors on `tvm.opencl(i)`, the workspaces compiled kernels ask for, and
// TVM's own VM then run on the same devices, memory and queues as
// shapefn's VM.
#include <tvm/ffi/function.h>
#include <tvm/runtime/device_api.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "opencl_runtime.h"
#include "shapefn/error.h"

namespace shapefn::opencl {

void RegisterOpenCLModuleLoader();

namespace {

// Fails as TVM's callers expect (a tvm-ffi error), keeping the message.
template <typename F>
auto Translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kValue) TVM_FFI_THROW(ValueError) << e.what();
    TVM_FFI_THROW(RuntimeError) << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

class OpenCLDeviceAPI final : public tvm::runtime::DeviceAPI {
 public:
  static OpenCLDeviceAPI* Global() {
    static OpenCLDeviceAPI* api = new OpenCLDeviceAPI();  // never destroyed, as the runtime
    return api;
  }

  void SetDevice(DLDevice dev) final { SetCurrentDevice(dev.device_id); }

  void GetAttr(DLDevice dev, tvm::runtime::DeviceAttrKind kind, tvm::ffi::Any* rv) final {
    Runtime& rt = Runtime::Global();
    if (kind == tvm::runtime::kExist) {
      *rv = static_cast<int64_t>(dev.device_id >= 0 && dev.device_id < rt.num_devices());
      return;
    }
    if (dev.device_id < 0 || dev.device_id >= rt.num_devices()) return;
    const DeviceInfo& info = rt.info(dev.device_id);
    switch (kind) {
      case tvm::runtime::kMaxThreadsPerBlock: *rv = info.max_work_group_size; break;
      case tvm::runtime::kWarpSize: *rv = static_cast<int64_t>(1); break;
      case tvm::runtime::kMaxSharedMemoryPerBlock: *rv = info.local_mem_bytes; break;
      case tvm::runtime::kComputeVersion: *rv = tvm::ffi::String(info.version); break;
      case tvm::runtime::kDeviceName: *rv = tvm::ffi::String(info.name); break;
      case tvm::runtime::kMaxClockRate: *rv = info.max_clock_mhz; break;
      case tvm::runtime::kMultiProcessorCount: *rv = info.compute_units; break;
      case tvm::runtime::kMaxThreadDimensions:
        *rv = tvm::ffi::String("[" + std::to_string(info.max_work_item_sizes[0]) + ", " +
                               std::to_string(info.max_work_item_sizes[1]) + ", " +
                               std::to_string(info.max_work_item_sizes[2]) + "]");
        break;
      case tvm::runtime::kDriverVersion: *rv = tvm::ffi::String(info.driver_version); break;
      case tvm::runtime::kTotalGlobalMemory: *rv = info.global_mem_bytes; break;
      default: break;  // unknown to OpenCL: left unset, as TVM's callers expect
    }
  }

  void* AllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) final {
    return Translated([&] { return Runtime::Global().Alloc(dev.device_id, nbytes, alignment); });
  }

  void* AllocDataSpace(DLDevice dev, int ndim, const int64_t* shape, DLDataType dtype,
                       tvm::ffi::Optional<tvm::ffi::String> mem_scope) final {
    if (mem_scope.has_value() && *mem_scope != "global") {
      TVM_FFI_THROW(ValueError) << "shapefn's OpenCL runtime allocates buffers ('global' memory scope) only, not '"
                                << *mem_scope << "'";
    }
    size_t nbytes = (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
    for (int i = 0; i < ndim; ++i) nbytes *= static_cast<size_t>(shape[i]);
    return AllocDataSpace(dev, nbytes, tvm::runtime::kAllocAlignment, dtype);
  }

  void FreeDataSpace(DLDevice dev, void* ptr) final { Runtime::Global().Free(ptr); }

  void StreamSync(DLDevice dev, TVMStreamHandle stream) final {
    Translated([&] { Runtime::Global().Sync(dev.device_id); });
  }

  // Device addresses are plain numbers in their own range: offsets can be added on the host.
  bool SupportsDevicePointerArithmeticsOnHost() final { return true; }

  // Kernels' temporary buffers, kept by size for the next call that needs
  // one: compiled kernels ask for them on every call.
  void* AllocWorkspace(DLDevice dev, size_t nbytes, DLDataType type_hint) final {
    const size_t size = SizeClass(nbytes);
    {
      std::lock_guard<std::mutex> lock(workspace_mutex_);
      auto& free = workspaces_[{dev.device_id, size}];
      if (!free.empty()) {
        void* ptr = free.back();
        free.pop_back();
        workspace_sizes_[ptr] = size;
        return ptr;
      }
    }
    void* ptr = AllocDataSpace(dev, size, tvm::runtime::kTempAllocaAlignment, type_hint);
    std::lock_guard<std::mutex> lock(workspace_mutex_);
    workspace_sizes_[ptr] = size;
    return ptr;
  }

  void FreeWorkspace(DLDevice dev, void* ptr) final {
    std::lock_guard<std::mutex> lock(workspace_mutex_);
    auto it = workspace_sizes_.find(ptr);
    if (it == workspace_sizes_.end()) return;
    // Reused by later kernels on the same in-order queue, so no wait is needed.
    workspaces_[{dev.device_id, it->second}].push_back(ptr);
    workspace_sizes_.erase(it);
  }

 protected:
  void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t num_bytes,
                      DLDevice dev_from, DLDevice dev_to, DLDataType type_hint, TVMStreamHandle stream) final {
    Translated([&] {
      Runtime& rt = Runtime::Global();
      const char* src = static_cast<const char*>(from) + from_offset;
      char* dst = static_cast<char*>(to) + to_offset;
      const bool from_cl = dev_from.device_type == kDLOpenCL;
      const bool to_cl = dev_to.device_type == kDLOpenCL;
      if (from_cl && to_cl) {
        rt.CopyWithin(dst, src, num_bytes);
      } else if (from_cl && dev_to.device_type == kDLCPU) {
        rt.Read(dst, src, num_bytes);  // TVM waits (StreamSync) before it reads the result
      } else if (to_cl && dev_from.device_type == kDLCPU) {
        rt.Write(dst, src, num_bytes);
      } else {
        Fail(ErrorKind::kValue, "shapefn's OpenCL runtime copies between OpenCL devices and the CPU only");
      }
    });
  }

 private:
  static size_t SizeClass(size_t nbytes) {
    size_t size = 256;
    while (size < nbytes) size *= 2;
    return size;
  }

  std::mutex workspace_mutex_;
  std::map<std::pair<int, size_t>, std::vector<void*>> workspaces_;
  std::map<void*, size_t> workspace_sizes_;
};

}  // namespace

// Runs when libshapefn_core loads: before any OpenCL library is loaded
// through TVM or a VM is made. Replaces any OpenCL runtime registered
// before (TVM's wheel has none): shapefn's devices and kernels must agree
// on what a device address is.
TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::Function::SetGlobal("device_api.opencl", tvm::ffi::Function::FromTyped([]() {
                                  return static_cast<void*>(OpenCLDeviceAPI::Global());
                                }),
                                /*can_override=*/true);
  RegisterOpenCLModuleLoader();
}

}  // namespace shapefn::opencl
