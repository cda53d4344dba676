"""Assembles VM programs by hand. Operand layouts come from the instruction
table in ``csrc/include/shapefn/isa.def`` (through ``_core.isa()``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from . import _core, kernel_cache
from .executable import Executable

_ISA: dict[str, str] = {name: operands for name, operands in _core.isa()}
_OPCODES: dict[str, int] = {name: i for i, (name, _) in enumerate(_core.isa())}
_DEVICES = {"host": 0, "device": 1, "any": -1}


@dataclass(frozen=True)
class Reg:
    index: int

    def __repr__(self) -> str:
        return f"%{self.index}"


class Label:
    """A jump target; ``FunctionBuilder.place(label)`` fixes where it is."""

    def __init__(self) -> None:
        self.position: int | None = None


@dataclass
class Param:
    """A function parameter: dtype, shape (ints fixed, strings symbolic), device.

    ``device="any"`` marks a parameter of an internal function that may hold
    any value (tensor on either device, shape, int, tuple); it is not checked."""

    name: str
    dtype: str
    shape: Sequence[int | str]
    device: str = "device"


class FunctionBuilder:
    """Emits one function. ``fb.<mnemonic>(*operands)`` emits an instruction;
    when the first operand is a destination register it may be left out and a
    fresh register is allocated and returned."""

    def __init__(self, program: "ProgramBuilder", name: str, params: Sequence[Param]):
        self._program = program
        self.name = name
        self.params = list(params)
        self.symbols: list[str] = []
        for p in self.params:
            for d in p.shape:
                if isinstance(d, str) and d not in self.symbols:
                    self.symbols.append(d)
        self._num_registers = len(self.params)
        self._instructions: list[tuple[str, list]] = []

    @property
    def args(self) -> list[Reg]:
        return [Reg(i) for i in range(len(self.params))]

    def reg(self) -> Reg:
        r = Reg(self._num_registers)
        self._num_registers += 1
        return r

    def place(self, label: Label) -> None:
        label.position = len(self._instructions)

    def emit(self, mnemonic: str, *operands):
        kinds = _ISA.get(mnemonic)
        if kinds is None:
            raise ValueError(f"unknown instruction '{mnemonic}'")
        operands = list(operands)
        result = None
        if kinds[0] == "r" and len(operands) == len(kinds) - 1:
            result = self.reg()
            operands.insert(0, result)
        if len(operands) != len(kinds):
            raise TypeError(f"'{mnemonic}' takes {len(kinds)} operands ({kinds}), got {len(operands)}")
        self._instructions.append((mnemonic, operands))
        return result

    def __getattr__(self, mnemonic: str):
        if mnemonic in _ISA:
            return lambda *operands: self.emit(mnemonic, *operands)
        raise AttributeError(mnemonic)

    # Shorthands for the common cases.
    def shape_func(self, op_name: str, inputs: Sequence[Reg], num_outputs: int = 1,
                   attrs: Sequence[int] = ()) -> list[Reg]:
        outs = [self.reg() for _ in range(num_outputs)]
        self.emit("invoke_shape_func", op_name, list(inputs), outs, list(attrs))
        return outs

    def readback(self, dsts: Sequence[Reg], srcs: Sequence[Reg], tensors: Sequence[bool] = ()) -> None:
        """Reads tensors ``srcs`` on the host, waiting on the device once:
        into each of ``dsts`` its values (an int for a 0-d tensor, else a
        shape), or, where ``tensors`` is true, the tensor itself on the host."""
        forms = [int(bool(t)) for t in tensors] if tensors else [0] * len(srcs)
        self.emit("readback", list(dsts), list(srcs), forms)

    def shape(self, dims: Sequence[int | Reg]) -> Reg:
        regs = [d if isinstance(d, Reg) else self.emit("load_int", int(d)) for d in dims]
        return self.emit("shape_make", regs)

    def _encode(self) -> list[int]:
        words: list[int] = []
        for mnemonic, operands in self._instructions:
            kinds = _ISA[mnemonic]
            words.append(_OPCODES[mnemonic])
            for kind, value in zip(kinds, operands):
                if kind == "R":
                    words.append(len(value))
                    words.extend(_reg(v) for v in value)
                elif kind == "I":
                    words.append(len(value))
                    words.extend(int(v) for v in value)
                else:
                    words.append(self._operand(kind, value))
        return words

    def _operand(self, kind: str, value) -> int:
        p = self._program
        if kind == "r":
            return _reg(value)
        if kind == "d":
            return _DEVICES[value] if isinstance(value, str) else int(value)
        if kind == "t":
            return _core.encode_dtype(str(np.dtype(value)) if not isinstance(value, str) else value)
        if kind == "k":
            return p._index(p._kernels, value)
        if kind == "s":
            return p._index(p._shape_funcs, value)
        if kind == "f":
            return p._index(p._function_names, value)
        if kind == "j":
            if not isinstance(value, Label) or value.position is None:
                raise ValueError(f"jump target {value!r} was never placed")
            return value.position
        return int(value)

    def _finish(self) -> dict:
        return {
            "name": self.name,
            "params": [
                {"name": p.name, "dtype": str(np.dtype(p.dtype)) if p.dtype != "bool" else "bool",
                 "dims": [d if isinstance(d, int) else -1 - self.symbols.index(d) for d in p.shape],
                 "device": _DEVICES[p.device]}
                for p in self.params
            ],
            "symbols": self.symbols,
            "num_registers": self._num_registers,
            "code": self._encode(),
        }


def _reg(value) -> int:
    if not isinstance(value, Reg):
        raise TypeError(f"expected a register, got {value!r}")
    return value.index


class ProgramBuilder:
    """Builds an Executable from functions, constants and kernels."""

    def __init__(self) -> None:
        self._functions: list[FunctionBuilder] = []
        self._function_names: list[str] = []
        self._constants: list[dict] = []
        self._kernels: list[str] = []
        self._kernel_funcs: dict = {}
        self._shape_funcs: list[str] = []

    @staticmethod
    def _index(table: list[str], name: str) -> int:
        if name not in table:
            table.append(name)
        return table.index(name)

    def function(self, name: str, params: Sequence[Param] = ()) -> FunctionBuilder:
        fb = FunctionBuilder(self, name, params)
        self._functions.append(fb)
        self._index(self._function_names, name)
        return fb

    def constant(self, value, device: str = "device") -> int:
        arr = np.asarray(value)
        if not arr.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            arr = arr.copy(order="C")
        self._constants.append({"dtype": str(arr.dtype), "shape": list(arr.shape),
                                "device": _DEVICES[device], "data": arr.tobytes()})
        return len(self._constants) - 1

    def kernel(self, name: str, func=None) -> str:
        """Declares kernel ``name``; ``func`` is its tvm_ffi.Function (else a
        global function of that name is used when the VM is created)."""
        self._index(self._kernels, name)
        if func is not None:
            self._kernel_funcs[name] = func
        return name

    def build(self, library=None, kernels: Mapping | None = None, *, library_path=None,
              default_dependence: str = "per-input") -> Executable:
        """Verifies and returns the executable. ``library`` is a TVM runtime
        module whose functions provide the kernels of the same names, and
        ``library_path`` its file (by default the kernel cache's file it was
        loaded from, if any)."""
        parts = [fb._finish() for fb in self._functions]  # declares the kernels it names
        funcs = dict(self._kernel_funcs)
        if library is not None:
            for name in self._kernels:
                if name not in funcs:
                    try:
                        funcs[name] = library[name]
                    except (AttributeError, KeyError, ValueError, RuntimeError):
                        pass
        funcs.update(kernels or {})
        core = _core.Executable.from_parts(parts, self._constants, self._kernels, self._shape_funcs, "")
        if library is not None and library_path is None:
            library_path = kernel_cache.file_of(library)  # saved by copying it
        return Executable(core, funcs, library, library_path=library_path, default_dependence=default_dependence)
