"""Exception and warning classes shared by shapefn's Python code and its C++ bindings."""


class ExecutableFormatError(ValueError):
    """A serialized executable is malformed or was written by an incompatible shapefn."""


class DataDependenceError(ValueError):
    """A shape function reads the data of an input its mask declares shape-only."""


class OverDeclaredWarning(UserWarning):
    """A mask declares an input data-dependent whose data the shape function never reads."""
