// The one error type of the C++ core. The binding layers (pybind11 and Cython)
// convert it to a Python exception chosen by `kind`; nothing else crosses.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace shapefn {

enum class ErrorKind {
  kValue,       // ValueError: a value is out of range or inconsistent
  kType,        // TypeError: wrong type or dtype
  kKey,         // KeyError: unknown name
  kIndex,       // IndexError
  kFormat,      // shapefn.ExecutableFormatError: malformed executable
  kDependence,  // shapefn.DataDependenceError: mask contradicts the function
  kRuntime,     // RuntimeError: a kernel or device failed
  kInterrupted, // KeyboardInterrupt: a signal arrived while the VM ran
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message)
      : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void Fail(ErrorKind kind, std::string message) {
  throw Error(kind, std::move(message));
}

}  // namespace shapefn
