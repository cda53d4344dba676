"""Bytecode family: moving values between registers — move, load_int,
load_const, load_shape, kill, make_tuple, get_item, copy — run on the VM,
disassembled by operand name, and rejected by the verifier naming the operand."""
import numpy as np
import pytest
from bytecode import lines, program, rejected, run

import shapefn
from shapefn.runtime.builder import Reg

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

X = ("x", "float32", ["n"])


def test_loads_and_moves():
    pb, fb = program([X])
    seven = fb.load_int(7)
    copy = fb.move(seven)
    dims = fb.load_shape([2, 0, 5])
    fb.ret(fb.make_tuple([copy, dims, seven]))
    result, counters = run(pb, np.zeros(3, np.float32))
    assert result == (7, (2, 0, 5), 7)
    assert counters["instructions"] == 5 and counters["allocations"] == 0
    assert lines(pb.build()) == ["load_int dst=%1, value=7", "move dst=%2, src=%1", "load_shape dst=%3, dims=[2, 0, 5]",
                                 "make_tuple dst=%4, fields=[%2, %3, %1]", "ret value=%4"]


def test_move_into_an_explicit_register_overwrites_it():
    pb, fb = program([X])
    a, b = fb.load_int(1), fb.load_int(2)
    assert fb.move(a, b) == a  # the destination is returned
    fb.ret(a)
    assert run(pb, np.zeros(1, np.float32))[0] == 2


@pytest.mark.parametrize("device", ["host", "sim"])
def test_load_const_returns_the_constant_on_its_device(device):
    pb, fb = program([X])
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    fb.ret(fb.load_const(pb.constant(value)))
    result, counters = run(pb, np.zeros(1, np.float32), device=device)
    np.testing.assert_array_equal(result.numpy(), value)
    assert result.device == device
    # Constants were uploaded when the VM was created: a call moves only its argument.
    assert counters["h2d_bytes"] == counters["allocations"] * 4 == (4 if device == "sim" else 0)


def test_kill_empties_a_register_and_its_tensor_is_reused():
    pb, fb = program([X])
    (x,) = fb.args
    shape = fb.shape_of(x)
    first = fb.alloc_tensor("device", shape, "float32")
    fb.kill(first)
    second = fb.alloc_tensor("device", shape, "float32")
    fb.ret(fb.make_tuple([first, second]))
    exe = pb.build()
    vm = shapefn.VirtualMachine(exe, "host")
    empty, tensor = vm(np.zeros(4, np.float32))
    assert empty is None and tensor.shape == (4,)
    assert "kill reg=%2" in lines(exe)


def test_tuples_nest_and_get_item_reads_fields():
    pb, fb = program([X])
    (x,) = fb.args
    inner = fb.make_tuple([fb.load_int(1), x])
    outer = fb.make_tuple([inner, fb.load_int(2)])
    fb.ret(fb.make_tuple([fb.get_item(fb.get_item(outer, 0), 1), fb.get_item(outer, 1)]))
    data = np.arange(3, dtype=np.float32)
    tensor, two = run(pb, data)[0]
    np.testing.assert_array_equal(tensor.numpy(), data)
    assert two == 2


def test_get_item_errors():
    pb, fb = program([X])
    fb.ret(fb.get_item(fb.make_tuple([fb.load_int(1)]), 3))
    with pytest.raises(IndexError, match="get_item: index 3 out of range for a tuple of 1"):
        run(pb, np.zeros(1, np.float32))
    pb, fb = program([X])
    fb.ret(fb.get_item(fb.load_int(1), 0))
    with pytest.raises(TypeError, match="get_item expects a tuple, got int"):
        run(pb, np.zeros(1, np.float32))
    pb, fb = program([X])
    fb.ret(fb.get_item(fb.make_tuple([]), -1))
    rejected(pb, "negative tuple index (operand 'index')")


def test_copy_crosses_the_boundary_and_is_counted():
    pb, fb = program([("x", "float32", ["n"], "host")])
    (x,) = fb.args
    on_device = fb.copy(x, "device")
    back = fb.copy(on_device, "host")
    fb.ret(fb.make_tuple([on_device, back]))
    data = np.arange(5, dtype=np.float32)
    (dev, host), counters = run(pb, data, device="sim")
    assert dev.device == "sim" and host.device == "host"
    np.testing.assert_array_equal(host.numpy(), data)
    assert counters["h2d_bytes"] == data.nbytes and counters["d2h_bytes"] == data.nbytes
    assert counters["syncs"] == 1
    assert lines(pb.build())[0] == "copy dst=%1, src=%0, device=@device"


@pytest.mark.parametrize("emit, message", [
    (lambda fb: fb.move(Reg(9), fb.args[0]), "move uses register %9 of 1 (operand 'dst')"),
    (lambda fb: fb.move(fb.reg(), Reg(7)), "move uses register %7 of 2 (operand 'src')"),
    (lambda fb: fb.make_tuple([fb.args[0], Reg(5)]), "make_tuple uses register %5 of 2 (operand 'fields')"),
    (lambda fb: fb.load_const(3), "load_const refers to constant #3 of 0 (operand 'constant')"),
    (lambda fb: fb.copy(fb.args[0], 4), "copy refers to device slot #4 of 2 (operand 'device')"),
])
def test_verifier_names_the_operand(emit, message):
    pb, fb = program([X])
    emit(fb)
    fb.ret(fb.args[0])
    rejected(pb, message)


def test_builder_names_the_operand_it_cannot_encode():
    pb, fb = program([X])
    fb.move(fb.reg(), 3)
    with pytest.raises(TypeError, match="'move' operand 'src': expected a register, got 3"):
        pb.build()
    with pytest.raises(TypeError, match=r"'move' takes 2 operands \(dst, src\), got 3"):
        fb.move(fb.reg(), fb.reg(), fb.reg())
