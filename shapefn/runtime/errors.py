"""Exception and warning classes shared by shapefn's Python code and its C++
bindings, and the table from the C++ error kinds to exception classes.

See docs/errors.md for how an error travels from C++ to the caller."""


class ExecutableFormatError(ValueError):
    """A serialized executable is malformed or was written by an incompatible shapefn."""


class DataDependenceError(ValueError):
    """A shape function reads the data of an input its mask declares shape-only."""


class OverDeclaredWarning(UserWarning):
    """A mask declares an input data-dependent whose data the shape function never reads."""


class UnsupportedOnnxOp(NotImplementedError):
    """An ONNX model uses operators neither shapefn nor TVM can import.

    ``ops`` maps each such operator (``domain.OpType`` outside the default
    domain) to the names of the nodes that use it; the message lists them all.
    """

    def __init__(self, message: str, ops: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.ops = dict(ops or {})


class InvalidOnnxModel(ValueError):
    """An ONNX model that is not well formed (what ``onnx.checker`` rejects:
    a node input nothing defines, a wrong number of inputs, ...), or a file
    that is not an ONNX model."""


#: The Python exception of each C++ error kind (``SHAPEFN_ERROR_KINDS`` in
#: csrc/include/shapefn/error.h); the bindings raise errors only through it.
EXCEPTION_OF_KIND: dict[str, type[BaseException]] = {
    "value": ValueError,
    "type": TypeError,
    "key": KeyError,
    "index": IndexError,
    "not_found": FileNotFoundError,
    "format": ExecutableFormatError,
    "dependence": DataDependenceError,
    "memory": MemoryError,
    "runtime": RuntimeError,
    "interrupted": KeyboardInterrupt,
}


def _callee_exception(kind: str, message: str, backtrace: str) -> BaseException:
    """The exception a tvm-ffi callee (a kernel, a Python shape function)
    raised, rebuilt from its tvm-ffi error: its own class (``ValueError``, ...)
    and a traceback through the callee's frames. The bindings chain it as the
    ``__cause__`` of the shapefn error that reports the failed call."""
    import tvm_ffi

    return tvm_ffi.core.Error(kind, message, backtrace).py_error()
