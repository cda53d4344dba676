// The one error type of the C++ core. The binding layer converts it to the
// Python exception its kind names (csrc/python/errors.h, with the classes
// from shapefn.runtime.errors.EXCEPTION_OF_KIND); nothing else crosses.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace shapefn {

// X(enumerator, name): the name is the key of shapefn.runtime.errors.EXCEPTION_OF_KIND.
//   value        ValueError: a value is out of range or inconsistent
//   type         TypeError: wrong type or dtype
//   key          KeyError: unknown name
//   index        IndexError
//   not_found    FileNotFoundError: a file the executable names is missing
//   format       shapefn.ExecutableFormatError: malformed executable
//   dependence   shapefn.DataDependenceError: mask contradicts the function
//   memory       MemoryError: a device cannot allocate what was asked
//   runtime      RuntimeError: a kernel or device failed
//   interrupted  KeyboardInterrupt: a signal arrived while the VM ran
#define SHAPEFN_ERROR_KINDS(X) \
  X(kValue, "value")           \
  X(kType, "type")             \
  X(kKey, "key")               \
  X(kIndex, "index")           \
  X(kNotFound, "not_found")    \
  X(kFormat, "format")         \
  X(kDependence, "dependence") \
  X(kMemory, "memory")         \
  X(kRuntime, "runtime")       \
  X(kInterrupted, "interrupted")

enum class ErrorKind {
#define SHAPEFN_ERROR_KIND_ENUMERATOR(kind, name) kind,
  SHAPEFN_ERROR_KINDS(SHAPEFN_ERROR_KIND_ENUMERATOR)
#undef SHAPEFN_ERROR_KIND_ENUMERATOR
};

inline constexpr int kNumErrorKinds = 0
#define SHAPEFN_ERROR_KIND_COUNT(kind, name) +1
    SHAPEFN_ERROR_KINDS(SHAPEFN_ERROR_KIND_COUNT)
#undef SHAPEFN_ERROR_KIND_COUNT
    ;

// "value", "format", ...: the kind's name in SHAPEFN_ERROR_KINDS.
inline const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
#define SHAPEFN_ERROR_KIND_CASE(kind, name) \
  case ErrorKind::kind: return name;
    SHAPEFN_ERROR_KINDS(SHAPEFN_ERROR_KIND_CASE)
#undef SHAPEFN_ERROR_KIND_CASE
  }
  return "runtime";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::exception_ptr cause = nullptr)
      : std::runtime_error(std::move(message)), kind_(kind), cause_(std::move(cause)) {}
  ErrorKind kind() const { return kind_; }
  // The same error, its message starting with what raised it ("ONNX node
  // 'x' (Concat)"), for the VM to name the innermost source once.
  Error WithSource(const std::string& source) const {
    Error located(kind_, source + ": " + what(), cause_);
    located.has_source_ = true;
    return located;
  }
  bool has_source() const { return has_source_; }
  // The exception this error was raised while handling (a tvm::ffi::Error
  // from a kernel or a Python shape function), or null. The binding layer
  // raises it as the Python exception's __cause__, with its own kind and
  // traceback.
  const std::exception_ptr& cause() const { return cause_; }

 private:
  ErrorKind kind_;
  std::exception_ptr cause_;
  bool has_source_ = false;
};

[[noreturn]] inline void Fail(ErrorKind kind, std::string message) { throw Error(kind, std::move(message)); }

// Inside a catch block: fails with `kind` and `message`, keeping the
// exception being handled as the cause.
[[noreturn]] inline void FailFromCaught(ErrorKind kind, std::string message) {
  throw Error(kind, std::move(message), std::current_exception());
}

}  // namespace shapefn
