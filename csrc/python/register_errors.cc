// The one place C++ errors become Python exceptions (for pybind11 calls; the
// Cython call path mirrors this table in _vmcall.pyx).
#include "common.h"
#include "shapefn/error.h"

namespace shapefn::python {

void RegisterErrors(py::module_& m) {
  py::module_ errors = py::module_::import("shapefn.errors");
  // Leaked on purpose: the translator may run until interpreter shutdown.
  static PyObject* format_error = py::object(errors.attr("ExecutableFormatError")).release().ptr();
  static PyObject* dependence_error = py::object(errors.attr("DataDependenceError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.kind()) {
        case ErrorKind::kValue: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case ErrorKind::kType: PyErr_SetString(PyExc_TypeError, e.what()); return;
        case ErrorKind::kKey: PyErr_SetString(PyExc_KeyError, e.what()); return;
        case ErrorKind::kIndex: PyErr_SetString(PyExc_IndexError, e.what()); return;
        case ErrorKind::kFormat: PyErr_SetString(format_error, e.what()); return;
        case ErrorKind::kDependence: PyErr_SetString(dependence_error, e.what()); return;
        case ErrorKind::kRuntime: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
        case ErrorKind::kInterrupted: PyErr_SetString(PyExc_KeyboardInterrupt, e.what()); return;
      }
    }
  });
}

}  // namespace shapefn::python
