// The one way a C++ exception becomes a Python exception, for both binding
// layers: pybind11's exception translator (module.cc) and the Cython call
// path (`except +RaiseCurrentException` in shapefn/_vmcall.pyx).
//
// A shapefn::Error raises the class shapefn.runtime.errors.EXCEPTION_OF_KIND gives
// its kind; its cause (the tvm-ffi error of a kernel or a Python shape
// function) becomes the exception's __cause__, rebuilt with its own class
// and traceback. Header-only: each extension module keeps its own table.
#pragma once

#include <Python.h>
#include <tvm/ffi/error.h>

#include <exception>
#include <new>
#include <string>

#include "shapefn/error.h"

namespace shapefn::python {

namespace detail {

// Borrowed for the life of the interpreter (LoadExceptionTable takes a reference).
inline PyObject* exception_of_kind[kNumErrorKinds] = {};
inline PyObject* callee_exception = nullptr;  // shapefn.runtime.errors._callee_exception

// A new exception object `cls(message)`; null with a Python error set on failure.
inline PyObject* NewException(PyObject* cls, const char* message) {
  PyObject* text =
      PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::char_traits<char>::length(message)), "replace");
  if (text == nullptr) return nullptr;
  PyObject* exc = PyObject_CallOneArg(cls, text);
  Py_DECREF(text);
  return exc;
}

inline PyObject* FromFfiError(const tvm::ffi::Error& e) {
  if (callee_exception == nullptr) return NewException(PyExc_RuntimeError, e.what());
  return PyObject_CallFunction(callee_exception, "sss", e.kind().c_str(), e.message().c_str(), e.backtrace().c_str());
}

}  // namespace detail

// Reads shapefn.runtime.errors.EXCEPTION_OF_KIND, which must have a class for every
// kind of SHAPEFN_ERROR_KINDS and nothing else. Called once when a binding
// module is imported; false with a Python error set when the tables differ.
inline bool LoadExceptionTable() {
  PyObject* errors = PyImport_ImportModule("shapefn.runtime.errors");
  if (errors == nullptr) return false;
  PyObject* table = PyObject_GetAttrString(errors, "EXCEPTION_OF_KIND");
  detail::callee_exception = table != nullptr ? PyObject_GetAttrString(errors, "_callee_exception") : nullptr;
  Py_DECREF(errors);
  if (table == nullptr || detail::callee_exception == nullptr) {
    Py_XDECREF(table);
    return false;
  }
  static const char* const kNames[] = {
#define SHAPEFN_ERROR_KIND_NAME(kind, name) name,
      SHAPEFN_ERROR_KINDS(SHAPEFN_ERROR_KIND_NAME)
#undef SHAPEFN_ERROR_KIND_NAME
  };
  bool ok = PyMapping_Size(table) == kNumErrorKinds;
  for (int i = 0; ok && i < kNumErrorKinds; ++i) {
    PyObject* cls = PyMapping_GetItemString(table, kNames[i]);
    ok = cls != nullptr && PyExceptionClass_Check(cls);
    if (ok)
      detail::exception_of_kind[i] = cls;  // the reference is kept
    else
      Py_XDECREF(cls);
  }
  Py_DECREF(table);
  if (!ok) {
    PyErr_Clear();
    PyErr_SetString(
        PyExc_ImportError,
        "shapefn.runtime.errors.EXCEPTION_OF_KIND does not match the C++ error kinds (SHAPEFN_ERROR_KINDS)");
  }
  return ok;
}

// The Python exception object for `error`, with its cause chained; null
// with a Python error set when building it failed.
inline PyObject* ToPythonException(const std::exception_ptr& error) {
  PyObject* exc = nullptr;
  std::exception_ptr cause;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    PyObject* cls = detail::exception_of_kind[static_cast<int>(e.kind())];
    exc = detail::NewException(cls != nullptr ? cls : PyExc_RuntimeError, e.what());
    cause = e.cause();
  } catch (const tvm::ffi::Error& e) {
    exc = detail::FromFfiError(e);
  } catch (const std::bad_alloc&) {
    exc = detail::NewException(PyExc_MemoryError, "out of memory");
  } catch (const std::exception& e) {
    exc = detail::NewException(PyExc_RuntimeError, e.what());
  } catch (...) {
    exc = detail::NewException(PyExc_RuntimeError, "unknown C++ exception");
  }
  if (exc != nullptr && cause) {
    PyObject* cause_exc = ToPythonException(cause);
    if (cause_exc != nullptr) {
      PyException_SetCause(exc, cause_exc);  // steals the reference
    } else {
      PyErr_Clear();  // the error itself still says what failed
    }
  }
  return exc;
}

// Raises `error` as a Python exception (sets the Python error indicator).
inline void RaisePython(const std::exception_ptr& error) {
  // A Python error already set is one that Python's signal handler raised
  // while the VM checked for Ctrl-C; the VM's error (kInterrupted) reports it.
  PyErr_Clear();
  PyObject* exc = ToPythonException(error);
  if (exc == nullptr) return;  // building it raised: that error stands
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
}

// Inside a catch block: raises the exception being handled.
inline void RaiseCurrentException() { RaisePython(std::current_exception()); }

}  // namespace shapefn::python
