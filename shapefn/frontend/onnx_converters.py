"""shapefn's ONNX converters, for ops TVM's importer cannot take with
runtime values. Each is ``converter(importer, inputs, attrs, opset)`` and
returns a Relax expression, or ``NotImplemented`` to let TVM's converter
handle the node (when the values it needs are constants after all).

Runtime values reach shape functions as tensors: shapes that TVM's importer
keeps as ``ShapeExpr`` become int64 tensors through ``shape_to_tensor``,
which shapefn's placement computes on the host.
"""
from __future__ import annotations

import functools

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, sym

from .. import ops
from ..compiler.shape_calls import emit_shape
from .onnx_sizes import infer_minus_one

CONVERTERS: dict = {}


def converter(op_type: str, takes_scalars: bool = False):
    """Registers ``fn`` as the converter of ``op_type``. It receives shape
    values as shapes, and integer scalars (TVM's PrimValues) only with
    ``takes_scalars``; other inputs as tensors (``onnx._converter_inputs``)."""
    def register(fn):
        if op_type in CONVERTERS:
            previous = CONVERTERS[op_type]
            raise ValueError(f"ONNX operator {op_type!r} already has a converter: "
                             f"{previous.__module__}.{previous.__qualname__}")
        fn.takes_scalars = takes_scalars
        CONVERTERS[op_type] = fn
        return fn

    return register


# ---- helpers -------------------------------------------------------------------
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
        params = importer._params
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


def _absent(importer, expr) -> bool:
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


def _length(expr) -> int:
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


# ---- converters -----------------------------------------------------------------
@converter("Reshape")
def reshape(importer, inputs, attrs, opset):
    bb = importer.bb
    data, shape = as_tensor(bb, inputs[0]), inputs[1]
    known_shape = isinstance(data.ty, relax.TensorType) and data.ty.shape is not None
    if isinstance(shape, relax.ShapeExpr) and known_shape and not attrs.get("allowzero", 0):
        # ONNX: a literal 0 copies the input's dimension (Relax would read it as 0).
        dims = data.ty.shape.values
        shape = relax.ShapeExpr([dims[i] if _is_int(v, 0) and i < len(dims) else v
                                 for i, v in enumerate(shape.values)])
    values = _shape_values(importer, shape)
    inferred = infer_minus_one(data, values) if values is not None and known_shape else None
    if inferred is not None:
        values, shape = inferred, relax.ShapeExpr(inferred)
    if values is not None and (isinstance(shape, relax.ShapeExpr) or known_shape) and _keeps_count(data, values):
        return tvm_converter(importer, "Reshape", [data, shape], attrs, opset)
    # (sizes known only at run time, or a count that may differ: the shape
    # function computes the shape and refuses a count that differs)
    shape = as_tensor(bb, shape, "int64")
    (dims,) = emit_shape(bb, "relax.reshape", [data, shape], [_length(shape)], [attrs.get("allowzero", 0)],
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
    static = _static_broadcast(data, _shape_values(importer, inputs[1]))
    if static is not None:
        return relax.op.broadcast_to(data, relax.ShapeExpr(static))
    shape = as_tensor(bb, inputs[1], "int64")
    ndim = max(ndim_of(data), _length(shape))
    (dims,) = emit_shape(bb, "relax.broadcast_to", [data, shape], [ndim], [1], prefix="expand")
    return relax.op.broadcast_to(data, relax.ShapeExpr(dims))


def _shape_values(importer, expr, depth: int = 12) -> list | None:
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
        return _shape_values(importer, bound.args[0], depth - 1)
    if op == "relax.concat" and isinstance(bound.args[0], relax.Tuple) and int(bound.attrs.axis or 0) == 0:
        parts = [_shape_values(importer, part, depth - 1) for part in bound.args[0].fields]
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


def _is_int(value, n: int) -> bool:
    return isinstance(value, tvm.tirx.IntImm) and value.value == n


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
        if _is_int(v, 1) or analyzer.can_prove_equal(d, v):
            out.append(d)
        elif _is_int(d, 1):
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
    (dims,) = emit_shape(bb, "relax.full", [fill_const, shape], [_length(shape)], prefix="full")
    return relax.op.full(relax.ShapeExpr(dims), fill_const, str(fill.dtype))


def onnx_numpy(tensor_proto) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor_proto)


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


