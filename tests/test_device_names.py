"""Tables Python takes from C++ instead of spelling them again: device slots
(shapefn/device_slot.h), the sim device's defaults (shapefn::SimConfig), and
device names, parsed by shapefn::ParseDeviceName alone; and the kinds of
device, one table in Python (runtime/device_kinds.py) that every list of
them reads."""
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


def test_every_list_of_device_kinds_is_the_one_table():
    """The kinds the command line, ONNX's backend, the GPU schedules and the
    executables' device codes know are read from runtime/device_kinds.py."""
    from shapefn import cli
    from shapefn.compiler.schedules import target_schedule
    from shapefn.frontend.onnx import backend
    from shapefn.runtime import builder, device_kinds

    assert cli.DEVICES == backend._SHAPEFN_DEVICES == device_kinds.offered() == ("host", "sim", "opencl", "cuda")
    assert target_schedule.GPU_KINDS == builder._DEVICE_MODULE_KINDS == device_kinds.gpu_kinds() \
        == {"opencl", "cuda", "rocm", "vulkan", "metal"}
    assert device_kinds.kind_of("opencl:1") is device_kinds.kind_of("opencl")
    assert [k.name for k in device_kinds.KINDS if k.all_on_host] == ["host"]


@pytest.mark.parametrize("name", ["tpu", "llvm", "", "Sim"])
def test_a_device_of_no_kind_is_refused_before_compiling(name):
    from tvm import relax

    x = relax.Var("x", relax.TensorType([2], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.op.add(x, x)))
    with pytest.raises(ValueError, match=rf"device '{name}': expected one of host, sim, opencl, cuda, .*:<index>"):
        shapefn.compile(bb.get(), name)


@pytest.mark.parametrize("name, kind, gpu", [("sim", "sim", False), ("host", "host", False),
                                             ("opencl:1", "opencl", True), ("cuda", "cuda", True),
                                             ("cpu", "cpu", False)])
def test_a_build_target_derives_everything_from_the_kind(name, kind, gpu):
    from shapefn.compiler.build_target import BuildTarget
    from shapefn.compiler.passes import placement

    build = BuildTarget.of(name)
    assert (build.device, build.kind.name, build.gpu) == (name, kind, gpu)
    assert build.target.kind.name == (kind if gpu else "llvm")
    assert build.policy is (placement.ALL_ON_HOST if name == "host" else placement.ON_DEVICE)
