"""Bytecode family: kernel calls — invoke_kernel with TVM-compiled kernels
(tensors as DLTensors, ints and shapes as scalars) and with a global function
written in Python (tensors lent as owning tvm-ffi Tensors), on the host and
on sim, counted; kernel indices checked at load."""
import numpy as np
import pytest
import tvm_ffi
from bytecode import OPCODES, from_words, lines, program, run

from shapefn import ExecutableFormatError
from shapefn.compiler import hand_built as kernels

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


@pytest.fixture(scope="module")
def library():
    return kernels.build({"scale": kernels.scale(), "strided_slice_scalar": kernels.strided_slice_scalar(1)}, "llvm")


@tvm_ffi.register_global_func("test.bytecode.fill_rows", override=True)
def fill_rows(out, value, rows):
    """A user kernel: fills ``out`` with ``value`` and checks the int it got."""
    assert rows == out.shape[0]
    out.copyfrom(np.full(out.shape, value, np.float32))


@pytest.mark.parametrize("device", ["host", "sim"])
def test_compiled_kernel_takes_tensors_and_ints(library, device):
    pb, fb = program([("x", "float32", ["n"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), out])
    fb.ret(out)
    data = np.arange(5, dtype=np.float32)
    result, counters = run(pb, data, device=device, library=library)
    np.testing.assert_array_equal(result.numpy(), data * 3)
    assert counters["kernel_calls"] == 1 and counters["d2h_bytes"] == 0
    assert "invoke_kernel kernel=kernel#0, args=[%0, %3, %2]" in lines(pb.build(library=library))


def test_shape_arguments_expand_to_their_dims(library):
    """strided_slice_scalar(1) takes (data, out, begin, stride): a shape of
    two ints passes both as scalars."""
    pb, fb = program([("x", "float32", [8])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.load_shape([3]), "float32")
    fb.invoke_kernel(pb.kernel("strided_slice_scalar"), [x, out, fb.load_shape([1, 2])])
    fb.ret(out)
    data = np.arange(8, dtype=np.float32)
    result, _ = run(pb, data, library=library)
    np.testing.assert_array_equal(result.numpy(), data[1::2][:3])


@pytest.mark.parametrize("device", ["host", "sim"])
def test_python_global_function_kernel(device):
    pb, fb = program([("x", "float32", ["n", 2])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("test.bytecode.fill_rows"), [out, fb.load_int(5), fb.tensor_dim(x, 0)])
    fb.ret(out)
    result, counters = run(pb, np.zeros((3, 2), np.float32), device=device)
    np.testing.assert_array_equal(result.numpy(), np.full((3, 2), 5, np.float32))
    assert counters["kernel_calls"] == 1


def test_tuple_argument_is_a_type_error():
    pb, fb = program([("x", "float32", ["n", 2])])
    fb.invoke_kernel(pb.kernel("test.bytecode.fill_rows"), [fb.make_tuple([])])
    fb.ret(fb.args[0])
    with pytest.raises(TypeError, match="kernel 'test.bytecode.fill_rows' argument 0 is tuple"):
        run(pb, np.zeros((1, 2), np.float32))


def test_unknown_kernel_is_named_when_the_vm_is_created():
    pb, fb = program([("x", "float32", ["n"])])
    fb.invoke_kernel(pb.kernel("test.bytecode.nowhere"), [fb.args[0]])
    fb.ret(fb.args[0])
    with pytest.raises(KeyError, match="kernel 'test.bytecode.nowhere' is neither in the executable's library"):
        run(pb, np.zeros(1, np.float32))


def test_kernel_index_is_checked_at_load():
    words = [OPCODES["invoke_kernel"], 1, 1, 0, OPCODES["ret"], 0]
    with pytest.raises(ExecutableFormatError, match=r"invoke_kernel refers to kernel #1 of 1 \(operand 'kernel'\)"):
        from_words(words, kernels=["scale"])
