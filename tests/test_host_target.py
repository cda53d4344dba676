"""Host kernels are built for the CPU that compiles them (its vector
instructions: AVX2, AVX-512), or for the CPU ``SHAPEFN_HOST_CPU`` names.
The executable records the CPU features its host code may use, and a VM
checks them before running it (csrc/tests/test_cpu_features.cc checks the
refusal)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from tvm.script import relax as R

import shapefn
from shapefn import _core
from shapefn.compiler.schedules import target_schedule

# What users get: the default optimization level (conftest.default_host_opt_level).
pytestmark = pytest.mark.usefixtures("default_host_opt_level")


@R.function
def _doubled_sum(x: R.Tensor(("n", 64), "float32")):
    return R.sum(R.multiply(x, R.const(2.0, "float32")), axis=[1])


def module():
    import tvm

    return tvm.IRModule({"main": _doubled_sum})


X = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)


def test_the_executable_records_the_features_of_the_host_target(tmp_path):
    exe = shapefn.compile(module(), "host")
    features = target_schedule.host_cpu_features(target_schedule.host_target())
    assert exe.host_cpu_features == features
    assert set(features) <= set(_core.checkable_cpu_features())
    exe.save(tmp_path / "m.sfx")
    again = shapefn.Executable.load(tmp_path / "m.sfx")
    assert again.host_cpu_features == features
    np.testing.assert_allclose(shapefn.VirtualMachine(again, "host")(X).numpy(), (2 * X).sum(axis=1), rtol=1e-5)


def test_a_cpu_named_in_the_environment(monkeypatch):
    monkeypatch.setenv(target_schedule.HOST_CPU_ENV, "x86-64-v2")  # SSE4.2, no AVX
    target = target_schedule.host_target()
    assert target.attrs["mcpu"] == "x86-64-v2"
    exe = shapefn.compile(module(), "host")
    assert "sse4.2" in exe.host_cpu_features and "avx" not in exe.host_cpu_features
    np.testing.assert_allclose(shapefn.VirtualMachine(exe, "host")(X).numpy(), (2 * X).sum(axis=1), rtol=1e-5)


def test_an_unknown_cpu_is_refused(monkeypatch):
    monkeypatch.setenv(target_schedule.HOST_CPU_ENV, "no-such-cpu")
    with pytest.raises(ValueError, match="SHAPEFN_HOST_CPU='no-such-cpu' is not a CPU LLVM knows"):
        shapefn.compile(module(), "host")


def test_an_optimization_level_named_in_the_environment(monkeypatch):
    assert "opt-level" not in target_schedule.host_target().attrs  # LLVM's default (this module's)
    monkeypatch.setenv(target_schedule.HOST_OPT_LEVEL_ENV, "0")
    assert target_schedule.host_target().attrs["opt-level"] == 0
    exe = shapefn.compile(module(), "host")
    np.testing.assert_allclose(shapefn.VirtualMachine(exe, "host")(X).numpy(), (2 * X).sum(axis=1), rtol=1e-5)
    monkeypatch.setenv(target_schedule.HOST_OPT_LEVEL_ENV, "fast")
    with pytest.raises(ValueError, match="SHAPEFN_HOST_OPT_LEVEL='fast' is not an LLVM optimization level"):
        shapefn.compile(module(), "host")


def test_gpu_builds_record_their_host_code():
    import tvm

    target = tvm.target.Target("opencl", host=target_schedule.host_target())
    assert target_schedule.host_cpu_features(target) == target_schedule.host_cpu_features(
        target_schedule.host_target())


_THREADS = """
import os, numpy as np, tvm_ffi, shapefn, onnx
from onnx import helper, numpy_helper, TensorProto
environment = os.environ.get("TVM_NUM_THREADS")
rng = np.random.default_rng(0)
w, x = rng.standard_normal((32, 8, 3, 3)).astype(np.float32), rng.standard_normal((2, 8, 9, 11)).astype(np.float32)
graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
got = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), "host"), "host")(x).numpy()
assert os.environ.get("TVM_NUM_THREADS") == environment  # (what child processes would inherit)
print(tvm_ffi.get_global_func("runtime.NumThreads")(), len(os.sched_getaffinity(0)))
padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n, c, h, w, kh, kw
want = np.einsum("nchwij,ocij->nohw", windows, w)
print(float(np.abs(got - want).max()))
"""


@pytest.mark.parametrize("threads", [None, "1", "2"])
def test_host_kernels_run_on_every_cpu_the_process_may_use(threads):
    """TVM's pool would take half the CPUs on x86; shapefn's VM gives it all
    of them unless TVM_NUM_THREADS says otherwise, without writing the
    variable, and a parallel convolution gives numpy's result with either
    count."""
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    if threads is not None:
        env["TVM_NUM_THREADS"] = threads
    proc = subprocess.run([sys.executable, "-c", _THREADS], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts, error = proc.stdout.split("\n")[-3:-1]
    pool, cpus = map(int, counts.split())
    assert pool == (cpus if threads is None else int(threads))
    assert float(error) < 1e-4
