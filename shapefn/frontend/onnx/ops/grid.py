"""shapefn's ONNX converter for AffineGrid, whose ``size`` input (a tensor
of sizes, ``[N, C, H, W]`` or ``[N, C, D, H, W]``) sets the output's shape:
TVM's converter takes it only as literal sizes. Each spatial axis' base
coordinates are an ``arange`` of its size (a literal or symbolic size where
the importer knows it, as ``Shape(x)``'s; else a size known only at run
time, through shapefn's ``arange``), scaled into [-1, 1] as ONNX's reference
spaces them; the grid is ``theta`` applied to them, summed term by term over
the broadcast axes."""
from __future__ import annotations

from tvm import relax

from ....compiler import ops
from ....runtime.errors import UnsupportedOnnxOp
from ..registry import converter
from ..values import as_tensor, ndim_of, prim_tensor, shape_values, static_length

_FLOATS = ("float16", "bfloat16", "float32", "float64")


@converter("AffineGrid")
def affine_grid(importer, inputs, attrs, opset):
    """``grid[n, (d,) h, w, i] = sum_j theta[n, i, j] * base[(d,) h, w, j]``,
    ``base`` being ``(x_w, y_h, (z_d,) 1)``; ``theta`` is ``[N, 2, 3]`` (2-D)
    or ``[N, 3, 4]`` (3-D). The batch is theta's (ONNX requires size's N to
    equal it)."""
    bb = importer.bb
    theta = as_tensor(bb, inputs[0])
    size = inputs[1]
    dtype = str(theta.ty.dtype)
    if dtype not in _FLOATS or ndim_of(theta) != 3:
        raise UnsupportedOnnxOp(f"AffineGrid of a {dtype} theta of rank {ndim_of(theta)} is not supported "
                                "(a floating-point [N, 2, 3] or [N, 3, 4])", {"AffineGrid": []})
    count = static_length(size)
    if count not in (4, 5):
        raise ValueError(f"size must have 4 (2-D) or 5 (3-D) entries, not {count}")
    spatial = count - 2
    dims = theta.ty.shape.values if theta.ty.shape is not None else []
    if any(hasattr(d, "value") and d.value != want for d, want in zip(dims[1:], (spatial, spatial + 1))):
        raise ValueError(f"theta must be [N, {spatial}, {spatial + 1}] for a size of {count} entries, not "
                         f"{list(dims)}")
    known = shape_values(importer, size)
    size = as_tensor(bb, size, "int64")
    compute = "float64" if dtype == "float64" else "float32"
    align = bool(int(attrs.get("align_corners", 0)))
    # (theta's columns 0, 1, (2) weigh x, y, (z): the width's, the height's, (the depth's) coordinate)
    coords = [_coordinates(bb, size, count - 1 - j, None if known is None else known[count - 1 - j], align,
                           compute) for j in range(spatial)]
    theta = theta if dtype == compute else bb.emit(relax.op.astype(theta, compute))
    grid = None
    for j in range(spatial + 1):
        weight = bb.emit(relax.op.strided_slice(theta, axes=[2], begin=[j], end=[j + 1]))
        weight = bb.emit(relax.op.permute_dims(weight, [0, 2, 1]))
        weight = bb.emit(relax.op.expand_dims(weight, list(range(1, spatial))) if spatial > 1 else weight)
        if j == spatial:
            term = weight
        else:
            axis = spatial - 1 - j
            term = bb.emit(relax.op.reshape(coords[j], [1] * (axis + 1) + [-1] + [1] * (spatial - axis)))
            term = bb.emit(relax.op.multiply(term, weight))
        grid = term if grid is None else bb.emit(relax.op.add(grid, term))
    return grid if dtype == compute else bb.emit(relax.op.astype(grid, dtype))


def _coordinates(bb, size, index: int, known, align: bool, dtype: str):
    """The base coordinates along the axis whose size is ``size[index]``
    (``known``, a size expression, where the importer knows it): with
    ``align_corners`` ``-1 + i * 2 / (L - 1)`` (-1 alone for L = 1, as
    ONNX's reference and PyTorch give), else ``-1 + (2 * i + 1) / L``, the
    pixels' centres."""
    op = relax.op
    if known is not None:
        steps = bb.emit(op.arange(0, known, 1, "int64"))
        length = prim_tensor(bb, known)
    else:
        length = bb.emit(op.take(size, relax.const(index, "int64"), axis=0))
        steps = ops.arange(bb, relax.const(0, "int64"), length, relax.const(1, "int64"), "int64")
    i = op.astype(steps, dtype)
    n = op.astype(length, dtype)
    one, two = relax.const(1.0, dtype), relax.const(2.0, dtype)
    if align:
        step = op.where(op.greater(n, one), op.divide(two, op.subtract(n, one)), relax.const(0.0, dtype))
        return bb.emit(op.subtract(op.multiply(i, step), one))
    step = op.divide(two, n)
    start = op.add(relax.const(-1.0, dtype), op.divide(step, two))
    return bb.emit(op.add(start, op.multiply(i, step)))
