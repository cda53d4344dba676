// Opens the OpenCL ICD loader at run time and resolves the entry points.
#include "cl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace shapefn::opencl {
namespace {

constexpr const char* kInstallHint =
    "install an OpenCL driver and the ICD loader (Debian/Ubuntu: apt-get install ocl-icd-libopencl1 "
    "pocl-opencl-icd for a CPU device, or your GPU vendor's OpenCL driver)";

struct Loaded {
  ClApi api;
  bool ok = false;
  std::string why_not;
};

Loaded Load() {
  Loaded result;
  const char* chosen = std::getenv("SHAPEFN_OPENCL_LIBRARY");
  const char* candidates[] = {chosen, "libOpenCL.so.1", "libOpenCL.so"};
  void* handle = nullptr;
  std::string tried;
  for (const char* name : candidates) {
    if (name == nullptr || *name == '\0') continue;
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    tried += std::string(tried.empty() ? "" : "; ") + dlerror();
    if (name == chosen) break;  // an explicit choice is not second-guessed
  }
  if (handle == nullptr) {
    result.why_not = "the OpenCL ICD loader (libOpenCL) could not be opened (" + tried + "): " + kInstallHint;
    return result;
  }
#define SHAPEFN_CL_RESOLVE(name, ret, params)                                                     \
  result.api.name = reinterpret_cast<ret(*) params>(dlsym(handle, #name));                        \
  if (result.api.name == nullptr) {                                                               \
    result.why_not = "the OpenCL ICD loader has no " #name " (an OpenCL 1.2 loader is required)"; \
    return result;                                                                                \
  }
  SHAPEFN_CL_FUNCTIONS(SHAPEFN_CL_RESOLVE)
#undef SHAPEFN_CL_RESOLVE
  result.ok = true;
  return result;
}

}  // namespace

const ClApi* LoadClApi(std::string* why_not) {
  // Never unloaded: drivers keep threads and state until exit.
  static const Loaded loaded = Load();
  if (!loaded.ok) {
    if (why_not != nullptr) *why_not = loaded.why_not;
    return nullptr;
  }
  return &loaded.api;
}

std::string ClErrorString(cl_int code) {
  static const std::pair<cl_int, const char*> kNames[] = {
      {0, "CL_SUCCESS"},
      {-1, "CL_DEVICE_NOT_FOUND"},
      {-2, "CL_DEVICE_NOT_AVAILABLE"},
      {-3, "CL_COMPILER_NOT_AVAILABLE"},
      {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {-5, "CL_OUT_OF_RESOURCES"},
      {-6, "CL_OUT_OF_HOST_MEMORY"},
      {-7, "CL_PROFILING_INFO_NOT_AVAILABLE"},
      {-8, "CL_MEM_COPY_OVERLAP"},
      {-11, "CL_BUILD_PROGRAM_FAILURE"},
      {-12, "CL_MAP_FAILURE"},
      {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
      {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
      {-30, "CL_INVALID_VALUE"},
      {-31, "CL_INVALID_DEVICE_TYPE"},
      {-32, "CL_INVALID_PLATFORM"},
      {-33, "CL_INVALID_DEVICE"},
      {-34, "CL_INVALID_CONTEXT"},
      {-35, "CL_INVALID_QUEUE_PROPERTIES"},
      {-36, "CL_INVALID_COMMAND_QUEUE"},
      {-37, "CL_INVALID_HOST_PTR"},
      {-38, "CL_INVALID_MEM_OBJECT"},
      {-42, "CL_INVALID_BINARY"},
      {-43, "CL_INVALID_BUILD_OPTIONS"},
      {-44, "CL_INVALID_PROGRAM"},
      {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
      {-46, "CL_INVALID_KERNEL_NAME"},
      {-47, "CL_INVALID_KERNEL_DEFINITION"},
      {-48, "CL_INVALID_KERNEL"},
      {-49, "CL_INVALID_ARG_INDEX"},
      {-50, "CL_INVALID_ARG_VALUE"},
      {-51, "CL_INVALID_ARG_SIZE"},
      {-52, "CL_INVALID_KERNEL_ARGS"},
      {-53, "CL_INVALID_WORK_DIMENSION"},
      {-54, "CL_INVALID_WORK_GROUP_SIZE"},
      {-55, "CL_INVALID_WORK_ITEM_SIZE"},
      {-56, "CL_INVALID_GLOBAL_OFFSET"},
      {-57, "CL_INVALID_EVENT_WAIT_LIST"},
      {-58, "CL_INVALID_EVENT"},
      {-59, "CL_INVALID_OPERATION"},
      {-61, "CL_INVALID_BUFFER_SIZE"},
      {-63, "CL_INVALID_GLOBAL_WORK_SIZE"},
      {-64, "CL_INVALID_PROPERTY"},
      {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
  };
  for (const auto& [value, name] : kNames) {
    if (value == code) return std::string(name) + " (" + std::to_string(code) + ")";
  }
  return "OpenCL error " + std::to_string(code);
}

}  // namespace shapefn::opencl
