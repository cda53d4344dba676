"""Bytecode family: arithmetic on shapes and ints — add, sub, mul, floordiv,
floormod, min, max, lt, eq, shape_of, shape_get, shape_make, shape_build,
tensor_dim, shape_numel — against Python's integer semantics."""
import operator

import numpy as np
import pytest
from bytecode import lines, program, rejected, run

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

X = ("x", "float32", ["n", "m"])
ARITHMETIC = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
              "floormod": operator.mod, "min": min, "max": max, "lt": lambda a, b: int(a < b),
              "eq": lambda a, b: int(a == b)}
PAIRS = [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 5), (5, 5), (2**40, 3)]


@pytest.mark.parametrize("mnemonic", sorted(ARITHMETIC))
def test_arithmetic_matches_python(mnemonic):
    pb, fb = program([X])
    results = [getattr(fb, mnemonic)(fb.load_int(a), fb.load_int(b)) for a, b in PAIRS]
    fb.ret(fb.make_tuple(results))
    got, _ = run(pb, np.zeros((1, 1), np.float32))
    assert got == tuple(ARITHMETIC[mnemonic](a, b) for a, b in PAIRS)
    assert lines(pb.build())[2] == f"{mnemonic} dst=%3, lhs=%1, rhs=%2"


@pytest.mark.parametrize("mnemonic, a, b, error, message", [
    ("floordiv", 1, 0, ValueError, "floordiv by zero"),
    ("floormod", 1, 0, ValueError, "floormod by zero"),
    ("add", 2**62, 2**62, ValueError, "add overflows int64"),
    ("sub", -(2**62), 2**62 + 1, ValueError, "sub overflows int64"),
    ("mul", 2**32, 2**31, ValueError, "mul overflows int64"),
])
def test_arithmetic_errors(mnemonic, a, b, error, message):
    pb, fb = program([X])
    fb.ret(getattr(fb, mnemonic)(fb.load_int(a), fb.load_int(b)))
    with pytest.raises(error, match=message):
        run(pb, np.zeros((1, 1), np.float32))


def test_arithmetic_on_a_shape_is_a_type_error():
    pb, fb = program([X])
    fb.ret(fb.add(fb.shape_of(fb.args[0]), fb.load_int(1)))
    with pytest.raises(TypeError, match="add expects an int, got shape"):
        run(pb, np.zeros((1, 1), np.float32))


def test_shape_instructions():
    pb, fb = program([X])
    (x,) = fb.args
    shape = fb.shape_of(x)
    n, last = fb.shape_get(shape, 0), fb.shape_get(shape, -1)
    m = fb.tensor_dim(x, 1)
    made = fb.shape_make([m, n])
    built = fb.shape_build([-2, 7, -1, -2], [n, m])  # [m, 7, n, m]
    fb.ret(fb.make_tuple([shape, n, last, made, built, fb.shape_numel(built)]))
    got, counters = run(pb, np.zeros((3, 4), np.float32))
    assert got == ((3, 4), 3, 4, (4, 3), (4, 7, 3, 4), 4 * 7 * 3 * 4)
    assert counters["instructions"] == 9
    assert "shape_build dst=%6, pattern=[-2, 7, -1, -2], dims=[%2, %4]" in lines(pb.build())


def test_shape_index_out_of_range():
    pb, fb = program([X])
    fb.ret(fb.shape_get(fb.shape_of(fb.args[0]), 2))
    with pytest.raises(IndexError, match="shape_get: index 2 out of range for rank 2"):
        run(pb, np.zeros((1, 1), np.float32))
    pb, fb = program([X])
    fb.ret(fb.tensor_dim(fb.args[0], -3))
    with pytest.raises(IndexError, match="tensor_dim: index -3 out of range for rank 2"):
        run(pb, np.zeros((1, 1), np.float32))


def test_shape_numel_overflow():
    pb, fb = program([X])
    big = fb.load_int(2**32)
    fb.ret(fb.shape_numel(fb.shape_make([big, big])))
    with pytest.raises(ValueError, match="mul overflows int64"):
        run(pb, np.zeros((1, 1), np.float32))


def test_shape_build_template_past_its_ints_is_rejected():
    pb, fb = program([X])
    fb.ret(fb.shape_build([-3], [fb.load_int(1), fb.load_int(2)]))
    rejected(pb, "shape_build template refers past its ints (operand 'pattern')")
