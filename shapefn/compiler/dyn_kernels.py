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
(nonzero, unique, NMS) live in ``count_kernels``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from tvm import ir, relax, sym, te, tirx, topi
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T


def _sizes(prefix: str, ndim: int) -> list[tirx.Var]:
    return [te.var(f"{prefix}{i}", "int64") for i in range(ndim)]


def _arg(name: str, shape: Sequence, dtype: str):
    """Declares a buffer parameter of the PrimFunc being built; returns a
    proxy that reads and writes it with ``buf[i, j]``."""
    return T.buffer_proxy(T.arg(name, tirx.decl_buffer(list(shape), dtype, name=name)))


def _local(dtype: str, init):
    """A one-element thread-local scalar, initialised to ``init``."""
    buf = T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))
    buf[0] = tirx.const(init, dtype) if isinstance(init, int | float) else init
    return buf


def _flat_view(buf, size, dtype: str):
    """A 1-D alias of ``buf``'s storage (row-major), ``size`` elements long."""
    return T.buffer_proxy(T.decl_buffer((size,), dtype, data=buf.data))


@contextlib.contextmanager
def _loops(extents: Sequence, kind=T.serial) -> Iterator[list]:
    """Nested loops over ``extents`` (outermost first); yields the loop vars."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(kind(0, e)) for e in extents]


def _i64(value: int):
    return tirx.const(value, "int64")


# --------------------------------------------------------------------------- topk
def topk(ndim: int, axis: int, dtype: str = "float32", largest: bool = True,
         is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX TopK: ``(data, values, indices)``; ``k = values.shape[axis]``.

    Values are sorted descending (``largest``) or ascending, ties broken by
    the lower index, as onnxruntime does; ``is_sorted=False`` returns the same
    (sorted) order, which ONNX allows. Each output slot ``j`` is found by one
    scan of the row for the best element ranked after slot ``j - 1``:
    O(n * k) per row, no scratch memory. NaNs are not ordered.
    """
    del is_sorted  # a sorted result satisfies both settings
    axis = axis % ndim
    in_shape = _sizes("n", ndim)
    out_shape = list(in_shape)
    out_shape[axis] = te.var("k", "int64")
    n, k = in_shape[axis], out_shape[axis]
    rows = [d for a, d in enumerate(in_shape) if a != axis]

    def before(av, ai, bv, bi):
        """Whether (av, ai) comes before (bv, bi) in the output order."""
        wins = av > bv if largest else av < bv
        return tirx.Or(wins, tirx.And(av == bv, ai < bi))

    with IRBuilder() as ib, T.prim_func():
        T.func_name("topk")
        data = _arg("data", in_shape, dtype)
        values = _arg("values", out_shape, dtype)
        indices = _arg("indices", out_shape, "int64")
        with _loops(rows) as row:
            def at(i):
                return tuple(row[:axis]) + (i,) + tuple(row[axis:])

            prev_v = _local(dtype, tirx.const(0, dtype))
            prev_i = _local("int64", -1)
            with T.serial(0, k) as j:
                best_v = _local(dtype, tirx.const(0, dtype))
                best_i = _local("int64", -1)
                with T.serial(0, n) as i:
                    v = data[at(i)]
                    ranked_after_prev = tirx.Or(prev_i[0] < 0, before(prev_v[0], prev_i[0], v, i))
                    better = tirx.Or(best_i[0] < 0, before(v, i, best_v[0], best_i[0]))
                    with T.If(tirx.And(ranked_after_prev, better)):
                        with T.Then():
                            best_v[0] = v
                            best_i[0] = i
                values[at(j)] = best_v[0]
                indices[at(j)] = best_i[0]
                prev_v[0] = best_v[0]
                prev_i[0] = best_i[0]
    return ib.get()


