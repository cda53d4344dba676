"""What shapefn's ONNX converters read from the importer's values: constants
known at import time (``const_value``), shape values known as sizes
(``shape_values``), and the forms runtime values take as converter inputs.

Runtime values reach shape functions as tensors: shapes that TVM's importer
keeps as ``ShapeExpr`` become int64 tensors through ``shape_to_tensor``
(``as_tensor``), which shapefn's placement computes on the host.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax


def const_value(importer, expr) -> np.ndarray | None:
    """The value of ``expr`` if it is known at import time."""
    if expr is None:
        return None
    if isinstance(expr, tvm.ir.GenericConst) and isinstance(expr.ty, relax.TensorType):
        return expr.value.numpy()
    if isinstance(expr, relax.ShapeExpr) and all(isinstance(v, tvm.tirx.IntImm) for v in expr.values):
        return np.array([int(v) for v in expr.values], np.int64)
    if isinstance(expr, relax.Var):
        name = expr.name
        params = importer.params
        if name in params:
            return params[name][1].numpy()
    return None


def as_tensor(bb: relax.BlockBuilder, expr, dtype: str | None = None):
    """``expr`` as a tensor (shapes become int64 vectors, scalars 0-d
    tensors), cast to ``dtype``."""
    if isinstance(expr.ty, relax.ShapeType):
        expr = bb.emit(relax.op.shape_to_tensor(expr))
    elif isinstance(expr.ty, tvm.ir.PrimType):
        expr = prim_tensor(bb, expr)
    if dtype is not None and str(expr.ty.dtype) != dtype:
        expr = bb.emit(relax.op.astype(expr, dtype))
    return expr


_PRIM_BINARY = {"Add": relax.op.add, "Sub": relax.op.subtract, "Mul": relax.op.multiply,
                "Div": relax.op.divide, "Min": relax.op.minimum, "Max": relax.op.maximum}


def prim_tensor(bb: relax.BlockBuilder, value):
    """A scalar PrimExpr (TVM folds shape arithmetic into these) as a 0-d
    tensor of its dtype, computed with Relax ops (on the host, by placement)."""
    dtype = str(value.ty.dtype)
    if isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return relax.const(value.value, dtype)
    if dtype == "int64":
        vector = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr([value])))
        return bb.normalize(relax.op.reshape(vector, []))
    if isinstance(value, tvm.tirx.Cast):
        return bb.normalize(relax.op.astype(prim_tensor(bb, value.value), dtype))
    op = _PRIM_BINARY.get(type(value).__name__)
    if op is None:
        raise NotImplementedError(f"the scalar expression {value} cannot become a tensor")
    return bb.normalize(op(prim_tensor(bb, value.a), prim_tensor(bb, value.b)))


def absent(importer, expr) -> bool:
    """An optional input that is missing or an empty constant."""
    if expr is None:
        return True
    value = const_value(importer, expr)
    return value is not None and value.size == 0


def ndim_of(expr) -> int:
    """The rank of a tensor expression; a shape counts as a 1-D tensor."""
    ty = expr.ty
    if isinstance(ty, relax.ShapeType):
        return 1
    if ty.ndim < 0:
        raise ValueError(f"the rank of {expr} is unknown")
    return ty.ndim


def static_length(expr) -> int:
    """Static length of a 1-D tensor or shape."""
    ty = expr.ty
    if isinstance(ty, relax.ShapeType):
        return ty.ndim
    if ty.shape is None or not isinstance(ty.shape.values[0], tvm.tirx.IntImm):
        raise ValueError(f"the length of {expr} must be static")
    return int(ty.shape.values[0])


def str_attr(value, default: str) -> str:
    """A string attribute of an ONNX node (bytes decoded), ``default`` if absent."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def onnx_numpy(tensor_proto) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor_proto)


def shape_values(importer, expr, depth: int = 12) -> list | None:
    """The values of a 1-D int64 shape known at import time, symbolic or
    not: a shape, a constant, or a tensor made of those (``shape_to_tensor``,
    ``concat``: what ``Concat(Shape(x)[i], ...)`` imports as), or computed
    from known numbers alone (``_known_numbers``: ONNX Attention's grouped
    heads' repeat count, a ``Where`` of a ``Div`` of head counts)."""
    if isinstance(expr, relax.ShapeExpr):
        return list(expr.values)
    value = const_value(importer, expr)
    if value is None:
        value = _known_numbers(importer, expr, depth)
    if value is not None:
        if value.ndim != 1 or value.dtype != np.int64:
            return None
        return [tvm.tirx.IntImm("int64", int(v)) for v in value]
    bound = importer.bb.lookup_binding(expr) if isinstance(expr, relax.Var) and depth > 0 else None
    op = getattr(getattr(bound, "op", None), "name", None)
    if op == "relax.shape_to_tensor":
        return shape_values(importer, bound.args[0], depth - 1)
    if op == "relax.concat" and isinstance(bound.args[0], relax.Tuple) and int(bound.attrs.axis or 0) == 0:
        parts = [shape_values(importer, part, depth - 1) for part in bound.args[0].fields]
        return None if any(p is None for p in parts) else [v for p in parts for v in p]
    return None


# Elementwise ops on small integer and bool tensors that ``_known_numbers``
# evaluates, as numpy computes them (ONNX's Div of integers truncates; the
# operands here are head counts, positive).
_NUMPY_OPS = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
              "relax.divide": np.floor_divide, "relax.floor_divide": np.floor_divide, "relax.floor_mod": np.mod,
              "relax.equal": np.equal, "relax.not_equal": np.not_equal, "relax.less": np.less,
              "relax.greater": np.greater, "relax.logical_and": np.logical_and, "relax.logical_or": np.logical_or,
              "relax.logical_not": np.logical_not, "relax.where": np.where}


def _known_numbers(importer, expr, depth: int) -> np.ndarray | None:
    """The value of integer or bool tensor ``expr`` where it is computed
    from constants and static sizes alone (None otherwise)."""
    value = const_value(importer, expr)
    if value is not None:
        return value
    if isinstance(expr, relax.ShapeExpr):
        known = all(isinstance(v, tvm.tirx.IntImm) for v in expr.values)
        return np.array([int(v) for v in expr.values], np.int64) if known else None
    bound = importer.bb.lookup_binding(expr) if isinstance(expr, relax.Var) and depth > 0 else None
    op = getattr(getattr(bound, "op", None), "name", None)
    if op == "relax.shape_to_tensor":
        return _known_numbers(importer, bound.args[0], depth - 1)
    if op == "relax.astype":
        value = _known_numbers(importer, bound.args[0], depth - 1)
        return None if value is None else value.astype(str(bound.attrs.dtype))
    if op in _NUMPY_OPS:
        args = [_known_numbers(importer, a, depth - 1) for a in bound.args]
        if any(a is None or a.dtype.kind not in "biu" or a.size > 64 for a in args):
            return None
        if op in ("relax.divide", "relax.floor_mod") and not (np.all(args[0] >= 0) and np.all(args[1] > 0)):
            return None  # (ONNX's integer Div truncates: equal to floor division only for positive operands)
        return np.asarray(_NUMPY_OPS[op](*args))
    return None

