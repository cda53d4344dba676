"""The one error path: every C++ error kind raises the class
``shapefn.runtime.errors.EXCEPTION_OF_KIND`` gives it, through the pybind11 bindings
and the Cython call path alike, and an error raised inside a tvm-ffi callee
(a kernel, a Python shape function) reaches the caller chained as the
``__cause__``, with its own class and traceback."""
import traceback

import numpy as np
import pytest
import tvm_ffi

import shapefn
from shapefn import Param, ProgramBuilder, _core
from shapefn.runtime.errors import EXCEPTION_OF_KIND, DataDependenceError, ExecutableFormatError

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def test_python_table_and_cpp_kinds_agree():
    assert list(EXCEPTION_OF_KIND) == _core.error_kinds()


@pytest.mark.parametrize("kind", _core.error_kinds())
def test_every_kind_raises_its_class(kind):
    with pytest.raises(BaseException) as info:
        _core._raise_error(kind, f"a {kind} error")
    assert type(info.value) is EXCEPTION_OF_KIND[kind]
    assert info.value.args == (f"a {kind} error",)
    assert info.value.__cause__ is None


def test_shapefn_classes_of_kinds():
    assert EXCEPTION_OF_KIND["format"] is ExecutableFormatError
    assert EXCEPTION_OF_KIND["dependence"] is DataDependenceError
    assert issubclass(ExecutableFormatError, ValueError) and issubclass(DataDependenceError, ValueError)


def test_bindings_raise_through_the_table():
    with pytest.raises(ExecutableFormatError):
        _core.Executable.deserialize(b"not an executable")
    with pytest.raises(TypeError, match=r"data_dependent must be a bool or a list of bools"):
        _core.resolve_mask("test.errors.mask", "yes")
    with pytest.raises(ValueError, match=r"data_dependent must not be empty"):
        _core.resolve_mask("test.errors.mask", [])
    with pytest.raises(KeyError):
        _core._raise_error("no such kind", "")


@tvm_ffi.register_global_func("test.errors.failing_kernel", override=True)
def failing_kernel(x, out):
    raise IndexError("failing_kernel: row 7 of 3")


def test_kernel_error_keeps_its_kind_and_traceback():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("test.errors.failing_kernel"), [x, out])
    fb.ret(out)
    vm = shapefn.VirtualMachine(pb.build(), "host")
    for _ in range(2):  # the VM goes on after a failed call
        with pytest.raises(IndexError, match=r"kernel 'test.errors.failing_kernel' failed: "
                                               r"IndexError: failing_kernel: row 7 of 3") as info:
            vm(np.zeros(3, np.float32))
        cause = info.value.__cause__
        assert type(cause) is IndexError
        assert str(cause) == "failing_kernel: row 7 of 3"
        frames = [frame.name for frame in traceback.extract_tb(cause.__traceback__)]
        assert "failing_kernel" in frames


def test_python_shape_function_error_is_chained(tmp_path):
    shapefn.set_cache_dir(tmp_path)
    try:
        # No probe signature traces it, so it runs when the VM first needs it.
        @shapefn.register_shape_func("test.errors.refusing", [True], override=True)
        def refusing(k):
            raise ValueError("refusing: k must be known")

        pb = ProgramBuilder()
        fb = pb.function("main", [Param("k", "int64", [1])])
        (shape,) = fb.shape_func("test.errors.refusing", list(fb.args))
        fb.ret(shape)
        vm = shapefn.VirtualMachine(pb.build(), "sim")
        with pytest.raises(RuntimeError, match=r"compiling the shape function of 'test.errors.refusing' "
                                               r"for \(int64:1\) failed: ValueError: refusing: k must be known"
                           ) as info:
            vm(np.array([1], np.int64))
    finally:
        shapefn.set_cache_dir(None)
    cause = info.value.__cause__
    assert type(cause) is ValueError
    assert str(cause) == "refusing: k must be known"
    frames = [frame.name for frame in traceback.extract_tb(cause.__traceback__)]
    assert "refusing" in frames
