"""shapefn's ONNX converters for the operators that make, reshape and join
tensors of shape values — Reshape, Expand, Constant, ConstantOfShape,
Tile, Range, Squeeze, Size, Unsqueeze and Concat — where TVM's converters
need the values at import time: sizes known only at run time go to the
shape functions (as int64 tensors the host computes), and sizes known at
import time stay expressions of the inputs' sizes.
"""
from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm import relax, sym

from ....compiler import ops
from ....compiler.shape_calls import emit_shape
from ..registry import converter, tvm_converter
from ..sizes import infer_minus_one, is_int
from ..values import as_tensor, const_value, ndim_of, onnx_numpy, shape_values, static_length


@converter("Reshape")
def reshape(importer, inputs, attrs, opset):
    bb = importer.bb
    data, shape = as_tensor(bb, inputs[0]), inputs[1]
    known_shape = isinstance(data.ty, relax.TensorType) and data.ty.shape is not None
    if isinstance(shape, relax.ShapeExpr) and known_shape and not attrs.get("allowzero", 0):
        # ONNX: a literal 0 copies the input's dimension (Relax would read it as 0).
        dims = data.ty.shape.values
        shape = relax.ShapeExpr([dims[i] if is_int(v, 0) and i < len(dims) else v
                                 for i, v in enumerate(shape.values)])
    values = shape_values(importer, shape)
    inferred = infer_minus_one(data, values) if values is not None and known_shape else None
    if inferred is not None:
        values, shape = inferred, relax.ShapeExpr(inferred)
    if values is not None and (isinstance(shape, relax.ShapeExpr) or known_shape) and _keeps_count(data, values):
        return tvm_converter(importer, "Reshape", [data, shape], attrs, opset)
    # (sizes known only at run time, or a count that may differ: the shape
    # function computes the shape and refuses a count that differs)
    shape = as_tensor(bb, shape, "int64")
    (dims,) = emit_shape(bb, "relax.reshape", [data, shape], [static_length(shape)], [attrs.get("allowzero", 0)],
                         prefix="reshape")
    return relax.op.reshape(data, relax.ShapeExpr(dims))


def _keeps_count(data, values) -> bool:
    """False where reshaping ``data`` to the literal sizes ``values`` may
    change its element count (sizes of the data known only at run time):
    TVM's reshape and shapefn's VM would give the data's first elements
    (found by fuzzing). Symbolic targets pass: their counts are often equal
    in ways the analyzer cannot prove (a slice's rounded extents)."""
    ty = data.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None \
            or not all(isinstance(v, tvm.tirx.IntImm) and v.value >= 0 for v in values):
        return True
    count = functools.reduce(lambda a, b: a * b, ty.shape.values, tvm.tirx.IntImm("int64", 1))
    target = functools.reduce(lambda a, b: a * b, values, tvm.tirx.IntImm("int64", 1))
    return sym.Analyzer().can_prove_equal(count, target)


@converter("Expand")
def expand(importer, inputs, attrs, opset):
    """ONNX Expand broadcasts both ways (numpy rules), also from dimensions
    that are 1 only at run time — the shape function computes the result,
    unless every dimension of it is decided at import time (the shape is
    known, e.g. ``Shape(y)``): sizes from a shape function are fresh
    variables, and kernels indexing with them compile slowly."""
    bb = importer.bb
    data = inputs[0]
    static = _static_broadcast(data, shape_values(importer, inputs[1]))
    if static is not None:
        return relax.op.broadcast_to(data, relax.ShapeExpr(static))
    shape = as_tensor(bb, inputs[1], "int64")
    ndim = max(ndim_of(data), static_length(shape))
    (dims,) = emit_shape(bb, "relax.broadcast_to", [data, shape], [ndim], [1], prefix="expand")
    return relax.op.broadcast_to(data, relax.ShapeExpr(dims))


