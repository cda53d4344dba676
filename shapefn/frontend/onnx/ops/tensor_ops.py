"""shapefn's ONNX converters for tensor operators TVM's importer lacks:
``ReverseSequence``, ``TensorScatter`` (a KV-cache update), ``Col2Im`` and
``Det``, as ONNX's reference computes them.

ReverseSequence, TensorScatter and Col2Im are one TE kernel each that reads
its indices from the runtime values (sequence lengths, write indices) and
guards every read; a sequence length outside ``[0, steps]`` or a linear
write index that puts the update past the cache is an error the kernel
reports (``compiler/passes/index_checks.py``); Col2Im's ``image_shape`` and ``block_shape`` may be
given at run time too. Det is Gaussian elimination with partial pivoting,
unrolled over the (static) matrix size in Relax ops."""
from __future__ import annotations

import functools

import numpy as np
from tvm import relax, sym, te, tirx

from ....compiler.passes.index_checks import checked
from ....compiler.shape_calls import emit_shape, fresh_dims
from ....runtime.errors import UnsupportedOnnxOp
from ..registry import converter
from ..values import absent, as_tensor, ndim_of, shape_values, str_attr


def _dims(expr) -> list:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise ValueError(f"the shape of {expr} must be known (its rank at least)")
    return list(ty.shape.values)


def _show(values) -> str:
    return "[" + ", ".join(str(int(v)) if isinstance(v, tirx.IntImm) else str(v) for v in values) + "]"


def _provably_different(a, b) -> bool:
    return isinstance(a, tirx.IntImm) and isinstance(b, tirx.IntImm) and a.value != b.value


def _all(conditions):
    return functools.reduce(tirx.And, conditions, tirx.const(True, "bool"))


def _at(vector: te.Tensor, i):
    """``vector[i]`` as int64, read at ``i`` clamped into the vector (its
    callers use it only for ``i`` inside): a checked index is read
    unconditionally (``index_checks.materialize``)."""
    top = tirx.max(vector.shape[0] - 1, tirx.const(0, "int64"))
    return vector[tirx.min(i, top)].astype("int64")


# ---- ReverseSequence ----------------------------------------------------------------------
def _reverse_sequence(x: te.Tensor, lens: te.Tensor, batch_axis: int, time_axis: int) -> te.Tensor:
    steps = x.shape[time_axis]

    def element(*i):
        b, t = i[batch_axis], i[time_axis]
        # (a length outside [0, steps] is an error, as onnxruntime has it;
        # a batch entry without a length is left as it is)
        given = tirx.if_then_else(b < lens.shape[0], checked(_at(lens, b), 0, steps + 1, "sequence length"),
                                  tirx.const(0, "int64"))
        length = tirx.max(tirx.min(given, steps), tirx.const(0, "int64"))
        index = list(i)
        index[time_axis] = tirx.Select(t < length, length - 1 - t, t)
        return x[tuple(index)]

    return te.compute(x.shape, element, name="reverse_sequence")


