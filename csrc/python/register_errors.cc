// Errors at the pybind11 boundary: every shapefn::Error and tvm-ffi error a
// binding lets through is raised by RaisePython (errors.h), the same path the
// Cython call path takes. `error_kinds()` lists the C++ kinds for the tests
// that check shapefn.runtime.errors.EXCEPTION_OF_KIND against them.
#include "errors.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common.h"

namespace shapefn::python {

void RegisterErrors(py::module_& m) {
  if (!LoadExceptionTable()) throw py::error_already_set();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error&) {
      RaisePython(p);
    } catch (const tvm::ffi::Error&) {
      RaisePython(p);
    }
  });
  m.def(
      "error_kinds",
      [] {
        std::vector<std::string> names;
#define SHAPEFN_ERROR_KIND_NAME(kind, name) names.push_back(name);
        SHAPEFN_ERROR_KINDS(SHAPEFN_ERROR_KIND_NAME)
#undef SHAPEFN_ERROR_KIND_NAME
        return names;
      },
      "The names of the C++ error kinds (SHAPEFN_ERROR_KINDS), in enum order.");
  m.def(
      "_raise_error",
      [](const std::string& kind, const std::string& message) {
        for (int i = 0; i < kNumErrorKinds; ++i) {
          if (kind == ErrorKindName(static_cast<ErrorKind>(i))) Fail(static_cast<ErrorKind>(i), message);
        }
        Fail(ErrorKind::kKey, "no error kind '" + kind + "'");
      },
      "Throws a shapefn::Error of `kind` (for tests of the error path).");
}

}  // namespace shapefn::python
