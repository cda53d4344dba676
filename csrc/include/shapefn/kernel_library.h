// The kernel library of an executable: the TVM module saved beside it,
// whose functions are the executable's kernels. Loaded here for both the C++
// API (LoadProgram, shapefn.h) and Python (shapefn.Executable.load).
#pragma once

#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <map>
#include <string>
#include <vector>

#include "shapefn/executable.h"

namespace shapefn {

struct KernelLibrary {
  std::string path;         // the library file, absolute
  tvm::ffi::Module module;  // holds the library's code in memory
  // Kernel name -> compiled function, for the names asked for that the
  // library defines (the VM looks the others up among tvm-ffi global functions).
  std::map<std::string, tvm::ffi::Function> kernels;
};

// Loads `exe`'s kernel library, the file it names in the directory of the
// executable at `executable_path`, and looks up its kernels there. The file
// is read whole and its size and digest compared with the ones `exe`
// recorded when it was saved before anything maps it: a truncated library,
// or another executable's, is refused. Throws Error(kNotFound) when the file
// is missing, Error(kValue) when it is not the library `exe` was saved with,
// Error(kRuntime) when TVM's runtime (which compiled kernels call) is not
// loaded in this process or the library does not load.
KernelLibrary LoadKernelLibrary(const std::string& executable_path, const Executable& exe);

}  // namespace shapefn
