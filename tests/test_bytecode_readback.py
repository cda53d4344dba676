"""Bytecode family: readbacks — what only Python shows of them: the
builder's readback, hand-written (tools/gen_builder.py), takes the forms as
flags, true for the tensor and values where none are given. The instruction
itself (its forms, one sync however many sources, host tensors read in
place, the dtypes it reads, its errors and the verifier's rules on its
lists) is tested in csrc/tests/test_interpreter_readback.cc."""
import pytest
from bytecode import lines, program

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def test_builder_readback_takes_the_forms_as_flags():
    pb, fb = program([("v", "int64", [3]), ("s", "int32", [])])
    v, s = fb.args
    as_shape, as_int, as_tensor, unflagged = fb.reg(), fb.reg(), fb.reg(), fb.reg()
    fb.readback([as_shape, as_int, as_tensor], [v, s, v], [False, False, True])
    fb.readback([unflagged], [s])
    fb.ret(fb.make_tuple([as_shape, as_int, as_tensor, unflagged]))
    assert lines(pb.build())[:2] == ["readback dsts=[%2, %3, %4], srcs=[%0, %1, %0], forms=[0, 0, 1]",
                                     "readback dsts=[%5], srcs=[%1], forms=[0]"]
