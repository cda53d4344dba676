"""Executables carry their shape functions written in Python.

``shapefn.compile`` builds each one, for every input signature its program
calls it with, into the executable's kernel library. A saved executable then
runs where nothing registers it: ``Executable.load`` in a fresh Python
process and ``shapefn-run``, with the mask it was compiled under. A
signature not compiled ahead is compiled by the registration when the
process has one, and is otherwise an error naming the op and the signature.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_runner import run_ok, runner  # noqa: F401 - runner is a fixture
from tvm import relax, tirx

import shapefn
from conftest import DEVICES
from shapefn import ExecutableFormatError, Param, ProgramBuilder, _core
from shapefn.compiler.shape_calls import emit_shape

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

OP = "test.carried.rows_of"  # (x [n], k [1]) -> [k, n // k]; reads k's value only


@shapefn.register_shape_func(OP, [False, True], override=True)
def rows_of(x, k):
    return [k[0], x.shape[0] // k[0]]


def rows_module(op=OP):
    """``main(x [n], k [1])``: ``x`` as ``k`` rows, doubled; the shape comes
    from the shape function of ``op``."""
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n], "float32"))
    k = relax.Var("k", relax.TensorType([1], "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, k]):
        (dims,) = emit_shape(bb, op, [x, k], [2])
        rows = bb.emit(relax.op.reshape(x, relax.ShapeExpr(dims)))
        bb.emit_func_output(bb.emit(relax.op.multiply(rows, relax.const(2.0, "float32"))))
    return bb.get()


def expected(x, k):
    return 2 * x.reshape(int(k[0]), -1)


X = np.arange(12, dtype=np.float32)
K = np.array([3], np.int64)


@pytest.fixture(scope="module", params=DEVICES)
def saved(request, tmp_path_factory):
    """(device, path) of the module compiled for ``device`` and saved."""
    device = request.param
    path = tmp_path_factory.mktemp(f"carried-{device}") / "rows.sfx"
    shapefn.compile(rows_module(), device).save(path)
    return device, path


def in_fresh_process(code: str) -> subprocess.CompletedProcess:
    """Runs ``code`` in a new Python process: no shape function of the tests
    is registered there."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


def test_the_executable_lists_what_it_carries(saved):
    exe = shapefn.Executable.load(saved[1])
    (carried,) = exe.carried_shape_funcs
    (build,) = carried.pop("builds")
    assert carried == {"op": OP, "mask": [False, True]}
    kernel = exe.kernel_names.index(build.pop("kernel"))
    assert f"kernel#{kernel}" not in exe.as_text()  # the program does not invoke it: the VM calls it
    assert build == {"signature": "float32:1,int64:1", "out_ndims": [2]}
    assert f"shape_func {OP}(float32:1,int64:1) = kernel " in exe.as_text()


def test_runs_in_a_process_that_never_registered_it(saved):
    device, path = saved
    proc = in_fresh_process(f"""
        import json, numpy as np, shapefn
        assert {OP!r} not in shapefn.registered_ops()
        vm = shapefn.VirtualMachine(shapefn.Executable.load({str(path)!r}), {device!r})
        for k in (1, 3, 4):
            out = vm(np.arange(12, dtype=np.float32), np.array([k]))
            print(json.dumps(out.numpy().tolist()))
        print(json.dumps(vm.counters))
    """)
    assert proc.returncode == 0, proc.stderr
    *outs, counters = [json.loads(line) for line in proc.stdout.splitlines()]
    for k, out in zip((1, 3, 4), outs):
        np.testing.assert_array_equal(np.array(out, np.float32), expected(X, np.array([k])))
    # The shape function read k (8 bytes) and nothing else.
    assert counters["shape_func_calls"] == 3
    assert counters["d2h_bytes"] == 3 * 8


def test_shapefn_run_runs_it(saved, runner, tmp_path):  # noqa: F811 - the fixture
    device, path = saved
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "k.npy", K)
    report = run_ok(runner, [path, "--device", device, "--input", "x.npy", "--input", "k.npy",
                             "--output-dir", "out"], tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / report["outputs"][0]), expected(X, K))
    assert report["counters"]["d2h_bytes"] == 8


