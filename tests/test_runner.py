"""shapefn-run, the C++ runner: saved executables run with no Python in the
process must give the outputs and counters the Python VM gives, on sim, the
host and opencl (executables compiled for opencl; their counters also those
of sim); the .npy reader/writer must round-trip every dtype the VM takes; bad
invocations must fail with a clear message and a nonzero status. The C++
embedding example in docs/embedding.md is compiled and run against the
installed package."""
import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from test_compile import mlp, relax_reference
from test_executable import build_program, reference
from tvm.script import relax as R

import shapefn
from conftest import DEVICES, device_independent, device_target, opencl
from shapefn import Param, ProgramBuilder
from shapefn.compiler import hand_built as kernels

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 120

EXIT_FAILURE = 1
EXIT_USAGE = 2


@pytest.fixture(scope="module")
def runner() -> Path:
    return installed_runner()


def installed_runner() -> Path:
    """The installed shapefn-run: in this interpreter's scripts directory,
    where pip puts it, else on the PATH."""
    candidate = Path(sysconfig.get_path("scripts")) / "shapefn-run"
    if candidate.is_file():
        return candidate
    found = shutil.which("shapefn-run")
    if found is None:
        pytest.fail("shapefn-run is not installed; `pip install -e .` builds and installs it")
    return Path(found)


