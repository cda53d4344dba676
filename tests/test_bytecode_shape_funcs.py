"""Bytecode family: shape-function calls — invoke_shape_func with native
built-ins (shapes in, values only where the mask says, attributes), with a
shape function written in Python (TVM-compiled), and the arity and output
counts checked once, when the VM is created."""
import numpy as np
import pytest
from bytecode import OPCODES, from_words, lines, program, run

import shapefn
from shapefn import ExecutableFormatError

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def test_native_shape_function_sees_shapes_only():
    pb, fb = program([("a", "float32", ["n", 1]), ("b", "float32", [1, "m"])])
    (shape,) = fb.shape_func("shapefn.broadcast", fb.args)
    fb.ret(shape)
    result, counters = run(pb, np.zeros((3, 1), np.float32), np.zeros((1, 4), np.float32), device="sim")
    assert result == (3, 4)
    assert counters["shape_func_calls"] == 1 and counters["d2h_bytes"] == 0 and counters["syncs"] == 0
    assert lines(pb.build())[0] == ("invoke_shape_func shape_func=shape_func#0, inputs=[%0, %1], outputs=[%2], "
                                    "attrs=[]")


def test_value_inputs_cross_once_and_shape_registers_not_at_all():
    pb, fb = program([("x", "float32", ["n", "m"]), ("new_shape", "int64", [2])])
    x, new_shape = fb.args
    (from_tensor,) = fb.shape_func("relax.reshape", [x, new_shape])
    (from_register,) = fb.shape_func("relax.reshape", [x, fb.load_shape([-1, 2])])
    fb.ret(fb.make_tuple([from_tensor, from_register]))
    result, counters = run(pb, np.zeros((4, 3), np.float32), np.array([6, -1], np.int64), device="sim")
    assert result == ((6, 2), (6, 2))
    assert counters["d2h_bytes"] == 16 and counters["syncs"] == 1 and counters["shape_func_calls"] == 2


def test_python_shape_function(tmp_path):
    shapefn.set_cache_dir(tmp_path)
    try:
        @shapefn.register_shape_func("test.bytecode.pair", [False, False], level=10, override=True)
        def pair(a, b):
            return [a.shape[0] + b.shape[0], b.shape[1]]

        pb, fb = program([("a", "float32", ["n", 2]), ("b", "float32", ["m", 2])])
        (shape,) = fb.shape_func("test.bytecode.pair", fb.args)
        fb.ret(shape)
        result, counters = run(pb, np.zeros((2, 2), np.float32), np.zeros((5, 2), np.float32))
        assert result == (7, 2) and counters["shape_func_calls"] == 1
    finally:
        shapefn.set_cache_dir(None)


def test_arity_is_checked_when_the_vm_is_created():
    pb, fb = program([("x", "float32", ["n"])])
    (shape,) = fb.shape_func("shapefn.broadcast", [fb.args[0]])
    fb.ret(shape)
    exe = pb.build()  # the registry is consulted by the VM, not at load
    with pytest.raises(ValueError, match="'main' calls the shape function of 'shapefn.broadcast' with 1 inputs, "
                                         "it takes 2"):
        shapefn.VirtualMachine(exe, "host")


def test_output_count_is_checked_when_the_vm_is_created():
    pb, fb = program([("a", "float32", ["n"]), ("b", "float32", ["n"])])
    shapes = fb.shape_func("shapefn.broadcast", fb.args, num_outputs=2)
    fb.ret(shapes[0])
    with pytest.raises(ValueError, match="'main' expects 2 shapes from the shape function of 'shapefn.broadcast', "
                                         "it gives 1"):
        shapefn.VirtualMachine(pb.build(), "host")


def test_unregistered_shape_function_is_named():
    pb, fb = program([("x", "float32", ["n"])])
    (shape,) = fb.shape_func("test.bytecode.unregistered", [fb.args[0]])
    fb.ret(shape)
    with pytest.raises(KeyError, match="test.bytecode.unregistered"):
        shapefn.VirtualMachine(pb.build(), "host")


def test_shape_function_index_and_output_registers_are_checked_at_load():
    words = [OPCODES["invoke_shape_func"], 1, 1, 0, 1, 1, 0, OPCODES["ret"], 0]
    with pytest.raises(ExecutableFormatError, match=r"refers to shape function #1 of 1 \(operand 'shape_func'\)"):
        from_words(words, shape_funcs=["shapefn.broadcast"])
    words = [OPCODES["invoke_shape_func"], 0, 1, 0, 1, 6, 0, OPCODES["ret"], 0]
    with pytest.raises(ExecutableFormatError, match=r"uses register %6 of 4 \(operand 'outputs'\)"):
        from_words(words, shape_funcs=["shapefn.broadcast"])
