"""shapefn's ONNX converters for the ``Reduce*`` operators whose ``axes``
input is known only at run time (a graph input, or computed by the model),
for ``CumSum`` and ``CumProd``, whose ``axis`` is an input too, and for
``OneHot`` with its ``depth`` given at run time, and ``TopK`` with its ``k``
given at run time (the output's length is ``k``'s value).
TVM's converters take constant axes only; with those they are used as they
are.

Which axes are reduced is a value, so the result's shape comes from the
shape function ``shapefn.reduce_axes`` (only the axes vector crosses to the
host). One kernel reduces over a window per output element: with every
reduced axis kept as 1, the output's element ``i`` reduces the data over
``i + k`` for ``k`` within ``data.shape - kept_shape + 1``, which is the
whole axis where it is reduced and the single index ``i`` where it is not.
Without ``keepdims`` the result is that tensor viewed without the reduced
axes."""
from __future__ import annotations

import functools

import numpy as np
from tvm import relax, te, tirx

from ....compiler import ops
from ....compiler.shape_calls import emit_shape
from ..registry import converter, tvm_converter
from ..values import absent, as_tensor, const_value, ndim_of, static_length

_FLOAT_ONLY = {"ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}  # (sqrt, log, exp of the data)


def _product():
    return te.comm_reducer(lambda a, b: a * b, lambda t: tirx.const(1, t), name="product")


def _reduce(op_type: str, x: te.Tensor, kept: list) -> te.Tensor:
    """``op_type`` of ``x`` with the reduced axes kept as 1 (``kept``)."""
    ndim, dtype = len(x.shape), str(x.dtype)
    extents = [x.shape[d] - kept[d] + 1 for d in range(ndim)]

    def window(reducer, element=lambda v: v, name="reduced"):
        axes = [te.reduce_axis((0, extents[d]), f"k{d}") for d in range(ndim)]
        return te.compute(kept, lambda *i: reducer(element(x[tuple(i[d] + axes[d] for d in range(ndim))]), axis=axes),
                          name=name)

    if op_type in ("ReduceSum", "ReduceL1", "ReduceSumSquare", "ReduceL2", "ReduceLogSum", "ReduceMean"):
        element = {"ReduceL1": tirx.abs, "ReduceSumSquare": lambda v: v * v, "ReduceL2": lambda v: v * v}
        total = window(te.sum, element.get(op_type, lambda v: v))
        if op_type == "ReduceL2":
            return te.compute(kept, lambda *i: tirx.sqrt(total(*i)), name="l2")
        if op_type == "ReduceLogSum":
            return te.compute(kept, lambda *i: tirx.log(total(*i)), name="log_sum")
        if op_type == "ReduceMean":
            count = functools.reduce(lambda a, b: a * b, extents)
            return te.compute(kept, lambda *i: total(*i) / count.astype(dtype), name="mean")
        return total
    if op_type in ("ReduceMax", "ReduceMin"):
        # TE's reducers (which GPU schedules recognise) start from the type's
        # lowest (highest) finite value; ONNX gives -inf (+inf) for floats
        # over no elements.
        extreme = window(te.max if op_type == "ReduceMax" else te.min)
        if not dtype.startswith(("float", "bfloat")):
            return extreme
        empty = tirx.const(float("-inf") if op_type == "ReduceMax" else float("inf"), dtype)
        count = functools.reduce(lambda a, b: a * b, extents)
        return te.compute(kept, lambda *i: tirx.Select(count == 0, empty, extreme(*i)), name="extreme")
    if op_type == "ReduceProd":
        return window(_product())
    if op_type == "ReduceLogSumExp":
        # log(sum(exp(x - m))) + m with m the maximum (finite), so that exp
        # does not overflow; an empty or all -inf window gives -inf, as ONNX.
        top = window(te.max, name="max")  # (an empty window: log(0) + shift = -inf)
        shift = te.compute(kept, lambda *i: tirx.Select(tirx.isfinite(top(*i)), top(*i), tirx.const(0, dtype)),
                           name="shift")
        axes = [te.reduce_axis((0, extents[d]), f"k{d}") for d in range(ndim)]
        total = te.compute(kept, lambda *i: te.sum(
            tirx.exp(x[tuple(i[d] + axes[d] for d in range(ndim))] - shift(*i)), axis=axes), name="sum_exp")
        return te.compute(kept, lambda *i: tirx.log(total(*i)) + shift(*i), name="log_sum_exp")
    raise AssertionError(op_type)


def _register(op_type: str) -> None:
    @converter(op_type)
    def convert(importer, inputs, attrs, opset):
        if op_type in ("ReduceMax", "ReduceMin") and str(getattr(inputs[0].ty, "dtype", "")) == "bool":
            # (any / all: over bytes 0 and 1; an empty set gives 0 (False) for the
            # maximum and 255 (True) for the minimum, as ONNX defines)
            as_bytes = importer.bb.normalize(relax.op.astype(inputs[0], "uint8"))
            reduced = convert(importer, [as_bytes, *inputs[1:]], attrs, opset)
            if reduced is NotImplemented:
                reduced = tvm_converter(importer, op_type, [as_bytes, *inputs[1:]], attrs, opset)
            return relax.op.astype(importer.bb.normalize(reduced), "bool")
        axes = inputs[1] if len(inputs) > 1 else None
        if absent(importer, axes) or const_value(importer, axes) is not None:
            return NotImplemented  # (TVM's converter, shapes and scalars given as it takes them)
        bb = importer.bb
        data, axes = as_tensor(bb, inputs[0]), as_tensor(bb, axes, "int64")
        dtype = str(data.ty.dtype)
        if op_type in _FLOAT_ONLY and not dtype.startswith(("float", "bfloat")):
            raise ValueError(f"{op_type} of {dtype} data with axes given at run time is not supported")
        ndim, keepdims = ndim_of(data), bool(attrs.get("keepdims", 1))
        count = static_length(axes)
        if count == 0:  # (an empty axes vector of static length: decided here)
            if attrs.get("noop_with_empty_axes", 0):
                return data
            return tvm_converter(importer, op_type, [data], attrs, opset)
        kept, result = emit_shape(bb, "shapefn.reduce_axes", [data, axes], [ndim, ndim if keepdims else ndim - count],
                                  [int(keepdims)], prefix="reduce")
        reduced = bb.emit_te(_reduce, op_type, data, kept, primfunc_name_hint=op_type.lower())
        return reduced if keepdims else relax.op.reshape(reduced, relax.ShapeExpr(result))

    convert.__doc__ = f"{op_type} with axes given at run time by one kernel (constant axes: TVM's converter)."


for _op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"):
    _register(_op)


def _cumulative(x: te.Tensor, kept: list, op: str, exclusive: bool, reverse: bool) -> te.Tensor:
    """The running ``op`` ("sum" or "prod") of ``x`` along the axis ``kept``
    keeps as 1: each output element reduces a window over that axis, the
    elements up to it (from it, ``reverse``; itself left out, ``exclusive``)."""
    ndim, dtype = len(x.shape), str(x.dtype)
    extents = [x.shape[d] - kept[d] + 1 for d in range(ndim)]  # (the axis' length there, 1 elsewhere)
    axes = [te.reduce_axis((0, extents[d]), f"k{d}") for d in range(ndim)]
    identity = tirx.const(0 if op == "sum" else 1, dtype)
    reducer = te.sum if op == "sum" else _product()

    def element(*i):
        along = [tirx.Or(extents[d] == 1, _before(axes[d], i[d], exclusive, reverse)) for d in range(ndim)]
        index = tuple(tirx.Select(extents[d] == 1, i[d], axes[d]) for d in range(ndim))
        return reducer(tirx.Select(functools.reduce(tirx.And, along), x[index], identity), axis=axes)

    return te.compute(x.shape, element, name=f"cum{op}")


def _before(k, i, exclusive: bool, reverse: bool):
    if reverse:
        return k > i if exclusive else k >= i
    return k < i if exclusive else k <= i


def _register_cumulative(op_type: str, op: str) -> None:
    @converter(op_type)
    def convert(importer, inputs, attrs, opset):
        bb = importer.bb
        data = as_tensor(bb, inputs[0])
        exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
        constant = const_value(importer, inputs[1])
        if constant is not None and constant.size == 1:
            ndim = ndim_of(data)
            axis = int(constant.reshape(()))
            if not -ndim <= axis < ndim:
                raise ValueError(f"{op_type}'s axis {axis} is out of range for rank {ndim}")
            x = bb.normalize(relax.op.flip(data, axis)) if reverse else data
            cumulative = relax.op.cumsum if op == "sum" else relax.op.cumprod
            y = bb.normalize(cumulative(x, axis % ndim, exclusive=exclusive))
            return relax.op.flip(y, axis) if reverse else y
        axis = as_tensor(bb, inputs[1], "int64")
        if ndim_of(axis) > 1 or (ndim_of(axis) == 1 and static_length(axis) != 1):
            raise ValueError(f"{op_type}'s axis must be a scalar or a 1-element vector, got rank {ndim_of(axis)}")
        ndim = ndim_of(data)
        kept, _ = emit_shape(bb, "shapefn.reduce_axes", [data, axis], [ndim, ndim], [1], prefix="cum")
        return bb.emit_te(_cumulative, data, kept, op, exclusive, reverse, primfunc_name_hint=f"cum{op}")

    convert.__doc__ = (f"{op_type}, ``exclusive`` and ``reverse`` included: along a constant axis as Relax's "
                       "scan; along an axis given at run time (validated by ``shapefn.reduce_axes``, which "
                       "keeps it as 1) by one kernel of windows.")


_register_cumulative("CumSum", "sum")
_register_cumulative("CumProd", "prod")


def _one_hot(indices: te.Tensor, values: te.Tensor, shape: list, axis: int) -> te.Tensor:
    """``values[1]`` where the output's index along ``axis`` is the index
    (a negative one counted from ``depth``), ``values[0]`` elsewhere: an
    index out of range gives a row of ``values[0]``, as ONNX defines."""
    depth = shape[axis]

    def element(*i):
        index = indices(*(i[:axis] + i[axis + 1:])).astype("int64")
        index = tirx.Select(index < 0, index + depth, index)
        return tirx.Select(index == i[axis], values[1], values[0])

    return te.compute(shape, element, name="one_hot")


@converter("OneHot")
def one_hot(importer, inputs, attrs, opset):
    """OneHot whose ``depth`` is known only at run time: the output shape
    comes from the shape function ``shapefn.one_hot`` (only the depth
    crosses to the host), one kernel fills it; so are values known only at
    run time (a Loop body's). Constant depth and values: TVM's converter,
    given the depth as a scalar (it takes a 1-element depth for a list),
    its result in the values' type."""
    depth = const_value(importer, inputs[1])
    if depth is not None and const_value(importer, inputs[2]) is not None:
        if depth.size != 1:
            raise ValueError(f"OneHot's depth must hold one value, got a tensor of shape {list(depth.shape)}")
        if depth.reshape(()) < 0:
            raise ValueError(f"OneHot's depth must not be negative, got {depth.reshape(()).item()}")
        scalar = relax.const(np.array(int(depth.reshape(())), np.int64))
        result = importer.bb.normalize(tvm_converter(importer, "OneHot", [inputs[0], scalar, inputs[2]], attrs, opset))
        dtype = str(inputs[2].ty.dtype)  # (TVM's makes the values Python floats: float64)
        return result if str(result.ty.dtype) == dtype else relax.op.astype(result, dtype)
    bb = importer.bb
    indices, values = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[2])
    if ndim_of(values) != 1 or static_length(values) != 2:
        raise ValueError("OneHot's values must be a 2-element vector [off, on]")
    depth = bb.normalize(relax.op.astype(as_tensor(bb, inputs[1]), "int64"))
    ndim = ndim_of(indices) + 1
    axis = int(attrs.get("axis", -1))
    (shape,) = emit_shape(bb, "shapefn.one_hot", [indices, depth], [ndim], [axis], prefix="one_hot")
    return bb.emit_te(_one_hot, indices, values, shape, axis % ndim, primfunc_name_hint="one_hot")


@converter("TopK")
def topk(importer, inputs, attrs, opset):
    if opset < 10 or const_value(importer, inputs[1]) is not None:
        return NotImplemented
    bb = importer.bb
    values, indices = ops.topk(bb, inputs[0], as_tensor(bb, inputs[1], "int64"), axis=attrs.get("axis", -1),
                               largest=bool(attrs.get("largest", 1)), sorted=True)
    return relax.Tuple([values, indices])


