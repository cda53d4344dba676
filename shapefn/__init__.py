"""shapefn: a runtime for dynamic-shape models on heterogeneous hardware.

Shape functions declare data dependence per input, so the VM copies to the
host only the values a shape function reads, never whole data tensors.
"""
# The extensions link libtvm_ffi and TVM's libtvm_runtime; loading them
# first lets the extensions find them wherever the packages are installed.
import tvm as _tvm  # noqa: F401
import tvm_ffi as _tvm_ffi  # noqa: F401

from . import ops
from .builder import Label, Param, ProgramBuilder, Reg
from .compiler.compile import compile
from .compiler.shape_calls import emit_extern
from .config import cache_dir, set_cache_dir
from .devices import (
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
from .errors import DataDependenceError, ExecutableFormatError, InvalidOnnxModel, OverDeclaredWarning, UnsupportedOnnxOp
from .executable import Executable
from .profiler import ProfileReport
from .registry import data_dependence, register_shape_func, registered_ops, shape_func_info
from .vm import Tensor, VirtualMachine

__version__ = "0.1.0"


def from_onnx(model, shape_dict=None, sequence_lengths=None):
    """Imports an ONNX model (a ``ModelProto`` or a path) as a Relax module
    for ``shapefn.compile``; see ``shapefn.frontend.onnx``."""
    from .frontend import from_onnx as _from_onnx

    return _from_onnx(model, shape_dict, sequence_lengths)


__all__ = [
    "DataDependenceError", "Device", "Executable", "ExecutableFormatError", "InvalidOnnxModel", "Label",
    "OverDeclaredWarning", "Param", "ProfileReport", "ProgramBuilder", "Reg", "Tensor", "VirtualMachine",
    "cache_dir", "compile", "data_dependence", "device", "device_counters", "emit_extern", "from_onnx", "list_devices",
    "opencl_devices", "opencl_unavailable_reason", "register_shape_func", "registered_ops", "reset_device_counters",
    "ops", "set_cache_dir", "shape_func_info", "sim", "tvm_device_exists", "UnsupportedOnnxOp",
]
