"""shapefn: a runtime for dynamic-shape models on heterogeneous hardware.

Shape functions declare data dependence per input, so the VM copies to the
host only the values a shape function reads, never whole data tensors.

Each public name is imported from its module on first use: loading and
running a saved executable imports the runtime alone, not the compiler, the
frontends or TVM's Python package (``docs/architecture.md``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .runtime import native as _native  # noqa: F401  (loads the libraries the extensions link)

__version__ = "0.1.0"

# Each public name -> the module (under shapefn) that defines it.
_PUBLIC = {
    **dict.fromkeys(["Label", "Param", "ProgramBuilder", "Reg"], "runtime.builder"),
    **dict.fromkeys(["cache_dir", "set_cache_dir"], "runtime.config"),
    **dict.fromkeys(["Device", "device", "device_counters", "list_devices", "opencl_devices",
                     "opencl_unavailable_reason", "reset_device_counters", "sim", "tvm_device_exists"],
                    "runtime.devices"),
    **dict.fromkeys(["DataDependenceError", "ExecutableFormatError", "InvalidOnnxModel", "OverDeclaredWarning",
                     "UnsupportedOnnxOp"], "runtime.errors"),
    "Executable": "runtime.executable",
    "ProfileReport": "runtime.profiler",
    **dict.fromkeys(["data_dependence", "registered_ops", "shape_func_info"], "runtime.registry"),
    **dict.fromkeys(["Tensor", "VirtualMachine"], "runtime.vm"),
    "compile": "compiler.compile",
    "emit_extern": "compiler.shape_calls",
    "register_shape_func": "compiler.shape_funcs.registry",
    "from_onnx": "frontend.onnx",
}
# Public modules: shapefn.ops (Relax builders for data-dependent ops) and the layers.
_MODULES = {"ops": "compiler.ops", "runtime": "runtime", "compiler": "compiler", "frontend": "frontend",
            "bench": "bench"}

__all__ = [
    "DataDependenceError", "Device", "Executable", "ExecutableFormatError", "InvalidOnnxModel", "Label",
    "OverDeclaredWarning", "Param", "ProfileReport", "ProgramBuilder", "Reg", "Tensor", "VirtualMachine",
    "cache_dir", "compile", "data_dependence", "device", "device_counters", "emit_extern", "from_onnx", "list_devices",
    "opencl_devices", "opencl_unavailable_reason", "register_shape_func", "registered_ops", "reset_device_counters",
    "ops", "set_cache_dir", "shape_func_info", "sim", "tvm_device_exists", "UnsupportedOnnxOp",
]


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    elif name in _MODULES:
        value = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_MODULES})


if TYPE_CHECKING:
    from .compiler import ops
    from .compiler.compile import compile
    from .compiler.shape_calls import emit_extern
    from .compiler.shape_funcs.registry import register_shape_func
    from .frontend.onnx import from_onnx
    from .runtime.builder import Label, Param, ProgramBuilder, Reg
    from .runtime.config import cache_dir, set_cache_dir
    from .runtime.devices import (
        Device,
        device,
        device_counters,
        list_devices,
        opencl_devices,
        opencl_unavailable_reason,
        reset_device_counters,
        sim,
        tvm_device_exists,
    )
    from .runtime.errors import (
        DataDependenceError,
        ExecutableFormatError,
        InvalidOnnxModel,
        OverDeclaredWarning,
        UnsupportedOnnxOp,
    )
    from .runtime.executable import Executable
    from .runtime.profiler import ProfileReport
    from .runtime.registry import data_dependence, registered_ops, shape_func_info
    from .runtime.vm import Tensor, VirtualMachine