@converter("TopK")
def topk(importer, inputs, attrs, opset):
    if opset < 10 or const_value(importer, inputs[1]) is not None:
        return NotImplemented
    bb = importer.bb
    values, indices = ops.topk(bb, inputs[0], as_tensor(bb, inputs[1], "int64"), axis=attrs.get("axis", -1),
                               largest=bool(attrs.get("largest", 1)), sorted=True)
    return relax.Tuple([values, indices])


def tvm_converter(importer, op_type: str, inputs, attrs, opset):
    """TVM's own converter of ``op_type``."""
    from tvm.relax.frontend.onnx import onnx_frontend as tvm_onnx

    fn = tvm_onnx._get_convert_map()[op_type].get_converter(opset)
    return fn(importer.bb, inputs, attrs, [importer._nodes, importer._params])


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
        piece = _shape_values(importer, v)
        if piece is None:
            return None
        dims.extend(piece)
    return relax.ShapeExpr(dims)


@converter("Clip")
def clip(importer, inputs, attrs, opset):
    """Clip as Relax's maximum and minimum, which shapefn legalizes keeping
    NaN as onnxruntime does; TVM's converter emits TVM's kernels for them
    while importing (NaN became a bound: found by fuzzing). A NaN bound is
    no bound, as in TVM's converter and onnxruntime."""
    bb = importer.bb
    data = as_tensor(bb, inputs[0])
    dtype = str(data.ty.dtype)
    if opset < 11:
        bounds = [None if attrs.get(name) is None else relax.const(float(attrs[name]), dtype)
                  for name in ("min", "max")]
    else:
        bounds = [inputs[i] if len(inputs) > i else None for i in (1, 2)]
    result = data
    for bound, op, unbounded in zip(bounds, (relax.op.maximum, relax.op.minimum), (-np.inf, np.inf)):
        if bound is None:
            continue
        bound = as_tensor(bb, bound, dtype)
        if "float" in dtype:
            bound = bb.normalize(relax.op.where(relax.op.isnan(bound), relax.const(unbounded, dtype), bound))
        result = bb.normalize(op(result, bound))
    return result


def _variadic(binary_op):
    def convert(importer, inputs, attrs, opset):
        """Variadic Min/Max folded pairwise into broadcasting binary ops. TVM's
        converter broadcasts every input to one shape computed at import time
        and rejects sizes it cannot relate (``N`` and ``M``, equal or 1 only
        at run time, as batched NMS's boxes and offsets are)."""
        values = [v for v in inputs if v is not None]
        if all(const_value(importer, v) is not None for v in values):
            return NotImplemented
        values = [as_tensor(importer.bb, v) for v in values]
        result = values[0]
        for value in values[1:]:
            result = importer.bb.normalize(binary_op(result, value))
        return result

    return convert


converter("Min")(_variadic(relax.op.minimum))
converter("Max")(_variadic(relax.op.maximum))


@converter("Equal")
def equal(importer, inputs, attrs, opset):
    """Equal on shape values. TVM's converter compares a shape with a constant
    or another shape structurally at import time, so a size that equals the
    other side only at run time (``Shape(x)[0] == 0`` for an empty ``x``)
    compares False, and it rejects a shape against a runtime tensor. Here
    only elements decided at import time (literals, the same size) fold; the
    rest compare at run time."""
    a, b = inputs
    if not any(isinstance(v.ty, relax.ShapeType) for v in (a, b)):
        return NotImplemented
    la, lb = _shape_values(importer, a), _shape_values(importer, b)
    if la is not None and lb is not None and len(la) == len(lb):
        decided = []
        for x, y in zip(la, lb):
            if isinstance(x, tvm.tirx.IntImm) and isinstance(y, tvm.tirx.IntImm):
                decided.append(x.value == y.value)
            elif tvm_ffi.structural_equal(x, y):
                decided.append(True)
            else:
                break
        else:
            return relax.const(np.array(decided, bool), "bool")
    return relax.op.equal(as_tensor(importer.bb, a), as_tensor(importer.bb, b))
