# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""The zero-copy call path: numpy / DLPack arrays in, shapefn Tensors out.

The GIL is released while the VM runs. Host arrays are lent to the VM without
copying; they are kept alive until the VM drops its last reference.
"""
from cpython.buffer cimport PyBUF_RECORDS_RO, PyBuffer_IsContiguous, PyBuffer_Release, PyObject_GetBuffer
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uintptr_t
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

import sys

import numpy as np

cdef extern from "shapefn/value.h" namespace "shapefn":
    cdef cppclass TensorObj:
        pass
    cdef cppclass Value:
        pass
    cdef enum class ValueKind "shapefn::Value::Kind":
        kEmpty
        kInt
        kShape
        kTensor
        kTuple

ctypedef shared_ptr[TensorObj] TensorRef

cdef extern from "errors.h" namespace "shapefn::python":
    bint LoadExceptionTable() except False
    void RaiseCurrentException()

cdef extern from "vmcall_support.h" namespace "shapefn::vmcall":
    ValueKind KindOf(const Value*)
    int64_t IntOf(const Value*)
    vector[int64_t] ShapeOfValue(const Value*)
    TensorRef TensorOfValue(const Value*)
    size_t TupleSize(const Value*)
    Value* TupleField(const Value*, size_t)
    Value TensorValue(const TensorRef&)
    TensorRef WrapHost(void*, int, const int64_t*, int, int, void (*)(void*) noexcept, void*) except +RaiseCurrentException
    Value Invoke(uintptr_t, int, vector[Value]&) except +RaiseCurrentException nogil
    Value InvokeProfiled(uintptr_t, int, vector[Value]&, uintptr_t) except +RaiseCurrentException nogil
    string DeviceName(const TensorRef&)
    string DTypeName(const TensorRef&)
    void* DataPtr(const TensorRef&)
    const vector[int64_t]& TensorShape(const TensorRef&)
    void ToHost(const TensorRef&, void*) except +RaiseCurrentException nogil
    size_t NBytes(const TensorRef&) except +RaiseCurrentException

LoadExceptionTable()

# numpy dtype kinds the VM accepts: int, uint, float, bool.
cdef str _VM_KINDS = "iufb"
cdef char _NATIVE_ORDER = b'<' if sys.byteorder == "little" else b'>'
cdef type _NDARRAY = np.ndarray  # (a typed name: checked without a module attribute lookup)


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


# Each level of a tuple is converted by a C call, and a program can nest
# tuples as deep as it runs: deeper results raise instead of overflowing the stack.
cdef int _MAX_TUPLE_DEPTH = 1000


cdef object _to_python(const Value* v, int depth=0):
    cdef ValueKind kind = KindOf(v)
    cdef Tensor t
    cdef size_t i
    if kind == ValueKind.kTensor:
        t = Tensor.__new__(Tensor)
        t.ref = TensorOfValue(v)
        return t
    if kind == ValueKind.kTuple:
        if depth >= _MAX_TUPLE_DEPTH:
            raise RecursionError(f"the result nests tuples more than {_MAX_TUPLE_DEPTH} deep")
        return tuple([_to_python(TupleField(v, i), depth + 1) for i in range(TupleSize(v))])
    if kind == ValueKind.kInt:
        return IntOf(v)
    if kind == ValueKind.kShape:
        return tuple(ShapeOfValue(v))
    return None


cdef int _dl_code(const char* fmt) noexcept:
    """DLPack type code of a one-item buffer format in native byte order
    ('f', '<q', '?', ...); -1 for any other format."""
    cdef char c = fmt[0]
    if c == b'@' or c == b'=' or c == _NATIVE_ORDER:
        fmt += 1
        c = fmt[0]
    if c == 0 or fmt[1] != 0:
        return -1
    if c == b'b' or c == b'h' or c == b'i' or c == b'l' or c == b'q':
        return 0
    if c == b'B' or c == b'H' or c == b'I' or c == b'L' or c == b'Q':
        return 1
    if c == b'e' or c == b'f' or c == b'd':
        return 2
    if c == b'?':
        return 6
    return -1


cdef bint _lend_array(object arr, Value* out) except -1:
    """Lends ``arr`` to the VM (kept alive until the VM drops it) if it is a
    C-contiguous array of a native-order bool, int, uint or float dtype;
    returns False, lending nothing, otherwise. Everything comes from the
    buffer protocol, which is cheaper than numpy's attributes (see
    docs/bench for the per-call overhead)."""
    cdef Py_buffer view
    cdef vector[int64_t] shape
    cdef const int64_t* dims
    cdef int code, i
    try:
        PyObject_GetBuffer(arr, &view, PyBUF_RECORDS_RO)
    except (BufferError, ValueError, TypeError):
        return False
    try:
        code = _dl_code(view.format)
        if code < 0 or not PyBuffer_IsContiguous(&view, b'C'):
            return False
        if sizeof(Py_ssize_t) == sizeof(int64_t):
            dims = <const int64_t*>view.shape  # (WrapHost copies the dims)
        else:
            shape.resize(view.ndim)
            for i in range(view.ndim):
                shape[i] = view.shape[i]
            dims = shape.data()
        Py_INCREF(arr)
        try:
            out[0] = TensorValue(WrapHost(view.buf, view.ndim, dims, code, <int>view.itemsize * 8,
                                          _release_array, <void*>arr))
        except BaseException:
            Py_XDECREF(<PyObject*>arr)
            raise
        return True
    finally:
        PyBuffer_Release(&view)


cdef Value _from_python(object arg, int position) except *:
    cdef Tensor t
    cdef Value value
    if isinstance(arg, Tensor):
        t = <Tensor>arg
        return TensorValue(t.ref)
    if isinstance(arg, _NDARRAY) and _lend_array(arg, &value):  # the common case
        return value
    if not isinstance(arg, _NDARRAY):
        if isinstance(arg, np.generic):  # a numpy scalar: a 0-d tensor
            arg = np.asarray(arg)
        elif hasattr(arg, "__dlpack__"):
            arg = np.from_dlpack(arg)
        else:
            raise TypeError(
                f"argument {position} must be a numpy array, a DLPack tensor or a shapefn.Tensor, "
                f"got {type(arg).__name__}")
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
    arr = arg if arg.flags.c_contiguous else np.ascontiguousarray(arg)
    if arr.dtype.kind not in _VM_KINDS:
        raise TypeError(f"argument {position} has dtype {arr.dtype}; the VM takes bool, int, uint and float arrays")
    if not arr.dtype.isnative:
        # Kernels read native byte order: a byte-swapped array is converted,
        # not reinterpreted.
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not _lend_array(arr, &value):
        raise TypeError(f"argument {position} has dtype {arr.dtype}; the VM takes bool, int, uint and float arrays")
    return value


cdef object _invoke(uintptr_t vm, int function_index, tuple args):
    cdef vector[Value] values
    cdef Value result
    cdef Py_ssize_t i, n = len(args)
    values.reserve(n)
    for i in range(n):
        values.push_back(_from_python(args[i], i))
    with nogil:
        result = Invoke(vm, function_index, values)
    return _to_python(&result)


cdef class Function:
    """``vm[name]``: calls that function of the VM with numpy / DLPack arrays
    or shapefn Tensors and returns its result."""
    cdef object _handle  # the C++ VM: `_address` is valid while it lives
    cdef uintptr_t _address
    cdef int _index
    cdef readonly str name

    def __cinit__(self, handle, uintptr_t address, int index, str name):
        self._handle = handle
        self._address = address
        self._index = index
        self.name = name

    def __call__(self, *args):
        return _invoke(self._address, self._index, args)

    @property
    def __name__(self):
        return self.name

    def __repr__(self):
        return f"<shapefn VM function '{self.name}'>"


def invoke_profiled(uintptr_t vm, int function_index, tuple args, uintptr_t profiler):
    """Calls function ``function_index`` of the VM at address ``vm`` (as ``Function`` does) with
    the ``_core.Profiler`` at address ``profiler`` recording the call."""
    cdef vector[Value] values
    cdef Value result
    cdef int i
    values.reserve(len(args))
    for i in range(len(args)):
        values.push_back(_from_python(args[i], i))
    with nogil:
        result = InvokeProfiled(vm, function_index, values, profiler)
    return _to_python(&result)
