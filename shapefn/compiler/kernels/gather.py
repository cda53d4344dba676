"""Gathers: ``take`` (ONNX Gather), ``gather_elements`` and ``gather_nd``,
as TE computations whose every index read from data is checked
(``index_checks.from_end``): an index in ``[-n, n)`` for an axis of extent
``n``, counted from the end when negative, as ONNX defines; any other is
reported by the kernel and the VM raises (docs/guarantees.md).

Each index is read where it is used, in the one stage that writes the
output, so that a check can clamp it there (``index_checks.materialize``).
"""
from __future__ import annotations

from tvm import te, tirx

from ..passes.index_checks import from_end


def take(data: te.Tensor, indices: te.Tensor, axis: int | None) -> te.Tensor:
    """``data`` indexed along ``axis`` by ``indices`` (``axis=None``: the
    flattened data); the result has ``indices``' dimensions in place of the
    axis."""
    if axis is None:
        size = tirx.const(1, "int64")
        for d in data.shape:
            size = size * d
        flat = te.compute([size], lambda i: data(*_unravel(i, data.shape)), name="flat")
        return take(flat, indices, 0)
    ndim, depth = len(data.shape), len(indices.shape)
    axis = axis % ndim
    extent = data.shape[axis]
    what = f"take: index along axis {axis}"

    def value(*out):
        k = from_end(indices(*out[axis:axis + depth]), extent, what)
        return data(*out[:axis], k, *out[axis + depth:])

    shape = [*data.shape[:axis], *indices.shape, *data.shape[axis + 1:]]
    return te.compute(shape, value, name="take")


def gather_elements(data: te.Tensor, indices: te.Tensor, axis: int) -> te.Tensor:
    """``out[p] = data[p with indices[p] at axis]`` for each position ``p`` of ``indices``."""
    ndim = len(data.shape)
    axis = axis % ndim
    extent = data.shape[axis]
    what = f"gather_elements: index along axis {axis}"

    def value(*p):
        k = from_end(indices(*p), extent, what)
        return data(*p[:axis], k, *p[axis + 1:])

    return te.compute(indices.shape, value, name="gather_elements")


def gather_nd(data: te.Tensor, indices: te.Tensor, batch_dims: int) -> te.Tensor:
    """ONNX GatherND: each index tuple (the last dimension of ``indices``,
    of a length known here) addresses ``data`` after ``batch_dims`` shared
    leading dimensions; the result is ``indices.shape[:-1] +
    data.shape[batch_dims + depth:]``."""
    depth = indices.shape[-1]
    if not isinstance(depth, tirx.IntImm):
        raise ValueError(f"gather_nd: the index tuples' length {depth} must be known")
    depth = int(depth)
    lead = len(indices.shape) - 1  # batch dims, then the positions of the tuples

    def value(*out):
        at = out[:lead]
        coords = [from_end(indices(*at, tirx.const(j, "int64")), data.shape[batch_dims + j],
                           f"gather_nd: coordinate {j} of an index tuple") for j in range(depth)]
        return data(*out[:batch_dims], *coords, *out[lead:])

    shape = [*indices.shape[:-1], *data.shape[batch_dims + depth:]]
    return te.compute(shape, value, name="gather_nd")


def _unravel(flat, shape) -> list:
    """The row-major coordinates of element ``flat`` in ``shape``."""
    coords = []
    for d in reversed(shape):
        coords.append(tirx.floormod(flat, d))
        flat = tirx.floordiv(flat, d)
    return list(reversed(coords))