def _static_broadcast(data, values) -> list | None:
    """Expand's result shape if each dimension is decided at import time
    (one side is literally 1, or both are the same size), else None."""
    ty = data.ty
    if values is None or not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    dims = list(ty.shape.values)
    ndim = max(len(dims), len(values))
    one = tvm.tirx.IntImm("int64", 1)
    dims = [one] * (ndim - len(dims)) + dims
    values = [one] * (ndim - len(values)) + values
    analyzer = sym.Analyzer()
    out = []
    for d, v in zip(dims, values):
        if isinstance(v, tvm.tirx.IntImm) and v.value < 0:
            return None
        if is_int(v, 1) or analyzer.can_prove_equal(d, v):
            out.append(d)
        elif is_int(d, 1):
            out.append(v)
        else:
            return None
    return out


# Constant's scalar and list forms (TVM's converter reads only ``value``);
# ONNX's function bodies use them for their attributes (Celu's alpha).
_CONSTANT_FORMS = {"value_float": "float32", "value_floats": "float32", "value_int": "int64", "value_ints": "int64"}


@converter("Constant")
def constant(importer, inputs, attrs, opset):
    form = next((name for name in _CONSTANT_FORMS if name in attrs), None)
    if form is None:
        return NotImplemented  # (TVM's converter: ``value``)
    value = np.asarray(attrs[form], _CONSTANT_FORMS[form])
    return relax.const(value.reshape(-1) if form.endswith("s") else value.reshape(()), str(value.dtype))


@converter("ConstantOfShape")
def constant_of_shape(importer, inputs, attrs, opset):
    shape = inputs[0]
    bb = importer.bb
    value = attrs.get("value")
    fill = onnx_numpy(value) if value is not None else np.zeros(1, np.float32)
    fill_const = relax.const(fill.reshape(()), str(fill.dtype))
    known = const_value(importer, shape)
    if known is not None:
        return relax.op.full(relax.ShapeExpr([int(d) for d in known]), fill_const, str(fill.dtype))
    if isinstance(shape, relax.ShapeExpr):
        return relax.op.full(shape, fill_const, str(fill.dtype))
    shape = as_tensor(bb, shape, "int64")
    (dims,) = emit_shape(bb, "relax.full", [fill_const, shape], [static_length(shape)], prefix="full")
    return relax.op.full(relax.ShapeExpr(dims), fill_const, str(fill.dtype))


@converter("Tile")
def tile(importer, inputs, attrs, opset):
    repeats = inputs[1]
    if const_value(importer, repeats) is not None:
        return NotImplemented
    return ops.tile(importer.bb, inputs[0], as_tensor(importer.bb, repeats, "int64"))


@converter("Range", takes_scalars=True)
def range_(importer, inputs, attrs, opset):
    if all(const_value(importer, v) is not None for v in inputs):
        return NotImplemented
    bb = importer.bb
    dtype = str(inputs[0].ty.dtype) if isinstance(inputs[0].ty, relax.TensorType) else "int64"
    start, limit, delta = (as_tensor(bb, v, dtype) for v in inputs)
    if dtype == "float16":
        # Shape functions take no half-precision values: the length
        # (ONNX's max(ceil((limit - start) / delta), 0)) is computed in
        # half precision, then given as a float32 range 0..length.
        length = relax.op.ceil(relax.op.divide(relax.op.subtract(limit, start), delta))
        length = bb.emit(relax.op.astype(relax.op.maximum(length, relax.const(0, "float16")), "float32"))
        return ops.arange(bb, relax.const(0, "float32"), length, relax.const(1, "float32"), dtype,
                          values=(start, delta))
    return ops.arange(bb, start, limit, delta, dtype)


@converter("Squeeze")
def squeeze(importer, inputs, attrs, opset):
    """Squeeze of axes whose extent is 1 at run time but not provably so at
    import time (``min(1, h * w)``): the data is cast to a shape with a
    literal 1 there first."""
    data = inputs[0]
    ty = data.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return NotImplemented
    if opset >= 13 and len(inputs) > 1 and inputs[1] is not None:
        axes = const_value(importer, inputs[1])
        if axes is None:
            return NotImplemented
        axes = [int(a) for a in axes]
    else:
        axes = list(attrs.get("axes", []))
    dims = list(ty.shape.values)
    if not axes:
        return NotImplemented
    axes = [a + len(dims) if a < 0 else a for a in axes]
    if all(isinstance(dims[a], tvm.tirx.IntImm) for a in axes):
        return NotImplemented
    dims = [tvm.tirx.IntImm("int64", 1) if i in axes else d for i, d in enumerate(dims)]
    cast = importer.bb.match_cast(data, relax.TensorType(dims, ty.dtype))
    return tvm_converter(importer, "Squeeze", [cast, *inputs[1:]], attrs, opset)


