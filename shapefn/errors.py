"""Exception and warning classes shared by shapefn's Python code and its C++ bindings."""


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