def test_the_mask_it_was_compiled_under_governs():
    """A later registration of the op changes what new compiles use, never
    what an executable already carries."""
    op = "test.carried.replaced"
    shapefn.register_shape_func(op, [False, True], override=True, shape_func=rows_of)
    exe = shapefn.compile(rows_module(op), "sim")
    with pytest.warns(shapefn.OverDeclaredWarning):
        shapefn.register_shape_func(op, [True, True], level=20, shape_func=lambda x, k: [x.shape[0] // k[0], k[0]])
    vm = shapefn.VirtualMachine(exe, "sim")
    np.testing.assert_array_equal(vm(X, K).numpy(), expected(X, K))
    assert vm.counters["d2h_bytes"] == 8  # x itself is not read back, as the new mask would have it


def test_an_executable_records_every_mask_and_refuses_another_registered_one(tmp_path):
    """The masks of built-ins are recorded too: a process that registers
    another mask for one (which would copy other inputs than the program
    does) gets an error naming both masks when it makes a VM."""
    exe = shapefn.compile(rows_module("dyn.reshape"), "sim")
    assert exe.shape_func_masks == {"dyn.reshape": [False, True]}
    path = tmp_path / "reshape.sfx"
    exe.save(path)
    assert shapefn.Executable.load(path).shape_func_masks == {"dyn.reshape": [False, True]}
    proc = in_fresh_process(f"""
        import shapefn
        shapefn.register_shape_func("dyn.reshape", [True, True], level=20,
                                    shape_func=lambda x, k: [k[0] + x[0] * 0, x.shape[0] // k[0]])
        exe = shapefn.Executable.load({str(path)!r})
        try:
            shapefn.VirtualMachine(exe, "sim")
        except ValueError as e:
            print(e)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "the executable was compiled with data-dependence mask [False, True] for 'dyn.reshape', but this "
        "process registers [True, True]: compile it again, or register the mask it was compiled with")


def other_rank_program(exe):
    """A hand-built program calling ``OP`` on a rank-2 ``x``, carrying only
    the build ``exe`` carries (for a rank-1 ``x``), from ``exe``'s library."""
    (carried,) = exe.carried_shape_funcs
    (build,) = carried["builds"]
    pb = ProgramBuilder()
    main = pb.function("main", [Param("x", "float32", ["a", "b"], device="host"),
                                Param("k", "int64", [1], device="host")])
    (shape,) = main.shape_func(OP, main.args)
    main.ret(shape)
    pb.carry_shape_func(OP, carried["mask"], build["signature"], build["kernel"], build["out_ndims"])
    return pb.build(library=exe.library)


def test_a_signature_not_compiled_ahead(tmp_path):
    """Compiled by the registration where there is one; else a TypeError
    naming the op and the signature."""
    exe = other_rank_program(shapefn.compile(rows_module(), "sim"))
    x = np.zeros((6, 4), np.float32)
    assert shapefn.VirtualMachine(exe, "sim")(x, K) == (3, 2)  # [k, rows // k]
    exe.save(tmp_path / "other.sfx")
    proc = in_fresh_process(f"""
        import numpy as np, shapefn
        vm = shapefn.VirtualMachine(shapefn.Executable.load({str(tmp_path / "other.sfx")!r}), "sim")
        try:
            vm(np.zeros((6, 4), np.float32), np.array([3]))
        except TypeError as e:
            print(e)
    """)
    assert proc.returncode == 0, proc.stderr
    assert f"shape function of '{OP}' was not compiled for inputs (float32:2,int64:1)" in proc.stdout


def carried_parts(**change):
    """from_parts arguments of a program carrying ``OP``, with ``change``
    applied to its carried entry or build."""
    build = {"signature": "float32:1,int64:1", "kernel": 0, "out_ndims": [2]}
    carried = {"shape_func": 0, "mask": [False, True], "num_outputs": 1, "builds": [build]}
    for key, value in change.items():
        (build if key in build else carried)[key] = value
    code = ProgramBuilder()
    main = code.function("main", [Param("x", "float32", ["n"]), Param("k", "int64", [1])])
    main.ret(main.shape_func(OP, main.args)[0])
    function = main._finish()
    return [function], [], ["shape_func_kernel"], [OP], "", [carried]


@pytest.mark.parametrize("change, message", [
    ({"shape_func": 1}, "index 1, out of range"),
    ({"kernel": 4}, "names kernel 4, out of range"),
    ({"signature": "float32:1"}, "has 1 inputs, its mask 2"),
    ({"signature": "float32:x,int64:1"}, "malformed shape-function signature"),
    ({"signature": "complex:1,int64:1"}, "unknown dtype"),
    ({"out_ndims": [2, 1]}, "gives 2 output ranks for 1 outputs"),
    ({"out_ndims": [-1]}, "output rank -1"),
    ({"num_outputs": 0}, "has 0 outputs"),
])
def test_the_verifier_refuses_bad_tables(change, message):
    with pytest.raises(ExecutableFormatError, match=message):
        _core.Executable.from_parts(*carried_parts(**change))


def test_the_table_survives_save_and_load():
    core = _core.Executable.from_parts(*carried_parts())
    again = _core.Executable.deserialize(core.serialize())
    assert again.carried_shape_funcs == core.carried_shape_funcs != []
