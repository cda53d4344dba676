"""The virtual machine, as Python sees it."""
from __future__ import annotations

from . import _core, _vmcall, devices
from .executable import Executable

Tensor = _vmcall.Tensor


class VirtualMachine:
    """Runs an Executable on ``device`` ("sim", "host", a TVM device name, or
    a ``shapefn.Device``).

    ``dependence="per-input"`` (the executable's default unless given) copies to the host only the inputs
    whose values a shape function reads; ``"per-op"`` copies every input of an
    op with a data-dependent shape function whole, for comparison.
    ``max_instructions`` (0: none) bounds the instructions one call may run;
    a call past it raises ``RuntimeError``. Ctrl-C interrupts a running call.
    """

    def __init__(self, exe: Executable, device="sim", *, dependence: str | None = None,
                 max_instructions: int = 0):
        if not isinstance(exe, Executable):
            raise TypeError(f"expected a shapefn.Executable, got {type(exe).__name__}")
        self.executable = exe
        self.device = devices.device(device)
        dependence = dependence or exe.default_dependence
        self._vm = _core.VirtualMachine(exe._core, self.device, dependence, exe._kernels, max_instructions)
        self._address = self._vm._address()
        self.dependence = dependence

    def __getitem__(self, name: str):
        index = self._vm.function_index(name)
        address = self._address
        invoke = _vmcall.invoke

        def call(*args):
            return invoke(address, index, args)

        call.__name__ = name
        return call

    def __call__(self, *args):
        return self["main"](*args)

    def invoke(self, name: str, *args):
        return self[name](*args)

    @property
    def counters(self) -> dict:
        """Counters of calls since creation or the last ``reset_counters()``."""
        return self._vm.counters()

    @property
    def constant_counters(self) -> dict:
        """What uploading the constants cost, once, at creation."""
        return self._vm.constant_counters()

    def reset_counters(self) -> None:
        self._vm.reset_counters()

    def pool_high_water_bytes(self, device: str = "device") -> int:
        return self._vm.pool_high_water_bytes(0 if device == "host" else 1)
