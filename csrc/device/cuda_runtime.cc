// TVM's CUDA runtime, loaded on demand. It lives in libtvm_runtime_cuda.so
// beside libtvm_runtime.so (the apache-tvm wheel ships both, a shapefn
// bundle carries both) and registers `device_api.cuda` and the CUDA module
// loader when loaded. Python's `import tvm` loads it where it can; a native
// program has nobody to do that, so MakeDevice("cuda...") does. Each missing
// piece fails with what to install, checked in the order the loader needs
// them: the driver, the CUDA runtime, TVM's CUDA runtime.
#include <dlfcn.h>
#include <tvm/ffi/function.h>
#include <tvm/runtime/c_backend_api.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "shapefn/device.h"
#include "shapefn/error.h"

namespace shapefn {
namespace {

constexpr const char* kDriver = "libcuda.so.1";
constexpr const char* kCudaRuntime = "libcudart.so.13";
constexpr const char* kTvmCudaRuntime = "libtvm_runtime_cuda.so";

std::string LastDlError() {
  const char* message = dlerror();
  return message != nullptr ? message : "unknown error";
}

// The folder libtvm_runtime.so was loaded from (this library links it).
std::filesystem::path TvmRuntimeDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&TVMBackendAllocWorkspace), &info) == 0 || info.dli_fname == nullptr) {
    Fail(ErrorKind::kRuntime, "cannot locate libtvm_runtime.so in this process: " + LastDlError());
  }
  return std::filesystem::path(info.dli_fname).parent_path();
}

// Loaded libraries stay loaded for the process's lifetime: TVM's CUDA
// runtime registers global functions that must outlive every caller.
void* Open(const std::string& path, int mode) { return dlopen(path.c_str(), RTLD_NOW | mode); }

}  // namespace

void LoadCudaRuntime() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (tvm::ffi::Function::GetGlobal("device_api.cuda").has_value()) return;

  if (Open(kDriver, RTLD_GLOBAL) == nullptr) {
    Fail(ErrorKind::kRuntime, std::string("device 'cuda': no NVIDIA driver (") + kDriver +
                                  " cannot be loaded: " + LastDlError() +
                                  "). Install the NVIDIA driver on this machine; shapefn never ships it");
  }
  const std::filesystem::path dir = TvmRuntimeDir();
  // A copy beside TVM's runtime (a bundle's) comes first, then the system's.
  if (Open((dir / kCudaRuntime).string(), RTLD_GLOBAL) == nullptr && Open(kCudaRuntime, RTLD_GLOBAL) == nullptr) {
    Fail(ErrorKind::kRuntime, std::string("device 'cuda': no CUDA 13 runtime (") + kCudaRuntime + " is neither in " +
                                  dir.string() + " nor on the library path: " + LastDlError() +
                                  "). Install the CUDA 13 toolkit or PyPI's nvidia-cuda-runtime, or run a "
                                  "bundle made by 'shapefn bundle', which carries it");
  }
  const std::filesystem::path tvm_cuda = dir / kTvmCudaRuntime;
  if (Open(tvm_cuda.string(), RTLD_LOCAL) == nullptr) {
    Fail(ErrorKind::kRuntime, "device 'cuda': TVM's CUDA runtime cannot be loaded from " + tvm_cuda.string() + ": " +
                                  LastDlError() + ". It ships in the apache-tvm wheel beside libtvm_runtime.so");
  }
  if (!tvm::ffi::Function::GetGlobal("device_api.cuda").has_value()) {
    Fail(ErrorKind::kRuntime, "device 'cuda': " + tvm_cuda.string() + " loaded but registered no CUDA device API");
  }
}

}  // namespace shapefn
