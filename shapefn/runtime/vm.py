"""The virtual machine, as Python sees it."""
from __future__ import annotations

from .. import _core, _vmcall
from . import devices, host_threads
from .executable import Executable
from .profiler import ProfileReport

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
        host_threads.pool_threads()  # (kernels' parallel loops on every CPU: host_threads.py)
        self._vm = _core.VirtualMachine(exe._core, self.device, dependence, exe._kernels, max_instructions)
        self._address = self._vm._address()
        self._functions: dict[str, _vmcall.Function] = {}  # looked up once: a lookup costs more than a call
        self.dependence = dependence

    def __getitem__(self, name: str):
        function = self._functions.get(name)
        if function is None:
            # The Function keeps the C++ VM alive: its address is valid while it lives.
            function = _vmcall.Function(self._vm, self._address, self._vm.function_index(name), name)
            self._functions[name] = function
        return function

    def __call__(self, *args):
        return self["main"](*args)

    def invoke(self, name: str, *args):
        return self[name](*args)

    def profile(self, *args, name: str = "main") -> ProfileReport:
        """Runs function ``name`` once on ``args``, timing every kernel call,
        shape function, copy, sync and allocation; returns a ``ProfileReport``
        (its ``outputs`` are the call's results). The call counts in
        ``counters`` like any other; later calls are not profiled."""
        profiler = _core.Profiler()
        outputs = _vmcall.invoke_profiled(self._address, self._vm.function_index(name), args,
                                          profiler._address())
        return ProfileReport._from_profiler(profiler, outputs, {"dependence": self.dependence})

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
