// The loader of the OpenCL modules TVM's codegen emits (`target.build.opencl`:
// OpenCL C source plus a table of kernels), registered as
// `ffi.Module.load_from_bytes.opencl`, and the launch of their kernels.
//
// TVM's generated host code calls a kernel `<func>_kernel` with its buffer
// arguments (device addresses), its scalar arguments, then one value per
// launch parameter tag of the kernel (`blockIdx.x` ... the grid, `threadIdx.x`
// ... the work-group). The OpenCL program is built for a device the first time
// one of its kernels runs there.
#include <tvm/ffi/cast.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device_module_blob.h"
#include "event_recorder.h"
#include "opencl_runtime.h"
#include "shapefn/error.h"
#include "shapefn/opencl.h"

namespace shapefn::opencl {
namespace {

// One kernel of the table: its arguments' types and how the values after
// them map onto the launch.
struct KernelSpec {
  std::string name;
  std::vector<DLDataType> arg_types;
  // Per launch value: 0-2 grid x/y/z, 3-5 work-group x/y/z, 6 bytes of dynamic local memory.
  std::vector<int> launch_slots;
};

constexpr int kDynamicLocalMemory = 6;

int LaunchSlot(const std::string& tag, const std::string& kernel) {
  static const std::pair<const char*, int> kTags[] = {{"blockIdx.x", 0},
                                                      {"blockIdx.y", 1},
                                                      {"blockIdx.z", 2},
                                                      {"threadIdx.x", 3},
                                                      {"threadIdx.y", 4},
                                                      {"threadIdx.z", 5},
                                                      {"tirx.use_dyn_shared_memory", kDynamicLocalMemory},
                                                      {"tir.use_dyn_shared_memory", kDynamicLocalMemory}};
  for (const auto& [name, slot] : kTags) {
    if (tag == name) return slot;
  }
  Fail(ErrorKind::kFormat,
       "kernel '" + kernel + "' has launch parameter '" + tag + "', which shapefn's OpenCL runtime does not support");
}

// What is built for one device: the program and its kernels, each with the
// lock that keeps one thread's arguments from mixing with another's
// (clSetKernelArg on a shared kernel object is not thread-safe).
struct DeviceProgram {
  std::mutex mutex;
  cl_program program = nullptr;
  std::string build_error;  // set when the build failed: reported on every launch
  struct Kernel {
    cl_kernel kernel = nullptr;
    std::mutex launch;
  };
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
};

class OpenCLModule final : public tvm::ffi::ModuleObj {
 public:
  OpenCLModule(std::string blob, std::string source, std::map<std::string, KernelSpec> kernels)
      : blob_(std::move(blob)), source_(std::move(source)), kernels_(std::move(kernels)) {}

  const char* kind() const final { return "opencl"; }
  int GetPropertyMask() const final { return tvm::ffi::Module::kBinarySerializable | tvm::ffi::Module::kRunnable; }
  tvm::ffi::Bytes SaveToBytes() const final { return tvm::ffi::Bytes(blob_); }
  tvm::ffi::String InspectSource(const tvm::ffi::String& format) const final { return source_; }

  tvm::ffi::Optional<tvm::ffi::Function> GetFunction(const tvm::ffi::String& name) final {
    auto it = kernels_.find(std::string(name));
    if (it == kernels_.end()) return std::nullopt;
    const KernelSpec* spec = &it->second;
    tvm::ffi::ObjectPtr<OpenCLModule> self = tvm::ffi::GetObjectPtr<OpenCLModule>(this);
    return tvm::ffi::Function::FromPacked([self, spec](tvm::ffi::PackedArgs args, tvm::ffi::Any* rv) {
      try {
        self->Launch(*spec, args);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kValue) TVM_FFI_THROW(ValueError) << e.what();
        TVM_FFI_THROW(RuntimeError) << e.what();
      }
    });
  }

 private:
  DeviceProgram::Kernel& KernelFor(int device, const std::string& name) {
    Runtime& rt = Runtime::Global();
    DeviceProgram& p = Program(device);
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.program == nullptr && p.build_error.empty()) Build(rt, device, p);
    if (!p.build_error.empty()) Fail(ErrorKind::kRuntime, p.build_error);
    auto& slot = p.kernels[name];
    if (!slot) {
      auto k = std::make_unique<DeviceProgram::Kernel>();
      cl_int code = CL_SUCCESS;
      k->kernel = rt.api().clCreateKernel(p.program, name.c_str(), &code);
      Runtime::Check(code, "creating OpenCL kernel '" + name + "'");
      slot = std::move(k);
    }
    return *slot;
  }

  DeviceProgram& Program(int device) {
    std::lock_guard<std::mutex> lock(programs_mutex_);
    auto& p = programs_[device];
    if (!p) p = std::make_unique<DeviceProgram>();
    return *p;
  }

