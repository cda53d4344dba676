"""Devices: ``host``, the simulated accelerator ``sim``, OpenCL devices of
shapefn's own runtime, and TVM devices."""
from __future__ import annotations

from .. import _core
from . import device_kinds

Device = _core.Device

#: Device slot numbers by name ("host", "device", "any"), from shapefn/device_slot.h.
DEVICE_SLOTS: dict[str, int] = _core.device_slots()
#: The names of the host's slot and of the execution device's (kHostSlot, kExecutionSlot).
HOST_SLOT: str = _core.host_slot
EXECUTION_SLOT: str = _core.execution_slot

_SIM_DEFAULTS = _core.sim_defaults()  # shapefn::SimConfig
DEFAULT_LATENCY_S: float = _SIM_DEFAULTS["latency_s"]
DEFAULT_BANDWIDTH_BYTES_PER_S: float = _SIM_DEFAULTS["bandwidth_bytes_per_s"]
DEFAULT_ARENA_BYTES: int = _SIM_DEFAULTS["arena_bytes"]


def sim(
    *,
    latency_s: float = DEFAULT_LATENCY_S,
    bandwidth_bytes_per_s: float = DEFAULT_BANDWIDTH_BYTES_PER_S,
    arena_bytes: int = DEFAULT_ARENA_BYTES,
    strict: bool = False,
    realtime: bool = False,
) -> Device:
    """A new simulated accelerator with its own memory arena.

    Every transfer to or from it is counted and costs a modelled
    ``latency_s + bytes / bandwidth_bytes_per_s`` (added to the counter
    ``modelled_transfer_s``; with ``realtime=True`` also spent busy-waiting).
    With ``strict=True`` its memory is unreadable while host shape functions
    run, so a host read of device data faults (for tests); for that, VMs on
    a strict sim run one call at a time between them, whatever the threads.
    """
    return _core.sim_device(latency_s, bandwidth_bytes_per_s, arena_bytes, strict, realtime)


def device(spec: str | Device = "sim") -> Device:
    """A device from its name: ``"host"``, ``"sim"`` (one shared per process),
    ``"opencl"`` / ``"opencl:1"`` (shapefn's OpenCL runtime; one per index),
    or a TVM device such as ``"cuda"`` / ``"cuda:1"`` reached through TVM's DeviceAPI."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"device must be a name or a shapefn.Device, got {type(spec).__name__}")
    return _core.make_device(spec)


def tvm_device_exists(spec: str) -> bool:
    """Whether TVM's runtime in this process can reach device ``spec``."""
    return _core.tvm_device_exists(spec)


def opencl_devices() -> list[dict]:
    """The OpenCL devices of this machine, as shapefn's runtime sees them:
    ``name`` (``"opencl:<i>"``, what ``device()`` and ``VirtualMachine``
    take), ``device``, ``type`` (``gpu``, ``cpu``, ...), ``vendor``,
    ``version``, ``platform``, memory sizes and work-group limits. Empty when
    there is no OpenCL driver (``opencl_unavailable_reason()`` says what to
    install)."""
    return _core.opencl_devices()


def opencl_unavailable_reason() -> str:
    """Why there is no OpenCL device, naming what to install; ``""`` when there is one."""
    return _core.opencl_unavailable_reason()


def list_devices() -> list[dict]:
    """Every device shapefn can run on here: ``host``, ``sim``, each OpenCL
    device, and TVM's CUDA/ROCm/Vulkan/Metal devices present in this
    process. Each entry has ``name`` (what ``device()`` takes) and ``kind``;
    OpenCL entries carry the fields of ``opencl_devices()``."""
    found = [{"name": "host", "kind": "host"}, {"name": "sim", "kind": "sim"}]
    found += [{**info, "kind": "opencl"} for info in opencl_devices()]
    for kind in (k.name for k in device_kinds.KINDS if k.runtime == "tvm" and k.gpu):
        index = 0
        while tvm_device_exists(f"{kind}:{index}"):
            found.append({"name": f"{kind}:{index}", "kind": kind})
            index += 1
    return found


def device_counters(spec: str) -> dict:
    """What shapefn's OpenCL runtime did on device ``spec`` (``"opencl"``,
    ``"opencl:1"``) since the process started or the last
    ``reset_device_counters``, whoever asked: shapefn's VMs, TVM's tensors
    and VMs on ``tvm.opencl(i)``, kernels' workspaces. Keys: ``d2h_copies``,
    ``d2h_bytes``, ``h2d_copies``, ``h2d_bytes``, ``d2d_copies``,
    ``d2d_bytes``, ``syncs``, ``kernel_launches``, ``allocations``."""
    return _core.opencl_counts(_opencl_index(spec))


def reset_device_counters(spec: str) -> None:
    """Zeroes ``device_counters(spec)``."""
    _core.reset_opencl_counts(_opencl_index(spec))


def _opencl_index(spec: str) -> int:
    if isinstance(spec, str):
        kind, index = _core.parse_device_name(spec)
        if kind == "opencl":
            return index
    raise ValueError(f"device counters are kept for OpenCL devices ('opencl', 'opencl:<i>'), not {spec!r}")
