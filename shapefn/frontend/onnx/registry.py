"""The registry of shapefn's ONNX converters, which take over the operators
TVM's importer cannot take with runtime values (``importer.py`` consults it
before TVM's table). A converter is ``converter(importer, inputs, attrs,
opset)`` and returns a Relax expression, or ``NotImplemented`` to let TVM's
converter handle the node (when the values it needs are constants after
all). Each operator family's module under ``ops/`` registers its
converters when imported; ``ops/__init__`` imports every one.
"""
from __future__ import annotations

CONVERTERS: dict = {}


def converter(op_type: str, takes_scalars: bool = False):
    """Registers ``fn`` as the converter of ``op_type``. It receives shape
    values as shapes, and integer scalars (TVM's PrimValues) only with
    ``takes_scalars``; other inputs as tensors (``importer._converter_inputs``)."""
    def register(fn):
        if op_type in CONVERTERS:
            previous = CONVERTERS[op_type]
            raise ValueError(f"ONNX operator {op_type!r} already has a converter: "
                             f"{previous.__module__}.{previous.__qualname__}")
        fn.takes_scalars = takes_scalars
        CONVERTERS[op_type] = fn
        return fn

    return register


def tvm_converter(importer, op_type: str, inputs, attrs, opset):
    """TVM's own converter of ``op_type``."""
    from tvm.relax.frontend.onnx import onnx_frontend as tvm_onnx

    fn = tvm_onnx._get_convert_map()[op_type].get_converter(opset)
    return fn(importer.bb, inputs, attrs, [importer._nodes, importer._params])