@converter("ReverseSequence")
def reverse_sequence(importer, inputs, attrs, opset):
    """Each batch entry's first ``sequence_lens`` steps reversed (one kernel)."""
    bb = importer.bb
    data, lens = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1], "int64")
    batch_axis, time_axis = int(attrs.get("batch_axis", 1)), int(attrs.get("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise ValueError(f"ReverseSequence's batch_axis and time_axis must be 0 and 1 (either order), "
                         f"not {batch_axis} and {time_axis}")
    dims = _dims(data)
    if len(dims) < 2 or ndim_of(lens) != 1:
        raise ValueError(f"ReverseSequence takes data of rank 2 or more and a 1-D sequence_lens, "
                         f"not ranks {len(dims)} and {ndim_of(lens)}")
    if _provably_different(_dims(lens)[0], dims[batch_axis]):
        raise ValueError(f"ReverseSequence: {_show(_dims(lens))} sequence lengths for a batch of "
                         f"{_show(dims[batch_axis:batch_axis + 1])}")
    return bb.emit_te(_reverse_sequence, data, lens, batch_axis, time_axis, primfunc_name_hint="reverse_sequence")


# ---- TensorScatter --------------------------------------------------------------------------
def _tensor_scatter(past: te.Tensor, update: te.Tensor, writes: te.Tensor | None, axis: int,
                    circular: bool) -> te.Tensor:
    """``update[..., j, ...]`` at cache position ``s`` where ``j`` is ``s``
    less the batch entry's write index (modulo the cache length,
    ``circular``) and within the update, the past cache elsewhere."""
    length = past.shape[axis]
    # Linear: the update lies within the cache (ONNX's reference fails on an index past it).
    last = length - update.shape[axis]

    def element(*i):
        s = i[axis]
        start = tirx.const(0, "int64")
        if writes is not None:
            given = _at(writes, i[0])
            if not circular:
                given = checked(given, 0, last + 1, "write index")
            start = tirx.if_then_else(i[0] < writes.shape[0], given, start)
        j = s - start
        if circular:
            j = tirx.floormod(j, tirx.max(length, tirx.const(1, "int64")))
        index = list(i)
        index[axis] = j
        # (sizes of the update that differ from the cache's are not read past)
        inside = _all([tirx.And(0 <= index[d], index[d] < update.shape[d]) for d in range(len(i))])
        return tirx.if_then_else(inside, update[tuple(index)], past(*i))

    return te.compute(past.shape, element, name="tensor_scatter")


@converter("TensorScatter")
def tensor_scatter(importer, inputs, attrs, opset):
    """``update`` written into ``past_cache`` along ``axis`` from each batch
    entry's ``write_indices`` (0 if absent), linearly (each index within
    ``[0, cache length - update length]``, else an ``IndexError``) or
    circularly."""
    bb = importer.bb
    past, update = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    writes = inputs[2] if len(inputs) > 2 and not absent(importer, inputs[2]) else None
    mode = str_attr(attrs.get("mode"), "linear")
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter's mode must be 'linear' or 'circular', not {mode!r}")
    dims, update_dims = _dims(past), _dims(update)
    ndim = len(dims)
    axis = int(attrs.get("axis", -2))
    if not -ndim <= axis < ndim or axis % ndim == 0:
        raise ValueError(f"TensorScatter's axis {axis} must be a non-batch axis of a rank-{ndim} cache")
    axis %= ndim
    if len(update_dims) != ndim or any(_provably_different(a, b) for d, (a, b) in enumerate(zip(dims, update_dims))
                                       if d != axis):
        raise ValueError(f"TensorScatter's update {_show(update_dims)} does not fit the cache {_show(dims)} "
                         f"(axis {axis})")
    if str(update.ty.dtype) != str(past.ty.dtype):
        raise ValueError(f"TensorScatter's update is {update.ty.dtype}, its cache {past.ty.dtype}")
    if writes is not None:
        writes = as_tensor(bb, writes, "int64")
        if ndim_of(writes) != 1:
            raise ValueError(f"TensorScatter's write_indices must be 1-D, not rank {ndim_of(writes)}")
    return bb.emit_te(_tensor_scatter, past, update, writes, axis, mode == "circular",
                      primfunc_name_hint="tensor_scatter")


# ---- Col2Im ---------------------------------------------------------------------------------
def _col2im(x: te.Tensor, channels, image: list, block: list, blocks: list, strides: list, begins: list,
            dilations: list) -> te.Tensor:
    """``x`` ``[N, C, prod(block), prod(blocks)]``: each output element sums
    the columns whose block covers it (a gather: no two threads write one
    element)."""
    rank = len(image)
    offsets = [te.reduce_axis((0, block[d]), f"k{d}") for d in range(rank)]

    def element(n, c, *p):
        along = [p[d] + begins[d] - offsets[d] * dilations[d] for d in range(rank)]
        valid = _all([tirx.And(tirx.And(a >= 0, tirx.floormod(a, strides[d]) == 0),
                               tirx.floordiv(a, strides[d]) < blocks[d]) for d, a in enumerate(along)])
        kernel, column = tirx.const(0, "int64"), tirx.const(0, "int64")
        for d in range(rank):
            kernel = kernel * block[d] + offsets[d]
            column = column * blocks[d] + tirx.floordiv(along[d], strides[d])
        value = tirx.if_then_else(valid, x[n, c, kernel, column], tirx.const(0, x.dtype))
        return te.sum(value, axis=offsets)

    return te.compute([x.shape[0], channels, *image], element, name="col2im")


def _sizes(importer, expr, name: str) -> list:
    """A 1-D int64 vector's values as sizes: as known at import (literals,
    ``Shape`` of a tensor), else size variables read from it at run time."""
    known = shape_values(importer, expr)
    if known is not None:
        return known
    bb = importer.bb
    vector = as_tensor(bb, expr, "int64")
    dims = _dims(vector)
    if len(dims) != 1 or not isinstance(dims[0], tirx.IntImm):
        raise UnsupportedOnnxOp(f"Col2Im's {name} must be a 1-D vector of static length, not {vector.ty}",
                                {"Col2Im": []})
    sizes = fresh_dims(f"col2im_{name}", int(dims[0]))
    bb.match_cast(bb.emit(relax.op.tensor_to_shape(vector)), relax.ShapeType(sizes))
    return sizes


@converter("Col2Im")
def col2im(importer, inputs, attrs, opset):
    """Col2Im for ``image_shape`` and ``block_shape`` constants or given at
    run time. The input is viewed as ``[N, C, prod(block_shape), blocks]``,
    by the reshape shape function where its sizes are known only at run
    time: that refuses an input whose sizes do not match the two shapes."""
    bb = importer.bb
    data = as_tensor(bb, inputs[0])
    image, block = _sizes(importer, inputs[1], "image_shape"), _sizes(importer, inputs[2], "block_shape")
    rank = len(image)
    if rank == 0 or len(block) != rank:
        raise ValueError(f"Col2Im's image_shape ({rank} sizes) and block_shape ({len(block)}) must have the same, "
                         "nonzero length")
    strides = [int(v) for v in attrs.get("strides", [1] * rank)]
    dilations = [int(v) for v in attrs.get("dilations", [1] * rank)]
    pads = [int(v) for v in attrs.get("pads", [0] * 2 * rank)]
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank or min(strides + dilations) < 1:
        raise ValueError(f"Col2Im's strides {strides}, dilations {dilations} or pads {pads} do not fit "
                         f"{rank} spatial axes")
    dims = _dims(data)
    if len(dims) != 3:
        raise ValueError(f"Col2Im takes a 3-D input [N, C * prod(block_shape), blocks], not {_show(dims)}")
    analyzer = sym.Analyzer()
    blocks = [analyzer.simplify(tirx.floordiv(image[d] + pads[d] + pads[rank + d] - dilations[d] * (block[d] - 1) - 1,
                                              strides[d]) + 1) for d in range(rank)]
    for d in range(rank):
        if isinstance(blocks[d], tirx.IntImm) and blocks[d].value < 1 or \
                isinstance(block[d], tirx.IntImm) and block[d].value < 1:
            raise ValueError(f"Col2Im: image_shape {_show(image)} and block_shape {_show(block)} (pads {pads}, strides "
                             f"{strides}, dilations {dilations}) leave no block along axis {d}")
    kernel = analyzer.simplify(functools.reduce(lambda a, b: a * b, block))
    count = analyzer.simplify(functools.reduce(lambda a, b: a * b, blocks))
    channels = analyzer.simplify(tirx.floordiv(dims[1], tirx.max(kernel, tirx.const(1, "int64"))))
    target = [dims[0], channels, kernel, count]
    static = analyzer.can_prove_equal(tirx.floormod(dims[1], kernel), 0) and analyzer.can_prove_equal(dims[2], count)
    if static:
        x = bb.emit(relax.op.reshape(data, relax.ShapeExpr(target)))
    elif all(isinstance(v, tirx.IntImm) for v in [*dims[1:], kernel, count]):
        raise ValueError(f"Col2Im: an input {_show(dims)} does not hold C * {int(kernel)} rows of {int(count)} "
                         f"blocks (image_shape {_show(image)}, block_shape {_show(block)})")
    else:
        # (negative sizes as 0: the shape function would infer a -1, and refuse others less clearly)
        target[2:] = [tirx.max(v, tirx.const(0, "int64")) for v in target[2:]]
        shape = bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr(target)))
        (viewed,) = emit_shape(bb, "relax.reshape", [data, shape], [4], [1], prefix="col2im")
        x = bb.emit(relax.op.reshape(data, relax.ShapeExpr(viewed)))
        channels = viewed[1]
    return bb.emit_te(_col2im, x, channels, image, block, blocks, strides, pads[:rank], dilations,
                      primfunc_name_hint="col2im")


