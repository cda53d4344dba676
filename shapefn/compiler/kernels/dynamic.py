"""Kernels whose output sizes are known only at run time.

The compiler lowers a data-dependent op into a host shape function, a
``match_cast`` that binds fresh size variables, and one of these kernels. Each
function here returns a TIR ``PrimFunc`` whose buffers carry symbolic int64
sizes, so one compiled kernel serves every shape: a kernel reads the sizes it
needs (``k`` of top-k, the target size of a resize) from its output buffers,
which the shape function already sized. Index tensors are int64.

Elementwise kernels are TE computes; kernels that select or compact elements
are serial TIR loops built with TVM's IR builder (plain TIR without extern
calls, so a GPU schedule can be added later). The count-sized kernels
(nonzero, unique, NMS) live in ``count``, resize in ``resize``.
"""
from __future__ import annotations

from collections.abc import Sequence

from tvm import sym, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import heap
from .tir_builder import arg, i64, loops, sizes


# --------------------------------------------------------------------------- topk
def topk_sizes(ndim: int, axis: int) -> tuple:
    """The top-k kernel's axis (made non-negative), the symbolic shapes of its
    input and outputs (``k`` along the axis) and the row length and ``k``
    (the GPU form's are the same): ``(axis, in_shape, out_shape, n, k)``."""
    axis = axis % ndim
    in_shape = sizes("n", ndim)
    out_shape = list(in_shape)
    out_shape[axis] = te.var("k", "int64")
    return axis, in_shape, out_shape, in_shape[axis], out_shape[axis]


def topk_order(largest: bool, av, ai, bv, bi):
    """Whether (value ``av``, index ``ai``) comes before (``bv``, ``bi``) in
    top-k's output: the larger (``largest``) or smaller value first, NaN the
    largest of all (numpy's sort order, as onnxruntime's TopK has it), equal
    values (NaNs among them) by the lower index. The GPU form orders the same."""
    if "float" in str(av.ty.dtype):
        a_nan, b_nan = tirx.isnan(av), tirx.isnan(bv)
        greater = tirx.Or(tirx.And(a_nan, tirx.Not(b_nan)), av > bv)
        less = tirx.Or(tirx.And(tirx.Not(a_nan), b_nan), av < bv)
        equal = tirx.Or(av == bv, tirx.And(a_nan, b_nan))
    else:
        greater, less, equal = av > bv, av < bv, av == bv
    return tirx.Or(greater if largest else less, tirx.And(equal, ai < bi))


def topk_params(in_shape, out_shape, dtype: str) -> tuple:
    """Names the top-k kernel being built and declares its parameters (the
    GPU form's are the same): ``(data, values, indices)``."""
    T.func_name("topk")
    return arg("data", in_shape, dtype), arg("values", out_shape, dtype), arg("indices", out_shape, "int64")


