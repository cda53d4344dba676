"""Devices: ``host``, the simulated accelerator ``sim``, and TVM devices."""
from __future__ import annotations

import threading

from . import _core

Device = _core.Device

#: PCIe 4.0 x16: ~25 GB/s achievable (31.5 GB/s nominal), ~10 us per transfer.
DEFAULT_LATENCY_S = 10e-6
DEFAULT_BANDWIDTH_BYTES_PER_S = 25e9
DEFAULT_ARENA_BYTES = 4 << 30

_default_sim: Device | None = None
_lock = threading.Lock()


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
    or a TVM device such as ``"cuda"`` / ``"cuda:1"`` reached through TVM's DeviceAPI."""
    global _default_sim
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"device must be a name or a shapefn.Device, got {type(spec).__name__}")
    if spec == "host":
        return _core.host_device()
    if spec == "sim":
        with _lock:
            if _default_sim is None:
                _default_sim = sim()
            return _default_sim
    import tvm  # noqa: F401  (loads TVM's runtime, which registers its DeviceAPIs)

    return _core.tvm_device(spec)


def tvm_device_exists(spec: str) -> bool:
    """Whether TVM's runtime in this process can reach device ``spec``."""
    import tvm  # noqa: F401

    return _core.tvm_device_exists(spec)
