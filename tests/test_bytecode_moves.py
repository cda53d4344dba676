"""Bytecode family: moves — what only Python shows of them: a register that
kill emptied reaches the caller as None, and the builder names an operand it
cannot encode. The instructions themselves (move, load_int, load_const,
load_shape, kill, make_tuple, get_item, copy: results, counters, disassembly,
errors and the verifier's refusals) are tested in
csrc/tests/test_interpreter_moves.cc."""
import numpy as np
import pytest
from bytecode import program, run

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

X = ("x", "float32", ["n"])


def test_a_killed_register_reaches_python_as_none():
    pb, fb = program([X])
    killed, kept = fb.load_int(3), fb.load_int(4)
    fb.kill(killed)
    fb.ret(fb.make_tuple([killed, kept]))
    assert run(pb, np.zeros(1, np.float32))[0] == (None, 4)


def test_builder_names_the_operand_it_cannot_encode():
    pb, fb = program([X])
    fb.move(fb.reg(), 3)
    with pytest.raises(TypeError, match="'move' operand 'src': expected a register, got 3"):
        pb.build()
    with pytest.raises(TypeError, match=r"'move' takes 2 operands \(dst, src\), got 3"):
        fb.move(fb.reg(), fb.reg(), fb.reg())