def topk(ndim: int, axis: int, dtype: str = "float32", largest: bool = True,
         is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX TopK: ``(data, values, indices)``; ``k = values.shape[axis]``.

    Values are sorted descending (``largest``) or ascending, ties broken by
    the lower index, as onnxruntime does; ``is_sorted=False`` returns the same
    (sorted) order, which ONNX allows. Each output row is a heap of the k
    best elements seen so far while the row is scanned, then sorted in place:
    O(n log k) per row, no scratch memory; NaN is the largest value (``topk_order``).
    """
    del is_sorted  # a sorted result satisfies both settings
    axis, in_shape, out_shape, n, k = topk_sizes(ndim, axis)
    rows = [d for a, d in enumerate(in_shape) if a != axis]

    def comes_before(av, ai, bv, bi):
        """Whether (av, ai) comes before (bv, bi) in the output order."""
        return topk_order(largest, av, ai, bv, bi)

    with IRBuilder() as ib, T.prim_func():
        data, values, indices = topk_params(in_shape, out_shape, dtype)
        with loops(rows) as row:
            def at(i):
                return tuple(row[:axis]) + (i,) + tuple(row[axis:])

            def before(a, b):
                return comes_before(values[at(a)], indices[at(a)], values[at(b)], indices[at(b)])

            def swap(a, b):
                v = T.bind(values[at(a)])
                i = T.bind(indices[at(a)])
                values[at(a)] = values[at(b)]
                indices[at(a)] = indices[at(b)]
                values[at(b)] = v
                indices[at(b)] = i

            with T.If(k > 0):
                with T.Then():
                    with T.serial(0, n) as i:
                        v = data[at(i)]
                        with T.If(i < k):
                            with T.Then():
                                values[at(i)] = v
                                indices[at(i)] = i
                                heap.sift_up(before, swap, i)
                            with T.Else():
                                # The root is the worst of the k kept: replaced by a better one.
                                zero = i64(0)
                                with T.If(comes_before(v, i, values[at(zero)], indices[at(zero)])):
                                    with T.Then():
                                        values[at(zero)] = v
                                        indices[at(zero)] = i
                                        heap.sift_down(before, swap, zero, k)
                    heap.sort_heap(before, swap, k)
    return ib.get()


# --------------------------------------------------------------------------- tile
def tile(in_ndim: int, out_ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """``np.tile`` into ``out`` of any shape: ``(data, out)``, data
    right-aligned, ``out[..., i_j, ...] = data[..., i_j % d_j, ...]``."""
    if out_ndim < in_ndim:
        raise ValueError(f"tile: out_ndim {out_ndim} < in_ndim {in_ndim}")
    data = te.placeholder(sizes("n", in_ndim), dtype, name="data")
    lead = out_ndim - in_ndim
    out = te.compute(
        sizes("m", out_ndim),
        lambda *idx: data[tuple(tirx.floormod(idx[lead + j], d) for j, d in enumerate(data.shape))],
        name="out")
    return te.create_prim_func([data, out]).with_attr("global_symbol", "tile")


# --------------------------------------------------------------------------- arange
def arange(dtype: str = "int64") -> tirx.PrimFunc:
    """ONNX Range / ``np.arange``: ``(start, step, out)``, start and step 0-d
    tensors, ``out[i] = start + i * step`` computed in ``dtype`` (half
    precision in float32, rounded once: ``i * step`` alone may round)."""
    start = te.placeholder((), dtype, name="start")
    step = te.placeholder((), dtype, name="step")
    compute_in = "float32" if dtype == "float16" else dtype

    def value(i):
        first, delta = (tirx.Cast(compute_in, v[()]) for v in (start, step))
        return tirx.Cast(dtype, first + tirx.Cast(compute_in, i) * delta)

    out = te.compute((te.var("n", "int64"),), value, name="out")
    return te.create_prim_func([start, step, out]).with_attr("global_symbol", "arange")


# --------------------------------------------------------------------------- pad
def pad(ndim: int, dtype: str = "float32", mode: str = "constant") -> tirx.PrimFunc:
    """ONNX Pad: ``(data, pads, value, out)``; pads int64 ``[2 * ndim]`` as
    ``[b0..b{n-1}, e0..e{n-1}]`` (negative crops), value a 0-d tensor.

    Negative pads crop first; "edge", "reflect" and "wrap" then extend the
    cropped data (``np.pad`` semantics, reflect and wrap repeating for pads
    longer than the data) and ignore ``value``. An axis cropped to nothing
    yields ``value``.
    """
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ValueError(f"pad: unsupported mode {mode!r}")
    data = te.placeholder(sizes("n", ndim), dtype, name="data")
    pads = te.placeholder((i64(2 * ndim),), "int64", name="pads")
    value = te.placeholder((), dtype, name="value")
    zero, one = i64(0), i64(1)

    def compute(*idx):
        inside, src = [], []
        for a, d in enumerate(data.shape):
            begin, end = pads[a], pads[a + ndim]
            lo = tirx.max(-begin, zero)  # first element the crop keeps
            kept = d - lo - tirx.max(-end, zero)
            p = idx[a] - tirx.max(begin, zero)  # position in the cropped data
            if mode == "constant":
                inside.append(tirx.all(p >= zero, p < kept))
            else:
                inside.append(kept > zero)
                if mode == "edge":
                    p = tirx.min(tirx.max(p, zero), kept - one)
                elif mode == "wrap":
                    p = tirx.floormod(p, tirx.max(kept, one))
                else:
                    period = tirx.max(2 * (kept - one), one)
                    p = tirx.floormod(tirx.abs(p), period)
                    p = tirx.Select(p >= kept, period - p, p)
            # Clamped so that no read leaves the buffer even where it is unused.
            src.append(tirx.min(tirx.max(lo + p, zero), d - one))
        return tirx.if_then_else(tirx.all(*inside), data[tuple(src)], value[()])

    out = te.compute(sizes("m", ndim), compute, name="out")
    return te.create_prim_func([data, pads, value, out]).with_attr("global_symbol", f"pad_{mode}")


# --------------------------------------------------------------------------- broadcast_to
def broadcast_to_te(data: te.Tensor, shape: Sequence) -> te.Tensor:
    """``broadcast_to`` that broadcasts a symbolic source dimension equal to 1
    at run time (``topi.broadcast_to`` only broadcasts a literal 1)."""
    shape = [s if str(s.ty.dtype) == "int64" else tirx.Cast("int64", s) for s in shape]
    lead = len(shape) - len(data.shape)
    if lead < 0:
        raise ValueError(f"broadcast_to: rank {len(shape)} < input rank {len(data.shape)}")
    analyzer = sym.Analyzer()

    def compute(*idx):
        src = []
        for j, d in enumerate(data.shape):
            i = idx[lead + j]
            if isinstance(d, tirx.IntImm):
                src.append(i64(0) if d.value == 1 else i)
            elif analyzer.can_prove_equal(d, shape[lead + j]):
                src.append(i)
            else:
                src.append(tirx.Select(d == 1, i64(0), i))
        return data[tuple(src)]

    return te.compute(shape, compute, name="broadcast_to")