  void Build(Runtime& rt, int device, DeviceProgram& p) {
    const ClApi& cl = rt.api();
    const char* text = source_.c_str();
    size_t length = source_.size();
    cl_int code = CL_SUCCESS;
    cl_program program = cl.clCreateProgramWithSource(rt.context(device), 1, &text, &length, &code);
    Runtime::Check(code, "creating an OpenCL program");
    cl_device_id id = rt.device_id(device);
    code = cl.clBuildProgram(program, 1, &id, "", nullptr, nullptr);
    if (code != CL_SUCCESS) {
      size_t size = 0;
      cl.clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
      std::string log(size, '\0');
      if (size > 0) cl.clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
      cl.clReleaseProgram(program);
      constexpr size_t kLogShown = 4000;
      if (log.size() > kLogShown) log = log.substr(0, kLogShown) + "\n... (log truncated)";
      std::string names;
      for (const auto& [name, spec] : kernels_) names += (names.empty() ? "" : ", ") + name;
      p.build_error = "building the OpenCL program of kernels " + names + " for " + OpenCLDeviceName(device) + " (" +
                      rt.info(device).name + ") failed: " + ClErrorString(code) + "\n" + log;
      return;
    }
    p.program = program;
  }

  void Launch(const KernelSpec& spec, const tvm::ffi::PackedArgs& args) {
    const int n_args = static_cast<int>(spec.arg_types.size());
    const int n_launch = static_cast<int>(spec.launch_slots.size());
    if (args.size() != n_args + n_launch) {
      Fail(ErrorKind::kValue, "kernel '" + spec.name + "' takes " + std::to_string(n_args) + " arguments and " +
                                  std::to_string(n_launch) + " launch values, got " + std::to_string(args.size()));
    }
    std::array<int64_t, 7> launch = {1, 1, 1, 1, 1, 1, 0};
    int work_dim = 1;
    for (int i = 0; i < n_launch; ++i) {
      const int slot = spec.launch_slots[static_cast<size_t>(i)];
      const int64_t value = args[n_args + i].cast<int64_t>();
      if (value < 0)
        Fail(ErrorKind::kValue, "kernel '" + spec.name + "': negative launch extent " + std::to_string(value));
      launch[static_cast<size_t>(slot)] = value;
      if (slot < kDynamicLocalMemory) work_dim = std::max(work_dim, slot % 3 + 1);
    }
    size_t global[3], local[3];
    for (int d = 0; d < 3; ++d) {
      local[d] = static_cast<size_t>(launch[static_cast<size_t>(3 + d)]);
      global[d] = static_cast<size_t>(launch[static_cast<size_t>(d)]) * local[d];
      if (global[d] == 0) return;  // no work items: an empty tensor
    }

    Runtime& rt = Runtime::Global();
    int device = -1;
    for (int i = 0; i < n_args && device < 0; ++i) {
      if (spec.arg_types[static_cast<size_t>(i)].code == kDLOpaqueHandle) {
        void* address = args[i].cast<void*>();
        if (address != nullptr) device = rt.Resolve(address).device;
      }
    }
    if (device < 0) device = CurrentDevice();
    DeviceProgram::Kernel& k = KernelFor(device, spec.name);
    const ClApi& cl = rt.api();
    {
      std::lock_guard<std::mutex> lock(k.launch);
      for (int i = 0; i < n_args; ++i) SetArgument(cl, rt, k.kernel, spec, i, args[i]);
      if (launch[kDynamicLocalMemory] > 0) {
        Runtime::Check(cl.clSetKernelArg(k.kernel, static_cast<cl_uint>(n_args),
                                         static_cast<size_t>(launch[kDynamicLocalMemory]), nullptr),
                       "kernel '" + spec.name + "': dynamic local memory");
      }
      cl_int code = EnqueueRecorded(cl, device, [&](cl_event* done) {
        return cl.clEnqueueNDRangeKernel(rt.queue(device), k.kernel, static_cast<cl_uint>(work_dim), nullptr, global,
                                         local, 0, nullptr, done);
      });
      if (code != CL_SUCCESS) {
        Fail(ErrorKind::kRuntime,
             "launching OpenCL kernel '" + spec.name + "' on " + OpenCLDeviceName(device) + " with " +
                 std::to_string(global[0] / local[0]) + "x" + std::to_string(global[1] / local[1]) + "x" +
                 std::to_string(global[2] / local[2]) + " work-groups of " + std::to_string(local[0]) + "x" +
                 std::to_string(local[1]) + "x" + std::to_string(local[2]) + " failed: " + ClErrorString(code));
      }
    }
    rt.CountLaunch(device);
  }