@converter("Size")
def size(importer, inputs, attrs, opset):
    """The element count of a tensor whose sizes are literals, as a constant:
    a condition on it folds (ONNX's AffineGrid body tests ``Size(size) == 4``
    and imports one branch)."""
    ty = inputs[0].ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None \
            or not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return NotImplemented
    return relax.const(int(np.prod([int(d) for d in ty.shape.values])), "int64")


@converter("Unsqueeze", takes_scalars=True)
def unsqueeze(importer, inputs, attrs, opset):
    """Unsqueeze whose axes are a constant scalar, as a list of one (ONNX's
    reference takes it, and ONNX's AffineGrid body gives one; TVM's converter
    needs a list)."""
    axes = const_value(importer, inputs[1]) if opset >= 13 and len(inputs) > 1 else None
    if axes is None or axes.ndim != 0:
        return NotImplemented
    data = as_tensor(importer.bb, inputs[0]) if isinstance(inputs[0].ty, relax.ShapeType) else inputs[0]
    return tvm_converter(importer, "Unsqueeze", [data, relax.const(axes.reshape(1), "int64")], attrs, opset)


@converter("Concat", takes_scalars=True)
def concat(importer, inputs, attrs, opset):
    """Concat where shape values (kept by TVM as shapes or scalars) meet
    tensors. With constant int64 vectors only, the result is a shape
    (``[N, -1, 4, H, W]`` for a Reshape), whose sizes stay expressions of
    the inputs' sizes: a tensor would make its consumer's sizes fresh
    variables from a shape function. With runtime tensors, all become 1-D
    int64 tensors."""
    values = [v for v in inputs if v is not None]
    kinds = {type(v.ty).__name__ for v in values}
    if "TensorType" not in kinds:
        return NotImplemented
    if kinds == {"TensorType"}:
        return _concat_tensors(importer, values, attrs, opset)
    shape = _concat_shape(importer, values)
    if shape is not None:
        return shape
    bb = importer.bb
    tensors = []
    for v in values:
        if isinstance(v.ty, tvm.ir.PrimType):
            v = bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([v])))
        else:
            v = as_tensor(bb, v)
        if v.ty.ndim == 0:
            v = bb.emit(relax.op.reshape(v, [1]))
        tensors.append(v)
    return relax.op.concat(tensors, attrs.get("axis", 0))


def _concat_tensors(importer, tensors, attrs, opset):
    """Concat of tensors whose other sizes are equal only at run time (a
    count from NonZero beside one from TopK): Relax then knows only the
    rank; the result gets the sizes ONNX implies — literals where any input
    has one (GatherND needs its index tuples' length), the first input's
    otherwise, the sum along the axis."""
    bb = importer.bb
    result = bb.normalize(tvm_converter(importer, "Concat", tensors, attrs, opset))
    ty = result.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is not None or ty.ndim < 1 \
            or any(t.ty.shape is None or t.ty.ndim != ty.ndim for t in tensors):
        return result
    axis = attrs.get("axis", 0) % ty.ndim
    shapes = [list(t.ty.shape.values) for t in tensors]
    dims = []
    for i in range(ty.ndim):
        column = [shape[i] for shape in shapes]
        if i == axis:
            dims.append(sum(column[1:], column[0]))
        else:
            dims.append(next((d for d in column if isinstance(d, tvm.tirx.IntImm)), column[0]))
    return bb.match_cast(bb.emit(result), relax.TensorType(dims, ty.dtype))


def _concat_shape(importer, values) -> relax.ShapeExpr | None:
    """Shapes, int64 scalars and constant int64 vectors concatenated as one
    shape; None when a piece is a runtime tensor."""
    dims = []
    for v in values:
        if isinstance(v.ty, tvm.ir.PrimType) and str(v.ty.dtype) == "int64":
            dims.append(v)
            continue
        piece = shape_values(importer, v)
        if piece is None:
            return None
        dims.extend(piece)
    return relax.ShapeExpr(dims)
