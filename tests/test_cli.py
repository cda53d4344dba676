"""The installed ``shapefn`` command: each subcommand run as a user runs it
(a separate process), its exit status (0 success, 1 model or run error, 2
usage error), its JSON and files checked against numpy."""
import json
import os
import shutil
import subprocess
import sysconfig
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import opencl

# The command pip installed beside this Python (found on the PATH too).
_INSTALLED = os.path.join(sysconfig.get_path("scripts"), "shapefn")
COMMAND = _INSTALLED if os.path.exists(_INSTALLED) else shutil.which("shapefn")


def shapefn(*args, env=None, check_status=None):
    if COMMAND is None:
        pytest.fail("the shapefn command is not installed (pip install -e . installs it)")
    result = subprocess.run([COMMAND, *map(str, args)], capture_output=True, text=True, timeout=600,
                            env={**os.environ, **(env or {})})
    if check_status is not None:
        assert result.returncode == check_status, result.stderr
    return result


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "positive.onnx"
    onnx.save(positive_model(), path)
    return path


def positive_model() -> onnx.ModelProto:
    """``y = relu(x) * 2``, and the indices of x's positive entries (a
    count-sized output)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    where = helper.make_tensor_value_info("where", TensorProto.INT64, [2, "k"])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["y"]),
             helper.make_node("NonZero", ["r"], ["where"])]
    graph = helper.make_graph(nodes, "positive", [x], [y, where], initializer=[two])
    # (IR version 10: the onnxruntime the benchmarks compare with reads at most 13.)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.fixture(scope="module")
def x(tmp_path_factory):
    path = tmp_path_factory.mktemp("inputs") / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((6, 4)).astype("float32"))
    return path


def expected(x_path):
    x = np.load(x_path)
    return [np.maximum(x, 0) * 2, np.stack(np.nonzero(x > 0))]


@pytest.mark.parametrize("args", [[], ["compile"], ["run"], ["profile"], ["devices"], ["cache"], ["cache", "prune"]])
def test_every_command_has_help(args):
    result = shapefn(*args, "--help", check_status=0)
    assert "usage: shapefn" in result.stdout


@pytest.mark.parametrize("args, says", [
    ([], "required: COMMAND"),
    (["run"], "required: model"),
    (["compile", "m.onnx"], "required: -o/--output"),
    (["run", "m.onnx", "--repeat", "0"], "must be at least 1"),
    (["cache", "prune", "--max-size", "lots"], "not a size"),
    (["cache", "prune"], "needs --max-size or --older-than"),
    (["run", "missing.onnx"], "model 'missing.onnx' does not exist"),
    (["compile", "m.onnx", "-o", "m.sfx", "--shape", "x=3xfour"], "NAME=DIMS"),
    (["compile", "m.onnx", "-o", "absent/m.sfx"], "the folder 'absent' of --output does not exist"),
    (["bundle", "missing.sfx", "out"], "executable 'missing.sfx' does not exist"),
    (["compile", "m.onnx", "-o", "m.sfx", "--device", "cuda", "--cuda-arch", "sm90"], "not a CUDA architecture"),
    (["compile", "m.onnx", "-o", "m.sfx", "--cuda-arch", "sm_90"], "--cuda-arch applies to --device cuda, not host"),
])
def test_usage_errors_exit_2_naming_the_problem(tmp_path, args, says):
    (tmp_path / "m.onnx").write_bytes(b"")
    result = subprocess.run([COMMAND, *args], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert says in result.stderr


def test_compile_then_run_the_saved_executable(tmp_path, model, x):
    result = shapefn("compile", model, "-o", tmp_path / "positive.sfx", "--device", "host", check_status=0)
    report = json.loads(result.stdout)
    assert report["output"] == str(tmp_path / "positive.sfx") and report["kernels"] > 0
    assert (tmp_path / "positive.sfx").is_file()
    out = tmp_path / "out"
    result = shapefn("run", tmp_path / "positive.sfx", "--input", x, "--output-dir", out, "--repeat", 3,
                     check_status=0)
    report = json.loads(result.stdout)
    want = expected(x)
    assert report["outputs"] == ["x".join(map(str, w.shape)) + f" {w.dtype}" for w in want]
    assert report["wall_s"]["repeat"] == 3
    for i, w in enumerate(want):
        np.testing.assert_array_equal(np.load(out / f"output_{i}.npy"), w)


@pytest.mark.parametrize("device", ["sim", pytest.param("opencl", marks=opencl)])
def test_run_an_onnx_model_on_a_device_reports_what_crossed(tmp_path, model, x, device):
    result = shapefn("run", model, "--input", x, "--device", device, "--output-dir", tmp_path, check_status=0)
    report = json.loads(result.stdout)
    for i, w in enumerate(expected(x)):
        np.testing.assert_array_equal(np.load(tmp_path / f"output_{i}.npy"), w)
    # nonzero's count alone crosses (8 bytes), in one sync, per call
    assert report["counters_per_call"]["d2h_bytes"] == 8
    assert report["counters_per_call"]["syncs"] == 1


def test_a_model_error_is_one_line_and_status_1(tmp_path, x):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a protobuf")
    result = shapefn("run", broken, "--input", x, check_status=1)
    assert result.stderr.startswith("shapefn run: ")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    verbose = shapefn("run", broken, "--input", x, "--verbose", check_status=1)
    assert "Traceback" in verbose.stderr


def test_a_run_error_names_the_argument(tmp_path, model):
    wrong = tmp_path / "x.npy"
    np.save(wrong, np.zeros((6, 4), "int32"))
    result = shapefn("run", model, "--input", wrong, check_status=1)
    assert "dtype float32, got int32" in result.stderr and "Traceback" not in result.stderr


def test_profile_prints_the_table_and_writes_a_trace(tmp_path, model, x):
    trace = tmp_path / "trace.json"
    result = shapefn("profile", model, "--input", x, "--device", "sim", "--trace", trace, check_status=0)
    assert "Duration (us)" in result.stdout and "Counters" in result.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name", "").startswith("shapefn_nonzero") or "nonzero" in e.get("name", "") for e in events)


def test_devices_lists_host_sim_and_opencl(request):
    lines = shapefn("devices", check_status=0).stdout.splitlines()
    names = [line.split()[0] for line in lines if not line.startswith("(")]
    assert names[:2] == ["host", "sim"]
    if request.config.getoption("--require-opencl"):
        assert any(n.startswith("opencl:") for n in names)


def _fill_cache(root, ages_s):
    """Entries of 1000 bytes last used ``ages_s`` seconds ago, and a file
    another process is still writing (a temporary name)."""
    now = time.time()
    paths = []
    for i, age in enumerate(ages_s):
        path = root / "kernels" / "objects" / f"entry{i}.o"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1000)
        os.utime(path, (now - age, now - age))
        paths.append(path)
    writing = root / "kernels" / "objects" / ".entry9.tmp.o"
    writing.write_bytes(b"x" * 5000)
    os.utime(writing, (now - 10**7, now - 10**7))
    return paths, writing


def test_cache_info_prune_and_clear(tmp_path):
    env = {"SHAPEFN_CACHE_DIR": str(tmp_path)}
    paths, writing = _fill_cache(tmp_path, [10, 4 * 86400, 40 * 86400, 2 * 3600])
    info = json.loads(shapefn("cache", "info", env=env, check_status=0).stdout)
    assert (info["entries"], info["bytes"]) == (4, 4000)
    # Least recently used first: the 40-day, then the 4-day entry.
    shapefn("cache", "prune", "--max-size", "2500", env=env, check_status=0)
    assert [p.exists() for p in paths] == [True, False, False, True]
    shapefn("cache", "prune", "--older-than", "1h", env=env, check_status=0)
    assert [p.exists() for p in paths] == [True, False, False, False]
    shapefn("cache", "clear", env=env, check_status=0)
    assert not any(p.exists() for p in paths)
    assert writing.exists()  # (being written: not an entry yet)


def test_compile_is_quiet_when_stderr_is_not_a_terminal(tmp_path, model):
    result = shapefn("compile", model, "-o", tmp_path / "m.sfx", check_status=0)
    assert result.stderr == ""
    assert shapefn("compile", model, "-o", tmp_path / "m.sfx", "--quiet", check_status=0).stderr == ""
