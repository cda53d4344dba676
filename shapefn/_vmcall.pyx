# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""The zero-copy call path: numpy / DLPack arrays in, shapefn Tensors out.

The GIL is released while the VM runs. Host arrays are lent to the VM without
copying; they are kept alive until the VM drops its last reference.
"""
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uintptr_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

import numpy as np

from shapefn import errors as _errors

cdef extern from "shapefn/value.h" namespace "shapefn":
    cdef cppclass TensorObj:
        pass
    cdef cppclass Value:
        pass

ctypedef shared_ptr[TensorObj] TensorRef

cdef extern from "vmcall_support.h" namespace "shapefn::vmcall":
    void SetErrorClasses(PyObject*, PyObject*)
    void TranslateError()
    int KindOf(const Value*)
    int64_t IntOf(const Value*)
    vector[int64_t] ShapeOfValue(const Value*)
    TensorRef TensorOfValue(const Value*)
    size_t TupleSize(const Value*)
    Value* TupleField(const Value*, size_t)
    Value TensorValue(const TensorRef&)
    TensorRef WrapHost(void*, int, const int64_t*, int, int, void (*)(void*) noexcept, void*) except +TranslateError
    Value Invoke(uintptr_t, int, vector[Value]&) except +TranslateError nogil
    string DeviceName(const TensorRef&)
    cbool OnHost(const TensorRef&)
    string DTypeName(const TensorRef&)
    void* DataPtr(const TensorRef&)
    const vector[int64_t]& TensorShape(const TensorRef&)
    void ToHost(const TensorRef&, void*) except +TranslateError nogil
    size_t NBytes(const TensorRef&) except +TranslateError

SetErrorClasses(<PyObject*>_errors.ExecutableFormatError, <PyObject*>_errors.DataDependenceError)

cdef enum:
    KIND_EMPTY = 0
    KIND_INT = 1
    KIND_SHAPE = 2
    KIND_TENSOR = 3
    KIND_TUPLE = 4

# DLPack type codes of the numpy dtypes the VM accepts.
cdef dict _DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


cdef void _release_array(void* context) noexcept with gil:
    Py_XDECREF(<PyObject*>context)


cdef class Tensor:
    """A tensor the VM returned, on the device it was computed on.

    `numpy()` (or `numpy.asarray`) copies it to the host; `__dlpack__`
    exports host tensors without a copy.
    """
    cdef TensorRef ref

    @property
    def shape(self):
        return tuple(TensorShape(self.ref))

    @property
    def dtype(self):
        return DTypeName(self.ref).decode()

    @property
    def device(self):
        return DeviceName(self.ref).decode()

    @property
    def nbytes(self):
        return NBytes(self.ref)

    @property
    def _data_ptr(self):
        """Address of the first element in the device's address space (tests)."""
        return <uintptr_t>DataPtr(self.ref)

    def numpy(self):
        out = np.empty(self.shape, dtype=self.dtype)
        cdef uintptr_t dst = out.ctypes.data
        with nogil:
            ToHost(self.ref, <void*>dst)
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __dlpack__(self, *args, **kwargs):
        return self.numpy().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return (1, 0)  # exported through a host copy

    def __repr__(self):
        return f"shapefn.Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"


cdef object _to_python(const Value* v):
    cdef int kind = KindOf(v)
    cdef Tensor t
    cdef size_t i
    if kind == KIND_TENSOR:
        t = Tensor.__new__(Tensor)
        t.ref = TensorOfValue(v)
        return t
    if kind == KIND_TUPLE:
        return tuple(_to_python(TupleField(v, i)) for i in range(TupleSize(v)))
    if kind == KIND_INT:
        return IntOf(v)
    if kind == KIND_SHAPE:
        return tuple(ShapeOfValue(v))
    return None


cdef Value _from_python(object arg, int position) except *:
    cdef Tensor t
    cdef vector[int64_t] shape
    cdef uintptr_t data
    if isinstance(arg, Tensor):
        t = <Tensor>arg
        return TensorValue(t.ref)
    if not isinstance(arg, np.ndarray):
        if hasattr(arg, "__dlpack__"):
            arg = np.from_dlpack(arg)
        else:
            raise TypeError(
                f"argument {position} must be a numpy array, a DLPack tensor or a shapefn.Tensor, "
                f"got {type(arg).__name__}")
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
    arr = arg if arg.flags.c_contiguous else np.ascontiguousarray(arg)
    code = _DL_CODES.get(arr.dtype.kind)
    if code is None:
        raise TypeError(f"argument {position} has unsupported dtype {arr.dtype}")
    for d in arr.shape:
        shape.push_back(d)
    data = arr.ctypes.data
    Py_INCREF(arr)
    return TensorValue(WrapHost(<void*>data, arr.ndim, shape.data(), code, arr.dtype.itemsize * 8,
                                _release_array, <void*>arr))


def invoke(uintptr_t vm, int function_index, tuple args):
    """Runs function `function_index` of the VM at address `vm` on `args`."""
    cdef vector[Value] values
    cdef Value result
    cdef int i
    values.reserve(len(args))
    for i in range(len(args)):
        values.push_back(_from_python(args[i], i))
    with nogil:
        result = Invoke(vm, function_index, values)
    return _to_python(&result)