  static void SetArgument(const ClApi& cl, Runtime& rt, cl_kernel kernel, const KernelSpec& spec, int i,
                          const tvm::ffi::AnyView& value) {
    const DLDataType t = spec.arg_types[static_cast<size_t>(i)];
    union {
      int8_t i8;
      int16_t i16;
      int32_t i32;
      int64_t i64;
      float f32;
      double f64;
      cl_mem mem;
    } bits;
    size_t size = t.bits / 8;
    if (t.code == kDLOpaqueHandle) {
      void* address = value.cast<void*>();
      bits.mem = address == nullptr ? nullptr : rt.KernelArgument(address);
      size = sizeof(cl_mem);
    } else if (t.code == kDLInt || t.code == kDLUInt || t.code == kDLBool) {
      const int64_t v = value.cast<int64_t>();
      switch (t.bits) {
        case 8:
          bits.i8 = static_cast<int8_t>(v);
          size = 1;
          break;
        case 16: bits.i16 = static_cast<int16_t>(v); break;
        case 32: bits.i32 = static_cast<int32_t>(v); break;
        case 64: bits.i64 = v; break;
        case 1:
          bits.i8 = static_cast<int8_t>(v != 0);
          size = 1;
          break;
        default:
          Fail(ErrorKind::kType,
               "kernel '" + spec.name + "' argument " + std::to_string(i) + ": unsupported integer width");
      }
    } else if (t.code == kDLFloat && (t.bits == 32 || t.bits == 64)) {
      const double v = value.cast<double>();
      if (t.bits == 32) {
        bits.f32 = static_cast<float>(v);
      } else {
        bits.f64 = v;
      }
    } else {
      Fail(ErrorKind::kType, "kernel '" + spec.name + "' argument " + std::to_string(i) +
                                 " has a type shapefn's OpenCL runtime cannot pass (code " + std::to_string(t.code) +
                                 ", " + std::to_string(t.bits) + " bits)");
    }
    Runtime::Check(cl.clSetKernelArg(kernel, static_cast<cl_uint>(i), size, &bits),
                   "kernel '" + spec.name + "' argument " + std::to_string(i));
  }

  std::string blob_;
  std::string source_;
  std::map<std::string, KernelSpec> kernels_;
  std::mutex programs_mutex_;
  std::map<int, std::unique_ptr<DeviceProgram>> programs_;
};

tvm::ffi::Module LoadOpenCLModule(const tvm::ffi::Bytes& bytes) {
  DeviceModuleBlob blob = ParseDeviceModule(bytes.data(), bytes.size());
  if (blob.format != "cl") {
    Fail(ErrorKind::kFormat, "an OpenCL module in format '" + blob.format +
                                 "': shapefn's OpenCL runtime loads OpenCL C source modules ('cl') only");
  }
  std::map<std::string, KernelSpec> kernels;
  for (DeviceKernelInfo& k : blob.kernels) {
    KernelSpec spec;
    spec.name = k.name;
    for (const DLDataType& t : k.arg_types) {
      if (t.lanes != 1) Fail(ErrorKind::kFormat, "kernel '" + k.name + "' takes a vector argument");
    }
    spec.arg_types = std::move(k.arg_types);
    for (const std::string& tag : k.launch_tags) spec.launch_slots.push_back(LaunchSlot(tag, spec.name));
    for (int32_t tag : k.arg_extra_tags) {
      if (tag != 0)
        Fail(ErrorKind::kFormat,
             "kernel '" + k.name + "' has an argument tag shapefn's OpenCL runtime does not support");
    }
    kernels.emplace(std::move(k.key), std::move(spec));
  }
  auto module = tvm::ffi::make_object<OpenCLModule>(std::string(bytes.data(), bytes.size()), std::move(blob.code),
                                                    std::move(kernels));
  return tvm::ffi::Module(module);
}

tvm::ffi::Module LoadOrFail(const tvm::ffi::Bytes& bytes) {
  try {
    return LoadOpenCLModule(bytes);
  } catch (const Error& e) {
    TVM_FFI_THROW(ValueError) << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

}  // namespace

// Replaces any loader registered before: kernels must launch through this
// runtime, which owns the device addresses their arguments carry.
//
// TVM's wheel has no OpenCL runtime: the module its code generator returns
// (`target.build.opencl`) cannot launch a kernel, and `tvm.compile`'s result
// runs only after a save and a load. `shapefn.opencl.runnable_module` is
// that load without the save: the module as this runtime runs it, from the
// bytes a save would write (`shapefn.compiler.relax_vm.runnable`). The code generator
// itself is left as TVM registered it.
void RegisterOpenCLModuleLoader() {
  tvm::ffi::Function::SetGlobal("ffi.Module.load_from_bytes.opencl",
                                tvm::ffi::Function::FromTyped([](tvm::ffi::Bytes bytes) { return LoadOrFail(bytes); }),
                                /*can_override=*/true);
  tvm::ffi::Function::SetGlobal(
      "shapefn.opencl.runnable_module", tvm::ffi::Function::FromTyped([](tvm::ffi::Module built) {
        if (std::string(built->kind()) != "opencl") {
          TVM_FFI_THROW(ValueError) << "expected an OpenCL device module, got one of kind '" << built->kind() << "'";
        }
        if (dynamic_cast<const OpenCLModule*>(built.get()) != nullptr) return built;
        return LoadOrFail(built->SaveToBytes());
      }));
}

}  // namespace shapefn::opencl