def run(runner, args, cwd, env=None):
    return subprocess.run([str(runner), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env)


def run_ok(runner, args, cwd):
    """Runs shapefn-run, expects success, returns its JSON report."""
    proc = run(runner, args, cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def flatten(value):
    """The Python VM's result in the runner's output order: tuples
    depth-first, shapes as int64 vectors, ints as int64 scalars."""
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return [np.array(value, np.int64)]
    if isinstance(value, tuple):
        return [a for v in value for a in flatten(v)]
    if isinstance(value, int):
        return [np.array(value, np.int64)]
    return [value.numpy()]


def python_vm(path, device):
    """A Python VM on a fresh device like the runner's: the default sim, the
    host or an OpenCL device."""
    return shapefn.VirtualMachine(shapefn.Executable.load(path), shapefn.sim() if device == "sim" else device)


def save_inputs(directory, arrays):
    names = []
    for i, a in enumerate(arrays):
        names.append(f"in{i}.npy")
        np.save(directory / names[-1], a)
    return names


def run_and_compare(runner, exe_path, device, arrays, cwd, repeat=1, function="main"):
    """Runs the saved executable in shapefn-run and in the Python VM the same
    number of times; asserts the same outputs and counters. Returns the
    runner's outputs and counters."""
    inputs = save_inputs(cwd, arrays)
    args = [exe_path, "--device", device, "--output-dir", "out", "--repeat", repeat, "--function", function]
    for name in inputs:
        args += ["--input", name]
    report = run_ok(runner, args, cwd)

    vm = python_vm(exe_path, device)
    for _ in range(repeat):
        want = vm.invoke(function, *arrays)
    want = flatten(want)
    assert report["outputs"] == [f"out{i}.npy" for i in range(len(want))]
    got = [np.load(cwd / "out" / name) for name in report["outputs"]]
    for g, w in zip(got, want):
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)  # the same kernels on the same inputs
    assert report["counters"] == vm.counters
    assert report["constant_counters"] == vm.constant_counters
    assert report["repeat"] == repeat and report["device"] == device
    return got, report["counters"]


# ---------------------------------------------------------------------------
# Compiled models


@tvm.script.ir_module
class DynamicSlice:
    """Slice bounds computed on the device: the shape function reads their
    values, so exactly those 16 bytes cross to the host. Also returns the
    output's shape and a count-sized nonzero."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), offset: R.Tensor((2,), "int64")):
        begin = R.add(offset, R.const(1, "int64"))
        end = R.shape_to_tensor(R.shape_of(x))
        strides = R.ones(R.shape([2]), "int64")
        y = R.dynamic_strided_slice(x, begin, end, strides)
        return (y, R.shape_of(y), R.nonzero(R.greater(y, R.const(0, "float32"))))


def dynamic_slice_reference(x, offset):
    y = x[offset[0] + 1:, offset[1] + 1:]
    return [y, np.array(y.shape, np.int64), np.stack(np.nonzero(y > 0)).astype(np.int64)]


@pytest.fixture(scope="module")
def saved_for(tmp_path_factory):
    """``saved_for(device)``: {name: path} of the models compiled for
    ``device`` ("sim", which the host runs too, or "opencl") and saved, once
    per device."""
    saved = {}

    def get(device):
        compiled_for = "sim" if device == "host" else device
        if compiled_for not in saved:
            directory = tmp_path_factory.mktemp(f"models-{compiled_for}")
            paths = {}
            for name, mod in [("slice", DynamicSlice), ("mlp", mlp(tvm.tirx.Var("n", "int64")))]:
                paths[name] = directory / f"{name}.sfx"
                shapefn.compile(mod, compiled_for).save(paths[name])
            saved[compiled_for] = paths
        return saved[compiled_for]

    return get


@pytest.fixture(scope="module")
def saved_models(saved_for):
    """The models compiled for sim."""
    return saved_for("sim")


RUNNER_DEVICES = ["sim", "host", pytest.param("opencl", marks=opencl)]


def assert_counters_as_on_sim(runner, saved_for, name, counters, arrays, cwd, repeat):
    """``counters`` of a run on another device count the work the same
    saved model does in shapefn-run on sim."""
    inputs = save_inputs(cwd, arrays)
    args = [saved_for("sim")[name], "--device", "sim", "--output-dir", "out-sim", "--repeat", repeat]
    for input_name in inputs:
        args += ["--input", input_name]
    on_sim = run_ok(runner, args, cwd)["counters"]
    assert device_independent(counters) == device_independent(on_sim)


@pytest.mark.parametrize("device", RUNNER_DEVICES)
@pytest.mark.parametrize("shape, offset", [((5, 6), [0, 1]), ((9, 4), [3, 0]), ((2, 2), [1, 1])])
def test_dynamic_slice_matches_python_vm_and_numpy(runner, saved_for, tmp_path, device, shape, offset):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    off = np.array(offset, np.int64)
    got, counters = run_and_compare(runner, saved_for(device)["slice"], device, [x, off], tmp_path, repeat=2)
    want = dynamic_slice_reference(x, off)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    if device == "opencl":
        assert_counters_as_on_sim(runner, saved_for, "slice", counters, [x, off], tmp_path, repeat=2)


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_slice_copies_only_the_bounds(runner, saved_for, tmp_path, device):
    x = np.ones((64, 64), np.float32)
    inputs = save_inputs(tmp_path, [x, np.array([2, 3], np.int64)])
    report = run_ok(runner, [saved_for(device)["slice"], "--device", device, "--input", inputs[0],
                             "--input", inputs[1], "--output-dir", "out"], tmp_path)
    assert report["counters"]["h2d_bytes"] == x.nbytes + 16
    # The slice's begin bounds (16 bytes) and nonzero's count (8): never x.
    assert report["counters"]["d2h_bytes"] == 16 + 8


@pytest.mark.parametrize("device", RUNNER_DEVICES)
def test_mlp_matches_python_vm_and_relax(runner, saved_for, tmp_path, device):
    dynamic = mlp(tvm.tirx.Var("n", "int64"))
    for batch in (1, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 1024)).astype(np.float32)
        (got,), counters = run_and_compare(runner, saved_for(device)["mlp"], device, [x], tmp_path, repeat=3)
        np.testing.assert_allclose(got, relax_reference(dynamic)(x), rtol=1e-5, atol=1e-5)
        if device == "opencl":
            assert_counters_as_on_sim(runner, saved_for, "mlp", counters, [x], tmp_path, repeat=3)


def trace_shape(trace):
    """What a Chrome trace holds, times aside: per event its phase, category,
    name, track and argument names (a sync's modelled wait, which depends on
    how fast the host went, aside)."""
    return sorted((e["ph"], e.get("cat", ""), e["name"], e["pid"],
                   tuple(sorted(set(e.get("args", {})) - {"modelled_us"})))
                  for e in trace["traceEvents"])


@pytest.mark.parametrize("device", RUNNER_DEVICES)
def test_profile_reports_the_last_call_as_the_python_profiler_does(runner, saved_for, tmp_path, device):
    path = saved_for(device)["slice"]
    x = np.random.default_rng(1).standard_normal((9, 7)).astype(np.float32)
    offset = np.array([2, 1], np.int64)
    inputs = save_inputs(tmp_path, [x, offset])
    proc = run(runner, [path, "--device", device, "--input", inputs[0], "--input", inputs[1], "--output-dir", "out",
                        "--repeat", 2, "--profile-trace", "trace.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for got, want in zip([np.load(tmp_path / "out" / name) for name in report["outputs"]],
                         dynamic_slice_reference(x, offset), strict=True):
        np.testing.assert_array_equal(got, want)
    vm = python_vm(path, device)
    first = vm(x, offset)  # held through the profiled call, as in the runner (the pools see the same)
    want = vm.profile(x, offset)
    del first

    def row_key(r):
        return r["kind"], r["name"], r["device"], r["detail"], r["count"], r["bytes"], r["device_us"] is None

    rows = report["profile"]["rows"]
    assert sorted(map(row_key, rows)) == sorted(map(row_key, want.rows))
    assert set(rows[0]) == set(want.rows[0])
    timed = [r for r in rows if r["device_us"] is not None]
    if device == "opencl":
        assert {r["kind"] for r in timed} == {"kernel", "copy"} and all(r["device_us"] > 0 for r in timed)
        totals = report["profile"]["totals"]
        assert totals["device_us"] == pytest.approx(sum(r["device_us"] for r in timed))
        assert totals["call_us"] <= totals["timeline_us"]
    else:
        assert not timed
    # The table on stderr, with Python's columns and one line per row.
    table = proc.stderr.splitlines()
    assert table[0].split() == str(want).splitlines()[0].split()
    assert table[-1].split()[0] == "Total" and len(table) == 1 + len(rows) + 3
    for r, line in zip(rows, table[1:], strict=False):
        assert line.startswith(r["name"]) and f"{r['count']:,}" in line.split()
    assert trace_shape(json.loads((tmp_path / "trace.json").read_text())) == trace_shape(want._chrome_trace())


# ---------------------------------------------------------------------------
# Hand-built programs: tuples with ints, other functions, every dtype


@pytest.fixture(scope="module")
def saved_tuple_programs(tmp_path_factory):
    """``saved_tuple_programs(device)``: the path of the tuple program, its
    kernel built for ``device`` ("sim", which the host runs too, or "opencl")."""
    saved = {}

    def get(device):
        if device not in saved:
            saved[device] = tmp_path_factory.mktemp(f"tuple-{device}") / "program.sfx"
            build_program(kernels.build({"scale": kernels.scale()}, device_target(device))).save(saved[device])
        return saved[device]

    return get


@pytest.mark.parametrize("device", DEVICES)
def test_tuple_with_an_int_and_another_function(runner, saved_tuple_programs, tmp_path, device):
    x = np.arange(5, dtype=np.float32)
    got, _ = run_and_compare(runner, saved_tuple_programs(device), device, [x], tmp_path)
    y, z, n = reference(x)
    np.testing.assert_array_equal(got[0], y)
    np.testing.assert_array_equal(got[1], z)
    assert got[2].shape == () and got[2].dtype == np.int64 and got[2] == n
    bias = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    (helper,), _ = run_and_compare(runner, saved_tuple_programs(device), "host" if device == "sim" else device,
                                   [bias], tmp_path, function="helper")
    np.testing.assert_array_equal(helper, reference(x, bias)[1])


def identity_program(dtype, ndim):
    pb = ProgramBuilder()
    main = pb.function("main", [Param("x", dtype, [f"d{i}" for i in range(ndim)])])
    main.ret(main.args[0])
    return pb.build()


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, device", [
    pytest.param((), "sim", id="sim-scalar"), pytest.param((0,), "sim", id="sim-empty"),
    pytest.param((3,), "sim", id="sim-3"), pytest.param((2, 3, 4), "sim", id="sim-2x3x4"),
    pytest.param((2, 3, 4), "opencl", marks=opencl, id="opencl-2x3x4")])
def test_npy_round_trips_every_vm_dtype(runner, tmp_path, dtype, shape, device):
    """(On opencl the input goes to the device and the output comes back.)"""
    rng = np.random.default_rng(len(shape))
    x = np.asarray(rng.standard_normal(shape) * 50).astype(dtype)
    identity_program(dtype, len(shape)).save(tmp_path / "identity.sfx")
    (got,), _ = run_and_compare(runner, tmp_path / "identity.sfx", device, [x], tmp_path)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, x)


def test_npy_format_version_2_is_read(runner, tmp_path):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    with open(tmp_path / "x.npy", "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))
    identity_program("int32", 2).save(tmp_path / "identity.sfx")
    run_ok(runner, ["identity.sfx", "--device", "host", "--input", "x.npy", "--output-dir", "."], tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "out0.npy"), x)


# ---------------------------------------------------------------------------
# No Python in the process


@pytest.mark.parametrize("device", DEVICES)
def test_runner_loads_no_python(runner, saved_for, tmp_path, device):
    ldd = subprocess.run(["ldd", str(runner)], capture_output=True, text=True, check=True).stdout
    assert "libtvm_runtime" in ldd and "libshapefn_core" in ldd
    assert "libpython" not in ldd
    # Every library the process loads, including the kernel library it opens
    # at run time: the dynamic loader logs each as it initialises it.
    x = np.ones((3, 1024), np.float32)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, LD_DEBUG="libs")
    proc = run(runner, [saved_for(device)["mlp"], "--device", device, "--input", "x.npy", "--output-dir", "out"],
               tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    loaded = re.findall(r"calling init: (\S+)", proc.stderr)
    assert any(path.endswith("mlp.sfx.kernels.so") for path in loaded), loaded
    assert not [path for path in loaded if "libpython" in path or "site-packages/numpy" in path]
    if device == "opencl":  # the OpenCL driver, opened at run time
        assert any("libOpenCL" in path for path in loaded), loaded


# ---------------------------------------------------------------------------
# Bad invocations


@pytest.mark.parametrize("args, message", [
    ([], "no executable given"),
    (["m.sfx", "--output-dir", "out"], "--device is required"),
    (["m.sfx", "--device", "sim"], "--output-dir is required"),
    (["m.sfx", "--device", "gpu", "--output-dir", "out"], "--device must be 'sim', 'host' or KIND[:N]"),
    (["m.sfx", "--device", "cuda:x", "--output-dir", "out"], "got 'cuda:x'"),
    (["m.sfx", "--device", "sim", "--output-dir", "out", "--repeat", "0"], "--repeat takes a positive integer"),
    (["m.sfx", "--device", "sim", "--output-dir", "out", "--repeat", "3x"], "--repeat takes a positive integer"),
    (["m.sfx", "--device", "sim", "--output-dir", "out", "--input"], "--input needs a value"),
    (["m.sfx", "--device", "sim", "--output-dir", "out", "--color"], "unknown option '--color'"),
    (["m.sfx", "x.npy", "--device", "sim", "--output-dir", "out"], "unexpected argument 'x.npy'"),
    (["m.sfx", "--device=sim", "--output-dir=out", "--dependence=sometimes"], "--dependence must be"),
    (["m.sfx", "--device", "sim", "--output-dir", "out", "--profile=yes"], "--profile takes no value"),
    (["m.sfx", "--device", "sim", "--output-dir", "out", "--profile-trace"], "--profile-trace needs a value"),
])
def test_bad_command_lines_print_usage(runner, tmp_path, args, message):
    proc = run(runner, args, tmp_path)
    assert proc.returncode == EXIT_USAGE
    assert "usage: shapefn-run" in proc.stderr and message in proc.stderr
    assert proc.stdout == ""


def test_help(runner, tmp_path):
    proc = run(runner, ["--help"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: shapefn-run")


def failure(runner, args, cwd):
    proc = run(runner, args, cwd)
    assert proc.returncode == EXIT_FAILURE, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("shapefn-run: error: ") and proc.stdout == ""
    return proc.stderr


def test_missing_and_corrupt_executables(runner, saved_models, tmp_path):
    x = save_inputs(tmp_path, [np.ones((2, 1024), np.float32)])[0]
    common = ["--device", "sim", "--input", x, "--output-dir", "out"]
    assert "cannot open executable 'absent.sfx'" in failure(runner, ["absent.sfx", *common], tmp_path)
    (tmp_path / "junk.sfx").write_bytes(b"not an executable")
    assert "not a shapefn executable" in failure(runner, ["junk.sfx", *common], tmp_path)
    (tmp_path / "folder.sfx").mkdir()
    assert "executable 'folder.sfx' is a directory" in failure(runner, ["folder.sfx", *common], tmp_path)
    shutil.copy(saved_models["mlp"], tmp_path / "alone.sfx")  # without its kernel library
    message = failure(runner, ["alone.sfx", *common], tmp_path)
    assert "kernel library" in message and "mlp.sfx.kernels.so" in message and "is missing" in message


def _beside(source: Path, directory: Path, library: bytes) -> Path:
    """A copy of the executable at ``source`` in ``directory``, with
    ``library`` as the kernel library it names."""
    directory.mkdir()
    shutil.copy(source, directory / source.name)
    (directory / f"{source.name}.kernels.so").write_bytes(library)
    return directory / source.name


def test_a_kernel_library_not_the_one_saved_is_refused_before_it_is_loaded(runner, saved_models, tmp_path):
    """A truncated library (which the loader would map and fault on: SIGBUS)
    and another executable's (the same kernel names: its results would be
    wrong) are refused naming both files, by Python and the runner alike."""
    x = save_inputs(tmp_path, [np.ones((2, 1024), np.float32)])[0]
    common = ["--device", "sim", "--input", x, "--output-dir", "out"]
    library = Path(str(saved_models["mlp"]) + ".kernels.so").read_bytes()
    other = Path(str(saved_models["slice"]) + ".kernels.so").read_bytes()
    cases = {"truncated": (library[:10_000], r"it has 10000 bytes, the executable's had \d+"),
             "swapped": (other, "same size, other contents" if len(other) == len(library) else "it has")}
    for case, (data, detail) in cases.items():
        path = _beside(Path(saved_models["mlp"]), tmp_path / case, data)
        message = (rf"kernel library '.*{case}/mlp.sfx.kernels.so' is not the one executable '.*{case}/mlp.sfx' "
                   "was saved with")
        with pytest.raises(ValueError, match=message) as info:
            shapefn.Executable.load(path)
        assert re.search(detail, str(info.value))
        assert re.search(message, failure(runner, [str(path), *common], tmp_path))


@pytest.fixture(scope="module")
def saved_cuda_slice(tmp_path_factory):
    """The dynamic-slice model compiled for cuda (no GPU needed to compile)."""
    path = tmp_path_factory.mktemp("models-cuda") / "slice.sfx"
    shapefn.compile(DynamicSlice, "cuda").save(path)
    return path


@pytest.mark.parametrize("compiled_for, device, names", [
    ("opencl", "sim", ["compiled for 'opencl'", "device 'sim'", "code for the CPU"]),
    ("cuda", "host", ["compiled for 'cuda'", "device 'host'", "code for the CPU"]),
    ("cuda", "opencl", ["compiled for 'cuda'", "device 'opencl'", "code for 'opencl'"]),
    ("sim", "cuda:1", ["compiled for the CPU", "device 'cuda:1'", "code for 'cuda'"]),
])
def test_a_device_other_than_the_build_is_refused_naming_both(runner, saved_for, saved_cuda_slice, tmp_path,
                                                              compiled_for, device, names):
    exe = saved_cuda_slice if compiled_for == "cuda" else saved_for(compiled_for)["slice"]
    args = [exe, "--device", device, "--output-dir", "out"]
    for name in save_inputs(tmp_path, [np.ones((3, 4), np.float32), np.zeros(2, np.int64)]):
        args += ["--input", name]
    message = failure(runner, args, tmp_path)
    assert all(name in message for name in names), message
    # Refused before the device was opened: no driver is asked for.
    assert "libcuda" not in message and not (tmp_path / "out").exists()


def test_cuda_without_a_driver_names_the_driver(runner, saved_cuda_slice, tmp_path):
    if tvm.cuda().exist:
        pytest.skip("this machine has a CUDA GPU: the missing-driver error cannot occur")
    args = [saved_cuda_slice, "--device", "cuda", "--output-dir", "out"]
    for name in save_inputs(tmp_path, [np.ones((3, 4), np.float32), np.zeros(2, np.int64)]):
        args += ["--input", name]
    message = failure(runner, args, tmp_path)
    assert "no NVIDIA driver (libcuda.so.1" in message and "Install the NVIDIA driver" in message


@pytest.mark.parametrize("arrays, message", [
    ([np.ones((2, 3), np.float32)], "'main' takes 2 arguments, got 1"),
    ([np.ones((2, 3), np.float32), np.zeros(2, np.int64), np.zeros(2, np.int64)], "takes 2 arguments, got 3"),
    ([np.ones((2, 3), np.int32), np.zeros(2, np.int64)], "must have dtype float32, got int32"),
    ([np.ones(6, np.float32), np.zeros(2, np.int64)], "must have rank 2, got rank 1"),
])
def test_wrong_arguments(runner, saved_models, tmp_path, arrays, message):
    args = [saved_models["slice"], "--device", "sim", "--output-dir", "out"]
    for name in save_inputs(tmp_path, arrays):
        args += ["--input", name]
    assert message in failure(runner, args, tmp_path)
    assert not (tmp_path / "out").exists()


def write_npy_header(path, header: str, data: bytes):
    header = header.encode() + b" " * (118 - len(header)) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data)


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text("1.0, 2.0\n"), "not a .npy file"),
    (lambda p: np.save(p, np.ones((2, 3), ">f4")), "dtype '>f4' is big-endian; save it little-endian"),
    (lambda p: np.save(p, np.asfortranarray(np.ones((2, 3), np.float32))), "Fortran order"),
    (lambda p: np.save(p, np.ones(3, np.complex64)), "dtype '<c8' is not supported"),
    (lambda p: np.save(p, np.array(["a", "b"])), "dtype '<U1' is not supported"),
    (lambda p: p.write_bytes(_npy_bytes(np.ones((4, 4), np.float32))[:-5]), "(truncated)"),
    (lambda p: p.write_bytes(_npy_bytes(np.ones(2, np.float32)) + b"xx"), "the file has 10"),
    (lambda p: write_npy_header(p, "{'descr': '<f4', 'shape': (2,), }", bytes(8)), "lacks one of"),
    (lambda p: write_npy_header(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,-1), }", bytes(8)),
     "malformed .npy header"),
    (lambda p: write_npy_header(p, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", bytes(8)),
     "expected True or False"),
])
def test_bad_npy_files_are_refused(runner, saved_models, tmp_path, make, message):
    make(tmp_path / "bad.npy")
    off = save_inputs(tmp_path, [np.zeros(2, np.int64)])[0]
    stderr = failure(runner, [saved_models["slice"], "--device", "sim", "--input", "bad.npy", "--input", off,
                              "--output-dir", "out"], tmp_path)
    assert "'bad.npy'" in stderr and message in stderr


def _npy_bytes(a):
    import io

    buffer = io.BytesIO()
    np.save(buffer, a)
    return buffer.getvalue()


def test_missing_input_file(runner, saved_models, tmp_path):
    stderr = failure(runner, [saved_models["mlp"], "--device", "sim", "--input", "nowhere.npy", "--output-dir", "o"],
                     tmp_path)
    assert "'nowhere.npy': cannot open the file" in stderr
    (tmp_path / "inputs").mkdir()
    stderr = failure(runner, [saved_models["mlp"], "--device", "sim", "--input", "inputs", "--output-dir", "o"],
                     tmp_path)
    assert "'inputs': is a directory, not a .npy file" in stderr


def test_unwritable_profile_trace(runner, saved_models, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 1024), np.float32))
    stderr = failure(runner, [saved_models["mlp"], "--device", "sim", "--input", "x.npy", "--output-dir", "o",
                              "--profile-trace", "no/such/dir/trace.json"], tmp_path)
    assert "cannot write the profile trace to 'no/such/dir/trace.json'" in stderr


def test_unknown_function(runner, saved_models, tmp_path):
    x = save_inputs(tmp_path, [np.ones((1, 1024), np.float32)])[0]
    stderr = failure(runner, [saved_models["mlp"], "--device", "sim", "--input", x, "--output-dir", "o",
                              "--function", "nope"], tmp_path)
    assert "executable has no function 'nope'" in stderr


def test_python_shape_function_is_named(runner, tmp_path):
    """A hand-built program does not carry the shape functions written in
    Python that it calls (compiled ones do: test_carried_shape_funcs.py):
    the runner names the op instead of failing somewhere later."""

    @shapefn.register_shape_func("test.runner_doubled_rows", False, override=True)
    def doubled_rows(x):
        return [x.shape[0] * 2]

    pb = ProgramBuilder()
    main = pb.function("main", [Param("x", "float32", ["n"])])
    (shape,) = main.shape_func("test.runner_doubled_rows", [main.args[0]])
    main.ret(shape)
    pb.build().save(tmp_path / "te.sfx")
    x = np.ones(3, np.float32)
    assert python_vm(tmp_path / "te.sfx", "sim")(x) == (6,)  # it runs where Python is
    np.save(tmp_path / "x.npy", x)
    stderr = failure(runner, ["te.sfx", "--device", "sim", "--input", "x.npy", "--output-dir", "o"], tmp_path)
    assert "neither built in nor carried by it: 'test.runner_doubled_rows'" in stderr
    assert "register_shape_func" in stderr


def test_python_global_kernel_is_named(runner, tmp_path):
    tvm_ffi.register_global_func("test.runner_python_kernel", lambda *args: None, override=True)
    pb = ProgramBuilder()
    pb.kernel("test.runner_python_kernel")
    main = pb.function("main", [Param("x", "float32", ["n"])])
    main.invoke_kernel("test.runner_python_kernel", [main.args[0]])
    main.ret(main.args[0])
    pb.build().save(tmp_path / "py.sfx")
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    stderr = failure(runner, ["py.sfx", "--device", "sim", "--input", "x.npy", "--output-dir", "o"], tmp_path)
    assert "kernel 'test.runner_python_kernel' is neither in the executable's library nor a registered global" \
        in stderr


# ---------------------------------------------------------------------------
# The embedding example of docs/embedding.md


def test_embedding_example_builds_and_runs(saved_models, tmp_path):
    """Compiles the example exactly as docs/embedding.md says, against the
    installed headers and libraries, and checks what it prints against the
    Python VM on the same input."""
    doc = (REPO / "docs" / "embedding.md").read_text()
    (source,) = re.findall(r"```cpp\n(.*?)```", doc, re.S)
    (tmp_path / "embed_example.cc").write_text(source)
    (command,) = re.findall(r"```sh\nSITE=.*?\n(g\+\+ .*?)\n\./embed_example", doc, re.S)
    site = sysconfig.get_path("platlib")
    command = command.replace("\\\n", " ").replace("$SITE", site).replace("\"", "")
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        pytest.fail(f"no C++ compiler '{compiler}' to build the embedding example (set CXX)")
    build = subprocess.run([compiler, *command.split()[1:]], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert build.returncode == 0, build.stderr

    proc = subprocess.run(["./embed_example", str(saved_models["mlp"])], cwd=tmp_path, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    printed = dict(line.split(" ", 1) for line in proc.stdout.splitlines())

    x = (np.arange(2 * 1024) % 7).astype(np.float32).reshape(2, 1024) * np.float32(0.25)
    vm = python_vm(saved_models["mlp"], "sim")
    want = vm(x).numpy()
    assert printed["shape"] == "2 128"
    np.testing.assert_allclose(float(printed["sum"]), want.astype(np.float64).sum(), rtol=1e-6)
    for name in ("h2d_bytes", "d2h_bytes", "kernel_calls"):
        assert int(printed[name]) == vm.counters[name]
