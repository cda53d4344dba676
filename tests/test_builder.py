"""The builder on its own: one typed method per instruction of the table,
generated from it (shapefn/runtime/_instructions.py and builder.pyi match what
tools/gen_builder.py makes of ``_core.isa_operands()``), the written
destination optional, and what it encodes equal to the table's layout."""
import importlib.util
import inspect
from pathlib import Path

import pytest

from shapefn import _core
from shapefn.runtime._instructions import InstructionMethods
from shapefn.runtime.builder import FunctionBuilder, Label, Param, ProgramBuilder, Reg

REPO = Path(__file__).resolve().parent.parent


def generator():
    spec = importlib.util.spec_from_file_location("gen_builder", REPO / "tools" / "gen_builder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", ["shapefn/runtime/_instructions.py", "shapefn/runtime/builder.pyi"])
def test_generated_files_match_the_instruction_table(path):
    gen = generator()
    want = gen.outputs(_core.isa_operands())[REPO / path]
    assert (REPO / path).read_text() == want, "run: python tools/gen_builder.py"


def test_isa_operands_agree_with_the_layouts():
    layouts = dict(_core.isa())
    table = _core.isa_operands()
    assert [name for name, _ in table] == list(layouts)
    for mnemonic, operands in table:
        assert "".join(kind for _, kind, _ in operands) == layouts[mnemonic]
        assert all(role in ("read", "write") for _, _, role in operands)
        names = [name for name, _, _ in operands]
        assert len(set(names)) == len(names), mnemonic
        # Fixed operands first, then lists (the encoding's rule).
        kinds = layouts[mnemonic]
        assert kinds == "".join(sorted(kinds, key=lambda k: k in "RI")), mnemonic


def test_every_instruction_has_an_explicit_method():
    gen = generator()
    assert not hasattr(FunctionBuilder, "__getattr__")
    for mnemonic, operands in _core.isa_operands():
        if mnemonic in gen.HAND_WRITTEN:
            assert mnemonic in FunctionBuilder.__dict__
            continue
        method = getattr(InstructionMethods, gen.method_name(mnemonic))
        assert mnemonic in inspect.getdoc(method)
        for name, _, _ in operands:
            assert name in inspect.getdoc(method)


def test_written_destination_is_optional():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    fresh = fb.load_int(3)
    given = fb.reg()
    assert fb.load_int(given, 4) == given
    assert fresh == Reg(1) and given == Reg(2)
    fb.kill(fresh)  # kill's register is the operand itself, never allocated
    fb.ret(given)
    words = pb.build()._core
    assert "load_int %1, 3" in words.disassemble()


def test_operands_by_keyword_where_no_destination_is_implied():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    done = Label()
    fb.if_(cond=fb.load_int(1), target=done)
    fb.place(done)
    fb.ret(value=fb.args[0])
    assert "if cond=%1, target=->2" in pb.build().as_text(operand_names=True)


def test_unknown_instruction_and_wrong_operand_count():
    fb = ProgramBuilder().function("main")
    with pytest.raises(ValueError, match="unknown instruction 'nop'"):
        fb.emit("nop")
    with pytest.raises(TypeError, match=r"'add' takes 3 operands \(dst, lhs, rhs\), got 1"):
        fb.add(fb.reg())


def test_unplaced_label_is_named():
    pb = ProgramBuilder()
    fb = pb.function("main")
    fb.goto(Label())
    with pytest.raises(ValueError, match="'goto' operand 'target': jump target .* was never placed"):
        pb.build()
