"""Bytecode family: control flow and calls — if, goto, call, ret; loops,
recursion, the tail-call form (a goto back to the start), call arity and
jump targets checked at load, and the runaway-loop budget."""
import numpy as np
import pytest
from bytecode import lines, program, rejected, run

from shapefn import Label
from shapefn.runtime.builder import Param, Reg

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

X = ("x", "float32", ["n"])


def test_if_falls_through_on_nonzero_and_jumps_on_zero():
    for cond, want in ((1, 10), (0, 20), (-5, 10)):
        pb, fb = program([X])
        otherwise = Label()
        out = fb.reg()
        fb.if_(fb.load_int(cond), otherwise)
        fb.load_int(out, 10)
        fb.ret(out)
        fb.place(otherwise)
        fb.load_int(out, 20)
        fb.ret(out)
        assert run(pb, np.zeros(1, np.float32))[0] == want
    assert lines(pb.build())[1] == "if cond=%2, target=->4"


def test_loop_sums_with_backward_goto():
    pb, fb = program([X])
    n = fb.tensor_dim(fb.args[0], 0)
    i, acc, one = fb.load_int(0), fb.load_int(0), fb.load_int(1)
    top, done = Label(), Label()
    fb.place(top)
    fb.if_(fb.lt(i, n), done)
    fb.add(acc, acc, i)
    fb.add(i, i, one)
    fb.goto(top)
    fb.place(done)
    fb.ret(acc)
    for length in (0, 1, 25):
        result, counters = run(pb, np.zeros(length, np.float32))
        assert result == sum(range(length))
        assert counters["instructions"] == 4 + 5 * length + 2 + 1


def factorial_program():
    """``main(x: f32[n])`` = ``fact(n)`` by recursion, and ``fact_loop(n)``
    in the tail-call form: the recursive call replaced by moves into the
    parameters and a goto to the start."""
    pb, fb = program([X])
    n = fb.tensor_dim(fb.args[0], 0)
    fb.ret(fb.make_tuple([fb.call("fact", [n]), fb.call("fact_loop", [n, fb.load_int(1)])]))

    fact = pb.function("fact", [Param("k", "int64", [], "any")])
    (k,) = fact.args
    recurse = Label()
    fact.if_(fact.lt(k, fact.load_int(2)), recurse)
    fact.ret(fact.load_int(1))
    fact.place(recurse)
    fact.ret(fact.mul(k, fact.call("fact", [fact.sub(k, fact.load_int(1))])))

    loop = pb.function("fact_loop", [Param("k", "int64", [], "any"), Param("acc", "int64", [], "any")])
    k, acc = loop.args
    start, more = Label(), Label()
    loop.place(start)
    loop.if_(loop.lt(k, loop.load_int(2)), more)
    loop.ret(acc)
    loop.place(more)
    loop.mul(acc, acc, k)
    loop.sub(k, k, loop.load_int(1))
    loop.goto(start)
    return pb


def test_recursion_and_tail_calls_compute_factorials():
    pb = factorial_program()
    for n in (0, 1, 5, 12):
        assert run(pb, np.zeros(n, np.float32))[0] == (np.prod(range(1, n + 1), dtype=np.int64),) * 2
    text = lines(pb.build())
    assert "call dst=%2, function=func#1, args=[%1]" in text
    assert "goto target=->0" in text


def test_call_arity_and_function_index_are_checked_at_load():
    pb, fb = program([X])
    fb.ret(fb.call("helper", []))
    helper = pb.function("helper", [Param("v", "int64", [], "any")])
    helper.ret(helper.args[0])
    rejected(pb, "call of 'helper' passes 0 arguments, it takes 1")
    pb, fb = program([X])
    fb.ret(fb.call("nowhere", [fb.args[0]]))
    rejected(pb, "call refers to function #1 of 1 (operand 'function')")


def test_jump_past_the_end_is_rejected():
    pb, fb = program([X])
    end = Label()
    fb.goto(end)
    fb.ret(fb.args[0])
    fb.place(end)  # after the last instruction
    rejected(pb, "goto refers to instruction #2 of 2 (operand 'target')")


def test_function_ending_without_ret_or_goto_is_rejected():
    pb, fb = program([X])
    fb.load_int(1)
    rejected(pb, "function 'main' can run past its end")


def test_cond_must_be_an_int():
    pb, fb = program([X])
    skip = Label()
    fb.if_(fb.args[0], skip)
    fb.place(skip)
    fb.ret(fb.args[0])
    with pytest.raises(TypeError, match="if expects an int, got tensor"):
        run(pb, np.zeros(1, np.float32))


def test_endless_loop_stops_at_the_budget():
    pb, fb = program([X])
    top = Label()
    fb.place(top)
    fb.goto(top)
    with pytest.raises(RuntimeError, match="budget of 1000 instructions"):
        run(pb, np.zeros(1, np.float32), max_instructions=1000)


def test_register_operand_of_ret_is_checked():
    pb, fb = program([X])
    fb.ret(Reg(3))
    rejected(pb, "ret uses register %3 of 1 (operand 'value')")
