"""Valid programs whose run time behaviour the verifier cannot bound, and
the VM must: tuples nested as deep as a loop runs, recursion with frames of
the largest size the verifier allows. Each of these once crashed the
process (stack overflow, or memory exhausted). Also a verifier check the
disassembler depends on."""
import numpy as np
import pytest

import shapefn
from shapefn import ExecutableFormatError, _core

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

OP = {name: i for i, (name, _) in enumerate(_core.isa())}
X_PARAM = {"name": "x", "dtype": "float32", "dims": [4], "device": 1}
X = np.ones(4, np.float32)


def program(words, num_registers=4, params=None):
    core = _core.Executable.from_parts(
        [{"name": "main", "params": [X_PARAM] if params is None else params, "symbols": [],
          "num_registers": num_registers, "code": list(words)}], [], [], [], "")
    return shapefn.Executable(core)


def nesting(depth: int, ret_register: int):
    """``r1 = (); repeat depth times: r1 = (r1,)``; returns register ``ret_register``."""
    return program([
        OP["make_tuple"], 1, 0,         # 0: r1 = ()
        OP["load_int"], 2, depth,       # 1: r2 = depth
        OP["load_int"], 3, 1,           # 2: r3 = 1
        OP["if"], 2, 7,                 # 3: while r2:
        OP["make_tuple"], 1, 1, 1,      # 4:   r1 = (r1,)
        OP["sub"], 2, 2, 3,             # 5:   r2 -= 1
        OP["goto"], 3,                  # 6:
        OP["ret"], ret_register])       # 7


def test_tuples_nested_a_million_deep_are_freed():
    # The nest is freed with the registers: once one C++ destructor call per
    # level, a stack overflow.
    assert shapefn.VirtualMachine(nesting(1_000_000, 3), "host")(X) == 1


def test_a_result_nesting_tuples_too_deep_raises():
    # Converting a result to Python takes a C call per level.
    with pytest.raises(RecursionError, match="nests tuples more than 1000 deep"):
        shapefn.VirtualMachine(nesting(1_000_000, 1), "host")(X)
    assert shapefn.VirtualMachine(nesting(3, 1), "host")(X) == ((((),),),)


def test_recursion_with_huge_frames_stops_before_memory_runs_out():
    # main calls itself with frames of 2^20 registers, the most the verifier
    # allows: 512 calls deep (the depth limit) that would be 40 GB.
    recursive = [OP["call"], 1, 0, 1, 0, OP["ret"], 1]
    vm = shapefn.VirtualMachine(program(recursive, num_registers=1 << 20), "host")
    with pytest.raises(RuntimeError, match="nested calls hold more than 4194304 registers"):
        vm(X)
    # The VM is usable after it, and small frames still meet the depth limit.
    with pytest.raises(RuntimeError, match="nested calls hold more than"):
        vm(X)
    with pytest.raises(RuntimeError, match="call depth exceeds 512"):
        shapefn.VirtualMachine(program(recursive), "host")(X)


def test_any_device_parameter_naming_an_unknown_symbol_is_rejected():
    # Its argument is not checked when called, but the disassembler prints
    # its dims: they must name real symbols.
    unchecked = {"name": "v", "dtype": "float32", "dims": [-5], "device": -1}
    with pytest.raises(ExecutableFormatError, match="parameter 'v' names an unknown symbol"):
        program([OP["ret"], 0], params=[unchecked])
