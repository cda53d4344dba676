"""Tables Python takes from C++ instead of spelling them again: device slots
(shapefn/device_slot.h), the sim device's defaults (shapefn::SimConfig), and
device names, parsed by shapefn::ParseDeviceName alone."""
import pytest

import shapefn
from shapefn import _core
from shapefn.runtime import devices

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def test_device_slots_come_from_cpp():
    assert devices.DEVICE_SLOTS == _core.device_slots() == {"host": 0, "device": 1, "any": -1}
    assert devices.DEVICE_SLOTS[devices.HOST_SLOT] == 0 and devices.DEVICE_SLOTS[devices.EXECUTION_SLOT] == 1


def test_builder_uses_the_cpp_device_slots():
    """Each slot name the builder takes reaches C++ as that slot: the
    disassembler, which names slots itself (DeviceSlotName), gives it back."""
    from shapefn.runtime.builder import Param, ProgramBuilder

    pb = ProgramBuilder()
    fb = pb.function("main", [Param(f"x_{name}", "float32", (2,), device=name) for name in devices.DEVICE_SLOTS])
    shape = fb.load_shape([2])
    held = [name for name, slot in devices.DEVICE_SLOTS.items() if slot >= 0]  # "any" is for parameters only
    for name in held:
        fb.alloc_tensor(name, shape, "float32")
    fb.ret(fb.args[0])
    text = pb.build().as_text(operand_names=True)
    assert "x_host: float32[2]@host" in text
    assert "x_any: float32[2]@any" in text
    assert "x_device: float32[2]," in text  # the execution device is every parameter's default
    allocs = [line for line in text.splitlines() if "alloc_tensor" in line]
    assert [line.split("device=")[1].split(",")[0] for line in allocs] == ["@" + name for name in held]


def test_sim_defaults_come_from_cpp():
    defaults = _core.sim_defaults()
    assert set(defaults) == {"latency_s", "bandwidth_bytes_per_s", "arena_bytes"}
    assert devices.DEFAULT_LATENCY_S == defaults["latency_s"]
    assert devices.DEFAULT_BANDWIDTH_BYTES_PER_S == defaults["bandwidth_bytes_per_s"]
    assert devices.DEFAULT_ARENA_BYTES == defaults["arena_bytes"]
    assert defaults["arena_bytes"] == 4 << 30


@pytest.mark.parametrize("name, parsed", [
    ("host", ("host", 0)), ("sim", ("sim", 0)), ("opencl", ("opencl", 0)), ("opencl:3", ("opencl", 3)),
    ("cuda", ("cuda", 0)), ("cuda:12", ("cuda", 12)),
])
def test_device_names_parse(name, parsed):
    assert _core.parse_device_name(name) == parsed


@pytest.mark.parametrize("name", ["opencl:", "opencl:x", "opencl:-1", "cuda:1.5", "cuda:9999999"])
def test_bad_device_indices_are_refused_in_one_way(name):
    kind = name.split(":")[0]
    message = rf"device '{name}': expected '{kind}' or '{kind}:<index>' \(the index after ':' must be a non-negative"
    with pytest.raises(ValueError, match=message):
        _core.parse_device_name(name)
    with pytest.raises(ValueError, match=message):
        shapefn.device(name)


def test_named_devices():
    assert shapefn.device("host").name == "host" and shapefn.device("host").is_host
    assert shapefn.device("sim") is shapefn.device("sim")  # one per process
    assert shapefn.device("sim") is shapefn.device()
    assert shapefn.sim() is not shapefn.device("sim")
    with pytest.raises(ValueError, match="unknown device 'host:1'"):
        shapefn.device("host:1")
    with pytest.raises(TypeError, match="device must be a name or a shapefn.Device"):
        shapefn.device(1)


def test_device_counters_take_opencl_names_only():
    with pytest.raises(ValueError, match=r"device counters are kept for OpenCL devices"):
        shapefn.device_counters("sim")
