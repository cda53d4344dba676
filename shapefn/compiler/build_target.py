"""What a compile for one device derives from the device's name, once.

``shapefn.compile(mod, device)`` and the passes it runs need the device's
kind (``runtime/device_kinds.py``), the TVM target its kernels compile for,
whether those are GPU kernels, and where the VM places tensors: a
``BuildTarget`` carries them together, made in one place from the name."""
from __future__ import annotations

from dataclasses import dataclass

import tvm

from ..runtime import device_kinds
from .passes import placement
from .schedules import target_schedule


@dataclass(frozen=True)
class BuildTarget:
    #: The device's name as given ("sim", "opencl:1").
    device: str
    kind: device_kinds.DeviceKind
    #: The kernels' TVM target (with the host's LLVM target as its host).
    target: tvm.target.Target

    @classmethod
    def of(cls, device: str, target=None) -> BuildTarget:
        """The build for ``device``; ``target`` (a ``tvm.target.Target`` or
        its string) overrides the kernels' target the kind implies."""
        kind = device_kinds.kind_of(device)
        if target is not None:
            tvm_target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
        elif kind.gpu:
            tvm_target = tvm.target.Target(kind.name, host=target_schedule.host_target())
        else:
            tvm_target = target_schedule.host_target()
        return cls(device, kind, tvm_target)

    @property
    def gpu(self) -> bool:
        """The kernels are GPU kernels (threads, blocks, device memory)."""
        return target_schedule.is_gpu(self.target)

    @property
    def policy(self) -> placement.PlacementPolicy:
        """Where the VM keeps tensors and runs kernels."""
        return placement.policy_for(self.device)
