// shapefn's embedding API: run a saved executable from a C++ program, no
// Python in the process. docs/embedding.md shows how to compile and link.
//
// A program links libshapefn_core.so, libtvm_ffi.so and TVM's
// libtvm_runtime.so. The last is needed although nothing calls it by name:
// loading it registers the workspace allocator and thread pool that compiled
// kernels reach through the kernel library's context symbols (link it with
// --no-as-needed so the linker keeps it).
//
//   #include <shapefn/shapefn.h>
//
//   shapefn::Program program = shapefn::LoadProgram("model.sfx");  // + model.sfx.kernels.so
//   shapefn::VirtualMachine vm(program.executable, shapefn::MakeDevice("sim"), {}, program.kernels);
//
// MakeDevice("cuda") loads TVM's CUDA runtime itself (device.h); a VM refuses
// a device other than the one its executable was compiled for (executable.h).
//
//   std::vector<float> x(4 * 1024, 1.0f);                // host memory the caller owns
//   int64_t x_shape[] = {4, 1024};
//   DLTensor arg{x.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, x_shape, nullptr, 0};
//   shapefn::Value out = vm.Invoke("main", {shapefn::Value::Tensor(shapefn::BorrowHostTensor(arg))});
//
//   std::vector<float> y(out.tensor->numel());           // out.kind == Value::Kind::kTensor
//   shapefn::CopyTensorToHost(*out.tensor, y.data());    // from the device it was computed on
//   shapefn::Counters c = vm.counters();                 // c.d2h_bytes, c.syncs, ...
//
// Every function here and in the headers it includes reports failure by
// throwing shapefn::Error (error.h), whose kind() says what went wrong.
// A VM runs one call at a time (calls on one VM from several threads are
// serialised); make one VM per thread for parallel calls.
#pragma once

#include <dlpack/dlpack.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shapefn/counters.h"
#include "shapefn/device.h"
#include "shapefn/error.h"
#include "shapefn/executable.h"
#include "shapefn/kernel_library.h"
#include "shapefn/opencl.h"
#include "shapefn/registry.h"
#include "shapefn/tensor.h"
#include "shapefn/value.h"
#include "shapefn/vm.h"

namespace shapefn {

// A loaded executable and the kernels of the library saved beside it.
struct Program {
  std::shared_ptr<const Executable> executable;
  // Kernel name -> compiled function, for the names the library defines.
  // Names it lacks are looked up among tvm-ffi global functions by the VM.
  std::map<std::string, tvm::ffi::Function> kernels;
  // Holds the library's code in memory as long as the Program lives.
  tvm::ffi::Optional<tvm::ffi::Module> kernel_library;
};

// The program of an executable already read from `path`: loads its kernel
// library (the file it names, beside it). A CUDA build loads TVM's CUDA
// runtime first (LoadCudaRuntime), whose module loader reads its device code.
// Throws Error(kNotFound) when the library is missing, Error(kValue) when it
// is not the one the executable was saved with and Error(kRuntime) when it
// cannot be loaded (kernel_library.h).
inline Program LoadProgram(std::shared_ptr<const Executable> exe, const std::string& path) {
  Program program;
  program.executable = exe;
  if (exe->kernel_library().empty()) return program;
  if (exe->device_code() == "cuda") LoadCudaRuntime();
  KernelLibrary library = LoadKernelLibrary(path, *exe);
  program.kernels = std::move(library.kernels);
  program.kernel_library = library.module;
  return program;
}

// Reads and verifies the executable at `path` and loads its kernel library.
// Throws Error(kFormat) for a malformed executable and Error(kValue) when
// the executable is missing or a directory, besides the errors of the
// overload above.
inline Program LoadProgram(const std::string& path) { return LoadProgram(Executable::Load(path), path); }

// The shape functions `exe` calls that it does not carry and this process
// has not registered. Without Python only the built-in (native C++) ones are
// registered; an executable compiled by shapefn.compile carries the ones
// written in Python (shapefn.register_shape_func), compiled for its program.
inline std::vector<std::string> MissingShapeFuncs(const Executable& exe) {
  std::vector<std::string> missing;
  for (size_t i = 0; i < exe.shape_funcs().size(); ++i) {
    const std::string& op = exe.shape_funcs()[i].op;
    if (exe.CarriedShapeFuncOf(i) == nullptr && !ShapeFuncRegistry::Global().Contains(op)) missing.push_back(op);
  }
  return missing;
}

// A VM argument over host memory the caller owns and keeps alive (and
// unchanged) until every Value that may refer to it is gone: on the host
// device a function may return its argument itself. The tensor must be
// C-contiguous (strides nullptr).
inline TensorRef BorrowHostTensor(const DLTensor& tensor) {
  if (tensor.strides != nullptr)
    Fail(ErrorKind::kValue, "BorrowHostTensor takes C-contiguous tensors (strides nullptr)");
  if (tensor.device.device_type != kDLCPU) Fail(ErrorKind::kValue, "BorrowHostTensor takes host (kDLCPU) memory");
  return WrapHostTensor(tensor, nullptr, nullptr);
}

}  // namespace shapefn
