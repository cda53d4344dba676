"""Helpers of the Python bytecode tests (tests/test_bytecode_*.py, what
only Python shows of an instruction family; the interpreter's semantics are
tested in csrc/tests/test_interpreter_*.cc): programs built with the
builder, run on the VM, their disassembly checked through a save/load round
trip."""
from __future__ import annotations

import re

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
