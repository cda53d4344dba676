"""ONNX's backend interface (``onnx.backend.base``) over shapefn: a model is
imported (``shapefn.frontend.from_onnx``), compiled for a shapefn device and
run on shapefn's VM. ONNX's conformance suite runs through it::

    import onnx.backend.test
    import shapefn.frontend.onnx.backend
    globals().update(onnx.backend.test.BackendTest(shapefn.frontend.onnx.backend, __name__).test_cases)

ONNX names devices ``"CPU"`` and ``"CUDA"``. ``"CPU"`` runs on
``shapefn.frontend.onnx.backend.DEVICE`` (``"sim"``, the modelled accelerator, unless
changed to ``"host"`` or ``"opencl"``); ``prepare``/``run_model`` also take
a shapefn device name as ``device``. ``"CUDA"`` runs on ``"cuda"``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ...compiler.compile import compile as _compile
from ...runtime import device_kinds
from ...runtime.devices import sim, tvm_device_exists
from ...runtime.vm import VirtualMachine
from .. import from_onnx
from .sequence_inputs import is_sequence, sequence_inputs

__all__ = ["DEVICE", "ShapefnBackend", "ShapefnRep", "prepare", "run_model", "run_node", "supports_device"]

# What ONNX's "CPU" device runs on.
DEVICE = "sim"
_SHAPEFN_DEVICES = device_kinds.offered()


def _device(device: str) -> str:
    name = str(device)
    kind = name.split(":")[0].upper()
    if kind == "CPU":
        return DEVICE
    if kind == "CUDA":
        return "cuda"
    if name in _SHAPEFN_DEVICES:
        return name
    raise ValueError(f"device {device!r}: expected 'CPU', 'CUDA' or one of {', '.join(_SHAPEFN_DEVICES)}")


class ShapefnRep(BackendRep):
    """A model compiled for one device; ``run`` takes its inputs (a list in
    the graph's order, or a mapping by name; a list of arrays for a sequence)
    and returns its outputs as numpy arrays (a list of them for a sequence),
    in the graph's order. A model with sequence inputs is compiled at its
    first run for the lengths of the sequences given, and again for other
    lengths."""

    def __init__(self, model: onnx.ModelProto, device: str):
        self.device = device
        self.model = model
        initializers = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in model.graph.output]
        self._sequences = [is_sequence(o) for o in model.graph.output]
        self._sequence_inputs = set(sequence_inputs(model))
        self._compiled: dict[tuple, VirtualMachine] = {}
        if not self._sequence_inputs:
            self._vm_for({})  # (compiled now: a model without sequence inputs has one form)

    def _vm_for(self, lengths: dict[str, int]) -> VirtualMachine:
        key = tuple(sorted(lengths.items()))
        if key not in self._compiled:
            executable = _compile(from_onnx(self.model, sequence_lengths=lengths), self.device)
            self._compiled[key] = VirtualMachine(executable, sim() if self.device == "sim" else self.device)
        return self._compiled[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise ValueError(f"inputs missing: {', '.join(missing)} (the model takes {self.input_names})")
            args = [inputs[n] for n in self.input_names]
        else:
            args = list(inputs) if isinstance(inputs, Sequence) else [inputs]
            if len(args) != len(self.input_names):
                raise ValueError(f"the model takes {len(self.input_names)} inputs {self.input_names}, "
                                 f"got {len(args)}")
        lengths, flat = {}, []
        for name, value in zip(self.input_names, args, strict=True):
            if name in self._sequence_inputs:
                if not isinstance(value, Sequence) or isinstance(value, str):
                    raise TypeError(f"input {name!r} is a sequence: give a list of arrays, got {type(value).__name__}")
                lengths[name] = len(value)
                flat.extend(np.asarray(v) for v in value)
            elif value is None:
                raise TypeError(f"input {name!r} is None (an absent optional input): shapefn runs models with "
                                "every input given")
            else:
                flat.append(np.asarray(value))
        outputs = self._vm_for(lengths)(*flat)
        outputs = [outputs] if len(self.output_names) == 1 else outputs
        return tuple([t.numpy() for t in (o if isinstance(o, list | tuple) else [o])] if sequence else o.numpy()
                     for o, sequence in zip(outputs, self._sequences, strict=True))


class ShapefnBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> ShapefnRep:
        return ShapefnRep(model, _device(device))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether ``device`` names a device shapefn runs on and, for a GPU
        ("CUDA", "opencl"), this machine has one (ONNX's runner skips the
        cases of a device this returns False for)."""
        try:
            name = _device(device)
        except ValueError:
            return False
        return name in ("sim", "host") or tvm_device_exists(name)


prepare = ShapefnBackend.prepare
run_model = ShapefnBackend.run_model
run_node = ShapefnBackend.run_node
supports_device = ShapefnBackend.supports_device
