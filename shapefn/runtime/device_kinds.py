"""The kinds of device shapefn compiles for and runs on: one table.

A device is named ``kind`` or ``kind:index`` (``"opencl:1"``). Everything
Python derives from a device's name comes from its kind's row here: where
its kernels are compiled for, where the VM keeps tensors, which runtime
reaches it, and whether the command line and ONNX's backend interface offer
it. (The C++ core parses names in one place too, ``csrc/device/device_name.cc``,
and makes the device.) Adding a device kind starts here (docs/extending.md).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "DeviceKind", "gpu_kinds", "kind_of", "offered"]


@dataclass(frozen=True)
class DeviceKind:
    #: The name before the ``:index``.
    name: str
    #: Who reaches the device: ``"shapefn"`` (its own host, sim and OpenCL
    #: runtimes) or ``"tvm"`` (TVM's DeviceAPI for the kind).
    runtime: str
    #: Kernels are GPU kernels, compiled for TVM's target of this name (and
    #: a library of them carries a TVM device module of this kind); else
    #: CPU kernels compiled for the host (``target_schedule.host_target``).
    gpu: bool
    #: The VM keeps every tensor and runs every kernel on the host: nothing
    #: is copied (``host``).
    all_on_host: bool = False
    #: Offered by the command line and ONNX's backend interface: the kinds
    #: tested on the project's machines.
    offered: bool = False


#: Every kind, in the order listings show them.
KINDS: tuple[DeviceKind, ...] = (
    DeviceKind("host", "shapefn", gpu=False, all_on_host=True, offered=True),
    DeviceKind("sim", "shapefn", gpu=False, offered=True),
    DeviceKind("opencl", "shapefn", gpu=True, offered=True),
    DeviceKind("cuda", "tvm", gpu=True, offered=True),
    DeviceKind("rocm", "tvm", gpu=True),
    DeviceKind("vulkan", "tvm", gpu=True),
    DeviceKind("metal", "tvm", gpu=True),
    DeviceKind("cpu", "tvm", gpu=False),
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def kind_of(device: str) -> DeviceKind:
    """The kind of device ``device`` (``"sim"``, ``"opencl:1"``). Raises
    ValueError naming the kinds for a name of no kind."""
    if not isinstance(device, str):
        raise TypeError(f"a device name is a string, got {type(device).__name__}")
    kind = _BY_NAME.get(device.split(":", 1)[0])
    if kind is None:
        raise ValueError(f"device {device!r}: expected one of {', '.join(k.name for k in KINDS)} "
                         "(optionally with ':<index>')")
    return kind


def offered() -> tuple[str, ...]:
    """The names of the kinds the command line and ONNX's backend offer."""
    return tuple(kind.name for kind in KINDS if kind.offered)


def gpu_kinds() -> frozenset[str]:
    """The names of the GPU kinds: TVM's targets, and its device modules' kinds, of the same names."""
    return frozenset(kind.name for kind in KINDS if kind.gpu)
