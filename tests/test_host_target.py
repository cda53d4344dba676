"""Host kernels are built for the CPU that compiles them (its vector
instructions: AVX2, AVX-512), or for the CPU ``SHAPEFN_HOST_CPU`` names.
The executable records the CPU features its host code may use, and a VM
checks them before running it (csrc/tests/test_cpu_features.cc checks the
refusal)."""
import numpy as np
import pytest
from tvm.script import relax as R

import shapefn
from shapefn import _core
from shapefn.compiler import target_schedule


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


def test_gpu_builds_record_their_host_code():
    import tvm

    target = tvm.target.Target("opencl", host=target_schedule.host_target())
    assert target_schedule.host_cpu_features(target) == target_schedule.host_cpu_features(
        target_schedule.host_target())
