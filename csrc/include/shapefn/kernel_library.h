// The kernel library of an executable: the TVM module saved beside it,
// whose functions are the executable's kernels. Loaded here for both the C++
// API (LoadProgram, shapefn.h) and Python (shapefn.Executable.load).
#pragma once

#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <map>
#include <string>
#include <vector>

namespace shapefn {

struct KernelLibrary {
  std::string path;         // the library file, absolute
  tvm::ffi::Module module;  // holds the library's code in memory
  // Kernel name -> compiled function, for the names asked for that the
  // library defines (the VM looks the others up among tvm-ffi global functions).
  std::map<std::string, tvm::ffi::Function> kernels;
};

// Loads `library_name`, a file in the directory of the executable at
// `executable_path`, and looks up `kernel_names` in it. Throws
// Error(kNotFound) when the file is missing, Error(kRuntime) when TVM's
// runtime (which compiled kernels call) is not loaded in this process or the
// library does not load.
KernelLibrary LoadKernelLibrary(const std::string& executable_path, const std::string& library_name,
                                const std::vector<std::string>& kernel_names);

}  // namespace shapefn
