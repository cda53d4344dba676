"""Bytecode family: readbacks and syncs — readback's forms (values as an int
or a shape, or the tensor on the host), one sync per instruction however many
sources, host tensors read in place, and the verifier's rules on its lists."""
import numpy as np
import pytest
from bytecode import OPCODES, from_words, lines, program, rejected, run

from shapefn import ExecutableFormatError

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

VECTOR = ("v", "int64", [3])
SCALAR = ("s", "int32", [])


def test_readback_of_device_tensors_syncs_once():
    pb, fb = program([VECTOR, SCALAR])
    v, s = fb.args
    as_shape, as_int, as_tensor = fb.reg(), fb.reg(), fb.reg()
    fb.readback([as_shape, as_int, as_tensor], [v, s, v], [False, False, True])
    fb.ret(fb.make_tuple([as_shape, as_int, as_tensor]))
    vector, scalar = np.array([4, -1, 9], np.int64), np.array(7, np.int32)
    (shape, value, tensor), counters = run(pb, vector, scalar, device="sim")
    assert shape == (4, -1, 9) and value == 7
    assert tensor.device == "host"
    np.testing.assert_array_equal(tensor.numpy(), vector)
    assert counters["syncs"] == 1  # three sources, one wait
    assert counters["d2h_copies"] == 3 and counters["d2h_bytes"] == 8 * 3 + 4 + 8 * 3
    assert "readback dsts=[%2, %3, %4], srcs=[%0, %1, %0], forms=[0, 0, 1]" in lines(pb.build())


def test_readback_of_host_tensors_copies_nothing():
    pb, fb = program([VECTOR[:3] + ("host",)])
    out = fb.reg()
    fb.readback([out], [fb.args[0]])
    fb.ret(out)
    result, counters = run(pb, np.array([1, 2, 3], np.int64), device="sim")
    assert result == (1, 2, 3)
    assert counters["d2h_copies"] == 0 and counters["syncs"] == 0


@pytest.mark.parametrize("dtype", ["uint8", "int16", "bool"])
def test_readback_values_of_integer_and_bool_tensors(dtype):
    pb, fb = program([("v", dtype, [2])])
    out = fb.reg()
    fb.readback([out], [fb.args[0]])
    fb.ret(out)
    assert run(pb, np.array([1, 0], dtype), device="sim")[0] == (1, 0)


def test_readback_values_of_a_float_tensor_is_a_type_error():
    pb, fb = program([("v", "float32", [2])])
    out = fb.reg()
    fb.readback([out], [fb.args[0]])
    fb.ret(out)
    with pytest.raises(TypeError, match="readback reads integer or bool tensors, got float32"):
        run(pb, np.zeros(2, np.float32), device="sim")


def test_readback_lists_must_match():
    pb, fb = program([VECTOR])
    fb.emit("readback", [fb.reg(), fb.reg()], [fb.args[0]], [0])
    fb.ret(fb.args[0])
    rejected(pb, "readback needs as many destinations and forms as sources")


def test_readback_form_must_be_values_or_tensor():
    words = [OPCODES["readback"], 1, 1, 1, 0, 1, 2, OPCODES["ret"], 0]
    with pytest.raises(ExecutableFormatError,
                       match=r"readback form 2 is neither 0 \(values\) nor 1 \(tensor\) \(operand 'forms'\)"):
        from_words(words)


def test_readback_destination_register_is_checked():
    words = [OPCODES["readback"], 1, 8, 1, 0, 1, 0, OPCODES["ret"], 0]
    with pytest.raises(ExecutableFormatError, match=r"readback uses register %8 of 4 \(operand 'dsts'\)"):
        from_words(words)
