"""Devices: the sim copy engine's counts and cost model, strict mode, OpenCL
devices by name and their copies as the VM and the device count them, and
TVM devices through TVM's DeviceAPI. (tests/test_opencl_runtime.py tests the
OpenCL runtime itself.)"""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shapefn
from conftest import opencl
from shapefn import Param, ProgramBuilder

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def upload_program():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    fb.ret(fb.args[0])
    return pb.build()


def test_sim_copy_engine_models_pcie_transfer_time():
    dev = shapefn.sim(latency_s=1e-5, bandwidth_bytes_per_s=1e9)
    vm = shapefn.VirtualMachine(upload_program(), dev)
    x = np.zeros(250_000, np.float32)  # 1 MB
    y = vm(x)
    assert vm.counters["h2d_bytes"] == x.nbytes and vm.counters["h2d_copies"] == 1
    assert vm.counters["modelled_transfer_s"] == pytest.approx(1e-5 + x.nbytes / 1e9)
    stats = dev.stats()
    assert stats["h2d_bytes"] == x.nbytes and stats["d2h_bytes"] == 0
    y.numpy()  # a host copy of the result goes through the same engine
    stats = dev.stats()
    assert stats["d2h_bytes"] == x.nbytes and stats["syncs"] == 1
    assert stats["modelled_transfer_s"] == pytest.approx(2 * (1e-5 + x.nbytes / 1e9))


def test_sim_defaults_are_pcie4_x16_like():
    assert shapefn.runtime.devices.DEFAULT_BANDWIDTH_BYTES_PER_S == 25e9
    assert shapefn.runtime.devices.DEFAULT_LATENCY_S == 10e-6


@pytest.mark.parametrize("kwargs", [{"bandwidth_bytes_per_s": 0}, {"latency_s": -1.0}, {"arena_bytes": 0}])
def test_sim_rejects_bad_configuration(kwargs):
    with pytest.raises(ValueError):
        shapefn.sim(**kwargs)


def test_sim_arena_exhaustion_raises():
    dev = shapefn.sim(arena_bytes=1 << 20)
    vm = shapefn.VirtualMachine(upload_program(), dev)
    with pytest.raises(MemoryError, match="out of device memory"):
        vm(np.zeros(1 << 20, np.float32))
    np.testing.assert_array_equal(vm(np.ones(4, np.float32)).numpy(), np.ones(4))


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    # Run outside the source tree so the installed package is imported.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


STRICT_READ = """
    import numpy as np, shapefn
    from shapefn import Param, ProgramBuilder
    dev = shapefn.sim(strict={strict})
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", [4])])
    fb.ret(fb.args[0])
    t = shapefn.VirtualMachine(pb.build(), dev)(np.full(4, 3, np.float32))
    dev._begin_host_shape_work()   # what the VM does around host shape functions
    byte = shapefn._core._read_byte(t._data_ptr)
    dev._end_host_shape_work()
    print("read", byte)
"""


def test_strict_mode_makes_device_memory_unreadable_during_shape_work(tmp_path):
    relaxed = _run(STRICT_READ.format(strict=False), tmp_path)
    assert relaxed.returncode == 0, relaxed.stderr
    assert "read" in relaxed.stdout
    strict = _run(STRICT_READ.format(strict=True), tmp_path)
    assert strict.returncode != 0
    assert "read" not in strict.stdout


def test_tvm_device_adapter_runs_through_tvm_device_api():
    # TVM's own CPU DeviceAPI stands in for an accelerator here: memory and
    # copies go through TVM, and the VM counts them as transfers.
    dev = shapefn.device("cpu")
    assert dev.name == "cpu" and not dev.is_host
    vm = shapefn.VirtualMachine(upload_program(), dev)
    x = np.arange(6, dtype=np.float32)
    y = vm(x)
    assert y.device == "cpu"
    np.testing.assert_array_equal(y.numpy(), x)
    assert vm.counters["h2d_bytes"] == x.nbytes


@opencl
def test_opencl_devices_by_name():
    found = shapefn.opencl_devices()
    listed = [d for d in shapefn.list_devices() if d["kind"] == "opencl"]
    assert listed == [{**d, "kind": "opencl"} for d in found]
    for i, info in enumerate(found):
        dev = shapefn.device(info["name"])
        assert info["name"] == f"opencl:{i}" and dev.name == info["name"] and not dev.is_host
    assert shapefn.device("opencl") is shapefn.device("opencl:0")
    with pytest.raises(ValueError, match=rf"no OpenCL device opencl:{len(found)}: this machine has {len(found)}"):
        shapefn.device(f"opencl:{len(found)}")
    for spec in ("opencl:x", "opencl:-1", "opencl:"):
        with pytest.raises(ValueError, match=rf"device '{spec}': expected 'opencl' or 'opencl:<index>'"):
            shapefn.device(spec)


@opencl
def test_opencl_copies_are_counted_by_the_vm_and_by_the_device():
    vm = shapefn.VirtualMachine(upload_program(), "opencl")
    x = np.arange(250_000, dtype=np.float32)
    shapefn.reset_device_counters("opencl")
    y = vm(x)
    assert y.device == "opencl:0"
    c = vm.counters
    assert (c["h2d_copies"], c["h2d_bytes"], c["d2h_copies"], c["syncs"]) == (1, x.nbytes, 0, 0)
    assert c["modelled_transfer_s"] == 0  # real copies: nothing is modelled
    np.testing.assert_array_equal(y.numpy(), x)  # a host copy of the result: one copy, one sync
    d = shapefn.device_counters("opencl")
    assert (d["h2d_copies"], d["h2d_bytes"], d["d2h_copies"], d["d2h_bytes"]) == (1, x.nbytes, 1, x.nbytes)
    assert d["syncs"] == 1 and d["kernel_launches"] == 0


@pytest.mark.skipif(not shapefn.tvm_device_exists("cuda"), reason="no CUDA device on this machine")
def test_cuda_device_round_trip():
    vm = shapefn.VirtualMachine(upload_program(), "cuda")
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(vm(x).numpy(), x)


@pytest.mark.parametrize("spec, match", [("tpu", "unknown device"), ("cuda:x", "non-negative integer")])
def test_bad_device_names_raise(spec, match):
    with pytest.raises(ValueError, match=match):
        shapefn.device(spec)


def test_whether_cuda_exists_does_not_depend_on_importing_tvm(tmp_path):
    # shapefn loads TVM's CUDA runtime itself (``import tvm`` would too): a
    # process that never imports tvm gets the same answer as one that does.
    answers = {}
    for first in ("", "import tvm"):
        run = _run(f"import sys\n{first}\nimport shapefn\n"
                   "print(shapefn.tvm_device_exists('cuda'), 'tvm' in sys.modules)", tmp_path)
        assert run.returncode == 0, run.stderr
        answers[first] = run.stdout.split()
    assert answers[""][1] == "False" and answers["import tvm"][1] == "True"
    assert answers[""][0] == answers["import tvm"][0]
