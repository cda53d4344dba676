// Loading an executable's kernel library (shapefn/kernel_library.h).
#include "shapefn/kernel_library.h"

#include <filesystem>

#include "digest.h"
#include "shapefn/error.h"

namespace shapefn {
namespace {

// Whether TVM's runtime is loaded: it registers these context symbols, which
// a kernel library's code calls for workspace memory and parallel loops.
bool TvmRuntimeLoaded() {
  bool found = false;
  tvm::ffi::Module::VisitContextSymbols([&found](tvm::ffi::String name, void*) {
    if (name == "__TVMBackendAllocWorkspace") found = true;
  });
  return found;
}

}  // namespace

KernelLibrary LoadKernelLibrary(const std::string& executable_path, const Executable& exe) {
  const std::string& library_name = exe.kernel_library();
  namespace fs = std::filesystem;
  // Absolute: dlopen searches the library path for a name without a slash.
  const std::string path = fs::absolute(fs::path(executable_path).parent_path() / library_name).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    Fail(ErrorKind::kNotFound, "kernel library '" + path + "' of executable '" + executable_path + "' is missing");
  }
  const LibraryDigest found = FileDigest(path);
  const LibraryDigest& saved = exe.kernel_library_digest();
  if (!(found == saved)) {
    Fail(ErrorKind::kValue,
         "kernel library '" + path + "' is not the one executable '" + executable_path + "' was saved with (" +
             (found.size != saved.size ? "it has " + std::to_string(found.size) + " bytes, the executable's had " +
                                             std::to_string(saved.size)
                                       : std::string("same size, other contents")) +
             "): save the executable again, or put its own library beside it");
  }
  if (!TvmRuntimeLoaded()) {
    Fail(ErrorKind::kRuntime, "cannot load kernel library '" + path +
                                  "': TVM's runtime (libtvm_runtime.so) is not loaded in this process; "
                                  "link it with --no-as-needed (see docs/embedding.md)");
  }
  tvm::ffi::Optional<tvm::ffi::Module> module;
  try {
    module = tvm::ffi::Module::LoadFromFile(path);
  } catch (const tvm::ffi::Error& e) {
    FailFromCaught(ErrorKind::kRuntime, "cannot load kernel library '" + path + "': " + e.kind() + ": " + e.message());
  }
  KernelLibrary library{path, *module, {}};
  for (const std::string& name : exe.kernels()) {
    tvm::ffi::Optional<tvm::ffi::Function> fn = library.module->GetFunction(name);
    if (fn.has_value()) library.kernels.emplace(name, *fn);
  }
  return library;
}

}  // namespace shapefn