# ---- Det ------------------------------------------------------------------------------------
_DET_MAX = 32  # (unrolled: a few kernels per row)


@converter("Det")
def det(importer, inputs, attrs, opset):
    """Determinants of ``[..., M, M]`` for a static ``M`` (up to 32): LU
    elimination with partial pivoting (the largest magnitude in the column,
    the first of equal ones, as LAPACK), unrolled one Relax step per row.
    Each step brings the pivot row to the top by masks (``where``, no
    gather), multiplies the pivot into the determinant (negated for a row
    swap) and continues with the Schur complement. Half precision is
    computed in float32."""
    bb = importer.bb
    data = as_tensor(bb, inputs[0])
    dtype = str(data.ty.dtype)
    dims = _dims(data)
    rank = len(dims)
    if rank < 2 or not all(isinstance(d, tirx.IntImm) for d in dims[-2:]) or int(dims[-1]) != int(dims[-2]):
        raise UnsupportedOnnxOp(f"Det takes square matrices of a size known at import, not {_show(dims)}",
                                {"Det": []})
    size = int(dims[-1])
    if size > _DET_MAX:
        raise UnsupportedOnnxOp(f"Det of {size}x{size} matrices is not supported (up to {_DET_MAX}x{_DET_MAX})",
                                {"Det": []})
    work = "float32" if dtype in ("float16", "bfloat16") else dtype
    if not work.startswith("float"):
        raise ValueError(f"Det takes floating-point matrices, not {dtype}")
    rows_axis, cols_axis = rank - 2, rank - 1
    a = bb.emit(relax.op.astype(data, work)) if work != dtype else data
    zero, one = relax.const(0, work), relax.const(1, work)
    total = None

    def take(x, axis, begin, end):
        return bb.emit(relax.op.strided_slice(x, axes=[axis], begin=[begin], end=[end]))

    for m in range(size, 0, -1):
        first = take(a, cols_axis, 0, 1)  # [..., m, 1]
        if m == 1:
            pivot, sign = first, None
        else:
            chosen = bb.emit(relax.op.argmax(relax.op.abs(first), axis=rows_axis, keepdims=True))  # [..., 1, 1]
            rows = relax.const(np.arange(m, dtype=np.int64).reshape(m, 1), "int64")
            is_pivot = bb.emit(relax.op.equal(rows, chosen))  # [..., m, 1]
            # (the pivot row as a sum in which every other row is an exact 0)
            pivot_row = bb.emit(relax.op.sum(relax.op.where(is_pivot, a, zero), axis=rows_axis, keepdims=True))
            rest = bb.emit(relax.op.where(take(is_pivot, rows_axis, 1, m), take(a, rows_axis, 0, 1),
                                          take(a, rows_axis, 1, m)))  # [..., m - 1, m]: row 0 where the pivot was
            pivot = take(pivot_row, cols_axis, 0, 1)
            sign = bb.emit(relax.op.where(relax.op.equal(chosen, relax.const(0, "int64")), one,
                                          relax.const(-1, work)))
            # (a zero pivot: the column is all 0, and so is the determinant)
            safe = bb.emit(relax.op.where(relax.op.equal(pivot, zero), one, pivot))
            factors = bb.emit(relax.op.divide(take(rest, cols_axis, 0, 1), safe))
            a = bb.emit(relax.op.subtract(take(rest, cols_axis, 1, m),
                                          relax.op.multiply(factors, take(pivot_row, cols_axis, 1, m))))
        step = pivot if sign is None else bb.emit(relax.op.multiply(pivot, sign))
        total = step if total is None else bb.emit(relax.op.multiply(total, step))
    if total is None:  # (0x0 matrices: the empty product)
        total = bb.emit(relax.op.ones(relax.ShapeExpr([*dims[:-2], 1, 1]), work))
    result = bb.emit(relax.op.squeeze(total, axis=[rows_axis, cols_axis]))
    return relax.op.astype(result, dtype) if work != dtype else result
