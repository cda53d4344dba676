"""Helpers of the per-family bytecode tests (tests/test_bytecode_*.py):
programs built with the builder, run on the VM, their disassembly checked
through a save/load round trip, and verifier rejections expected."""
from __future__ import annotations

import re

import pytest

import shapefn
from shapefn import _core
from shapefn.runtime.builder import Param, ProgramBuilder


def program(params=(), name="main"):
    """A ProgramBuilder and its function ``name`` taking ``params``
    (``(name, dtype, shape)`` or ``(name, dtype, shape, device)`` tuples)."""
    pb = ProgramBuilder()
    return pb, pb.function(name, [Param(*p) for p in params])


def run(pb, *args, device="host", library=None, **vm_options):
    """Builds ``pb``, checks its disassembly round-trips, runs ``main(*args)``
    on a fresh VM; returns (result, counters)."""
    exe = pb.build(library=library)
    round_trips(exe)
    vm = shapefn.VirtualMachine(exe, device, **vm_options)
    vm.reset_counters()
    result = vm(*args)
    return result, vm.counters


def round_trips(exe) -> None:
    """The disassembly survives serialization, with and without operand names."""
    loaded = _core.Executable.deserialize(exe._core.serialize())
    for names in (False, True):
        assert loaded.disassemble(names) == exe.as_text(operand_names=names)


def lines(exe, operand_names=True) -> list[str]:
    """The instruction lines of the disassembly, without the ``pc:`` prefix."""
    return [re.sub(r"^\s*\d+: ", "", line) for line in exe.as_text(operand_names).splitlines()
            if re.match(r"^\s+\d+: ", line)]


def rejected(pb, message: str) -> str:
    """Building ``pb`` fails verification with ``message`` (a substring)."""
    with pytest.raises(shapefn.ExecutableFormatError, match=re.escape(message)) as info:
        pb.build()
    return str(info.value)


def from_words(words, num_registers=4, **tables):
    """An executable of one function ``main(x: float32[n])`` running raw
    ``words`` (to reach encodings the builder never emits)."""
    function = {"name": "main", "symbols": ["n"], "num_registers": num_registers, "code": list(words),
                "params": [{"name": "x", "dtype": "float32", "dims": [-1], "device": 1}]}
    return _core.Executable.from_parts([function], tables.get("constants", []), tables.get("kernels", []),
                                       tables.get("shape_funcs", []), "")


OPCODES = {name: i for i, (name, _) in enumerate(_core.isa())}