# --------------------------------------------------------------------------- tile
def tile(in_ndim: int, out_ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """``np.tile`` into ``out`` of any shape: ``(data, out)``, data
    right-aligned, ``out[..., i_j, ...] = data[..., i_j % d_j, ...]``."""
    if out_ndim < in_ndim:
        raise ValueError(f"tile: out_ndim {out_ndim} < in_ndim {in_ndim}")
    data = te.placeholder(_sizes("n", in_ndim), dtype, name="data")
    lead = out_ndim - in_ndim
    out = te.compute(
        _sizes("m", out_ndim),
        lambda *idx: data[tuple(tirx.floormod(idx[lead + j], d) for j, d in enumerate(data.shape))],
        name="out")
    return te.create_prim_func([data, out]).with_attr("global_symbol", "tile")


# --------------------------------------------------------------------------- arange
def arange(dtype: str = "int64") -> tirx.PrimFunc:
    """ONNX Range / ``np.arange``: ``(start, step, out)``, start and step 0-d
    tensors, ``out[i] = start + i * step`` computed in ``dtype``."""
    start = te.placeholder((), dtype, name="start")
    step = te.placeholder((), dtype, name="step")
    out = te.compute((te.var("n", "int64"),),
                     lambda i: start[()] + tirx.Cast(dtype, i) * step[()], name="out")
    return te.create_prim_func([start, step, out]).with_attr("global_symbol", "arange")


# --------------------------------------------------------------------------- resize2d
_ONNX_METHODS = {"nearest": "nearest_neighbor", "nearest_neighbor": "nearest_neighbor",
                 "linear": "linear", "bilinear": "linear", "cubic": "cubic"}


def resize2d(layout: str = "NCHW", method: str = "nearest",
             coordinate_transformation_mode: str = "half_pixel",
             rounding_method: str = "round_prefer_floor", cubic_alpha: float = -0.75,
             cubic_exclude: int = 0, extrapolation_value: float = 0.0,
             dtype: str = "float32") -> tirx.PrimFunc:
    """ONNX Resize of a 4-D tensor to ``out``'s spatial size: ``(data, out)``.

    Attributes take ONNX names and defaults (``method`` "nearest" / "linear" /
    "cubic", ``rounding_method`` is ONNX ``nearest_mode``); the computation is
    ``topi.image.resize2d``. ``tf_crop_and_resize`` needs a runtime ROI and is
    not supported.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize2d: unsupported layout {layout!r}")
    if method not in _ONNX_METHODS:
        raise ValueError(f"resize2d: unsupported method {method!r}")
    if coordinate_transformation_mode == "tf_crop_and_resize":
        raise ValueError("resize2d: tf_crop_and_resize needs a runtime ROI")
    n, c, h, w = _sizes("n", 4)
    oh, ow = te.var("oh", "int64"), te.var("ow", "int64")
    if layout == "NCHW":
        in_shape, out_shape = (n, c, h, w), [n, c, oh, ow]
    else:
        in_shape, out_shape = (n, h, w, c), [n, oh, ow, c]
    data = te.placeholder(in_shape, dtype, name="data")
    out = topi.image.resize2d(
        data, (0.0, 0.0, 1.0, 1.0), (oh, ow), layout=layout, method=_ONNX_METHODS[method],
        coordinate_transformation_mode=coordinate_transformation_mode,
        rounding_method=rounding_method, bicubic_alpha=cubic_alpha,
        bicubic_exclude=cubic_exclude, extrapolation_value=extrapolation_value,
        out_dtype=dtype, output_shape=out_shape)
    return te.create_prim_func([data, out]).with_attr("global_symbol", "resize2d")


# --------------------------------------------------------------------------- pad
def pad(ndim: int, dtype: str = "float32", mode: str = "constant") -> tirx.PrimFunc:
    """ONNX Pad: ``(data, pads, value, out)``; pads int64 ``[2 * ndim]`` as
    ``[b0..b{n-1}, e0..e{n-1}]`` (negative crops), value a 0-d tensor.

    Negative pads crop first; "edge" and "reflect" then extend the cropped
    data (``np.pad`` semantics, reflect repeating for pads longer than the
    data) and ignore ``value``. An axis cropped to nothing yields ``value``.
    """
    if mode not in ("constant", "edge", "reflect"):
        raise ValueError(f"pad: unsupported mode {mode!r}")
    data = te.placeholder(_sizes("n", ndim), dtype, name="data")
    pads = te.placeholder((2 * ndim,), "int64", name="pads")
    value = te.placeholder((), dtype, name="value")
    zero, one = _i64(0), _i64(1)

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
                else:
                    period = tirx.max(2 * (kept - one), one)
                    p = tirx.floormod(tirx.abs(p), period)
                    p = tirx.Select(p >= kept, period - p, p)
            # Clamped so that no read leaves the buffer even where it is unused.
            src.append(tirx.min(tirx.max(lo + p, zero), d - one))
        return tirx.if_then_else(tirx.all(*inside), data[tuple(src)], value[()])

    out = te.compute(_sizes("m", ndim), compute, name="out")
    return te.create_prim_func([data, pads, value, out]).with_attr("global_symbol", f"pad_{mode}")


# --------------------------------------------------------------------------- broadcast_to
def _broadcast_to_te(data: te.Tensor, shape: Sequence) -> te.Tensor:
    """``broadcast_to`` that broadcasts a symbolic source dimension equal to 1
    at run time (``topi.broadcast_to`` only broadcasts a literal 1)."""
    shape = [tirx.Cast("int64", s) if s.dtype != "int64" else s for s in shape]
    lead = len(shape) - len(data.shape)
    if lead < 0:
        raise ValueError(f"broadcast_to: rank {len(shape)} < input rank {len(data.shape)}")
    analyzer = sym.Analyzer()

    def compute(*idx):
        src = []
        for j, d in enumerate(data.shape):
            i = idx[lead + j]
            if isinstance(d, tirx.IntImm):
                src.append(tirx.const(0, i.dtype) if d.value == 1 else i)
            elif analyzer.can_prove_equal(d, shape[lead + j]):
                src.append(i)
            else:
                src.append(tirx.if_then_else(d == 1, tirx.const(0, i.dtype), i))
        return data[tuple(src)]

    return te.compute(shape, compute, name="broadcast_to")


def legalize_broadcast_to(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """Legalization of ``relax.broadcast_to`` for
    ``LegalizeOps(customize_legalize_map={"relax.broadcast_to": ...})``."""
    shape = call.args[1]
    if isinstance(shape, relax.Var):
        bound = bb.lookup_binding(shape)
        shape = bound if isinstance(bound, relax.ShapeExpr) else shape
    if isinstance(shape, relax.ShapeExpr):
        values = list(shape.values)
    else:
        values = getattr(shape.ty, "values", None)
    if values is None:  # rank-only target shape: nothing better than the default
        default = ir.Op.get("relax.broadcast_to").get_attr("FLegalize")
        return default(bb, call)
    return bb.call_te(_broadcast_to_te, call.args[0], list(values),
                      primfunc_name_hint="broadcast_to")
