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

from collections.abc import Sequence

from tvm import ir, relax, sym, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from shapefn.compiler import heap
from shapefn.compiler.tir_builder import _arg, _i64, _local, _loops, _sizes


# --------------------------------------------------------------------------- topk
def topk(ndim: int, axis: int, dtype: str = "float32", largest: bool = True,
         is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX TopK: ``(data, values, indices)``; ``k = values.shape[axis]``.

    Values are sorted descending (``largest``) or ascending, ties broken by
    the lower index, as onnxruntime does; ``is_sorted=False`` returns the same
    (sorted) order, which ONNX allows. Each output row is a heap of the k
    best elements seen so far while the row is scanned, then sorted in place:
    O(n log k) per row, no scratch memory. NaNs are not ordered.
    """
    del is_sorted  # a sorted result satisfies both settings
    axis = axis % ndim
    in_shape = _sizes("n", ndim)
    out_shape = list(in_shape)
    out_shape[axis] = te.var("k", "int64")
    n, k = in_shape[axis], out_shape[axis]
    rows = [d for a, d in enumerate(in_shape) if a != axis]

    def comes_before(av, ai, bv, bi):
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
                                zero = _i64(0)
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
_F32 = "float32"
_METHODS = {"nearest": "nearest", "nearest_neighbor": "nearest", "linear": "linear",
            "bilinear": "linear", "cubic": "cubic"}
_COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
                     "align_corners")
_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "round")


def _f32(value):
    return tirx.Cast(_F32, value) if not isinstance(value, float) else tirx.const(value, _F32)


def _index_f32(index):
    """A non-negative index as float32. The ``fabs`` is an identity that
    keeps TVM from failing to build: when float arithmetic mixes a cast loop
    index with another cast integer and common-subexpression elimination
    binds it, ``LowerIntrin``'s bound analysis builds a float ``IntImm`` and
    aborts ("IntImm supports only int or uint or bool type")."""
    return tirx.abs(_f32(index))


def _source_coordinate(x, in_len, out_len, mode: str):
    """Where output pixel ``x`` samples the input, in float32 exactly as
    onnxruntime computes it (dividing by the scale ``out / in``); the
    identity when the size does not change."""
    xf, in_f, out_f = _index_f32(x), _f32(in_len), _f32(out_len)
    scale = out_f / in_f
    half, one = _f32(0.5), _f32(1.0)
    if mode == "half_pixel":
        coord = (xf + half) / scale - half
    elif mode == "asymmetric":
        coord = xf / scale
    elif mode == "pytorch_half_pixel":
        coord = tirx.Select(out_len > 1, (xf + half) / scale - half, _f32(0.0))
    elif mode == "tf_half_pixel_for_nn":
        coord = (xf + half) / scale
    else:  # align_corners
        coord = tirx.Select(out_len == 1, _f32(0.0), xf * (in_f - one) / (out_f - one))
    return tirx.Select(in_len == out_len, xf, coord)


def _nearest_index(coord, in_len, rounding: str):
    """onnxruntime's nearest pixel (``std::round`` rounds halves away from
    zero, TIR ``round`` to even, so halves are handled explicitly)."""
    is_half = coord == tirx.Cast(_F32, tirx.Cast("int64", coord)) + _f32(0.5)
    if rounding == "round_prefer_floor":
        index = tirx.Select(is_half, tirx.floor(coord), tirx.round(coord))
    elif rounding == "round_prefer_ceil":
        index = tirx.Select(is_half, tirx.ceil(coord), tirx.round(coord))
    elif rounding == "floor":
        index = tirx.floor(coord)
    elif rounding == "ceil":
        index = tirx.ceil(coord)
    else:  # "round", Relax's default: half to even
        index = tirx.round(coord)
    return tirx.min(tirx.max(tirx.Cast("int64", index), _i64(0)), in_len - 1)


def _linear_taps(coord, in_len):
    """Two input positions and their weights, as onnxruntime's bilinear setup."""
    coord = tirx.max(_f32(0.0), tirx.min(coord, _f32(in_len - 1)))
    lo = tirx.min(tirx.Cast("int64", coord), in_len - 1)
    hi = tirx.min(lo + 1, in_len - 1)
    same = lo == hi
    w_lo = tirx.Select(same, _f32(0.5), tirx.abs(coord - _index_f32(hi)))  # weight of lo
    w_hi = tirx.Select(same, _f32(0.5), tirx.abs(coord - _index_f32(lo)))
    return [(lo, w_lo), (hi, w_hi)]


def _cubic_taps(coord, in_len, alpha: float, exclude_outside: bool):
    """Four input positions (clamped) and their Keys-cubic weights."""
    base = tirx.Cast("int64", tirx.floor(coord))
    s = tirx.abs(coord - _f32(base))
    a = _f32(alpha)

    def outer(t):  # weights of the two outer taps, t = |distance| in [1, 2]
        return ((a * t - _f32(5.0) * a) * t + _f32(8.0) * a) * t - _f32(4.0) * a

    def inner(t):  # weights of the two inner taps, t in [0, 1]
        return ((a + _f32(2.0)) * t - (a + _f32(3.0))) * t * t + _f32(1.0)

    one, two = _f32(1.0), _f32(2.0)
    weights = [outer(s + one), inner(s), inner(one - s), outer(two - s)]
    positions = [base - 1 + i for i in range(4)]
    if exclude_outside:
        weights = [tirx.Select(tirx.all(p >= 0, p < in_len), w, _f32(0.0))
                   for p, w in zip(positions, weights, strict=True)]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [w / total for w in weights]
    clamped = [tirx.min(tirx.max(p, _i64(0)), in_len - 1) for p in positions]
    return list(zip(clamped, weights, strict=True))


def _check_resize(layout: str, method: str, coordinate_transformation_mode: str,
                  rounding_method: str) -> None:
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize2d: unsupported layout {layout!r}")
    if method not in _METHODS:
        raise ValueError(f"resize2d: unsupported method {method!r}")
    if coordinate_transformation_mode not in _COORDINATE_MODES:
        raise ValueError(f"resize2d: unsupported coordinate_transformation_mode "
                         f"{coordinate_transformation_mode!r}")
    if rounding_method not in _ROUNDING:
        raise ValueError(f"resize2d: unsupported rounding_method {rounding_method!r}")


def _resize2d_te(data: te.Tensor, size: Sequence, layout: str, method: str,
                 coordinate_transformation_mode: str, rounding_method: str, cubic_alpha: float,
                 cubic_exclude: int, dtype: str) -> te.Tensor:
    """Resize of ``data`` to spatial ``size`` (height, width) as a TE compute."""
    method = _METHODS[method]
    h_axis, w_axis = (2, 3) if layout == "NCHW" else (1, 2)
    out_shape = list(data.shape)
    out_shape[h_axis], out_shape[w_axis] = size

    def taps(idx, axis):
        coord = _source_coordinate(idx[axis], data.shape[axis], out_shape[axis],
                                   coordinate_transformation_mode)
        if method == "nearest":
            return [(_nearest_index(coord, data.shape[axis], rounding_method), None)]
        if method == "linear":
            return _linear_taps(coord, data.shape[axis])
        return _cubic_taps(coord, data.shape[axis], cubic_alpha, bool(cubic_exclude))

    def compute(*idx):
        total = None
        for y, wy in taps(idx, h_axis):
            row = None
            for x, wx in taps(idx, w_axis):
                src = list(idx)
                src[h_axis], src[w_axis] = y, x
                value = data[tuple(src)]
                if wx is None:
                    return tirx.Cast(dtype, value)
                term = wx * _f32(value)
                row = term if row is None else row + term
            total = row * wy if total is None else total + row * wy
        return tirx.Cast(dtype, total)

    return te.compute(out_shape, compute, name="resize2d")


def resize2d(layout: str = "NCHW", method: str = "nearest",
             coordinate_transformation_mode: str = "half_pixel",
             rounding_method: str = "round_prefer_floor", cubic_alpha: float = -0.75,
             cubic_exclude: int = 0, extrapolation_value: float = 0.0,
             dtype: str = "float32") -> tirx.PrimFunc:
    """ONNX Resize of a 4-D tensor to ``out``'s spatial size: ``(data, out)``.

    Attributes take ONNX names and defaults (``method`` "nearest" / "linear" /
    "cubic", ``rounding_method`` is ONNX ``nearest_mode``, or "round" for
    TIR's round-half-to-even as Relax's default). The arithmetic follows
    onnxruntime's float32 formulas rather than ``topi.image.resize2d``, which
    multiplies by the inverse scale (a different nearest pixel at some sizes)
    and, with symbolic sizes, fails to build for linear/cubic with
    align_corners or asymmetric. ``extrapolation_value`` only matters for
    ``tf_crop_and_resize``, which needs a runtime ROI and is not supported.
    """
    del extrapolation_value
    _check_resize(layout, method, coordinate_transformation_mode, rounding_method)
    data = te.placeholder(_sizes("n", 4), dtype, name="data")
    out = _resize2d_te(data, (te.var("oh", "int64"), te.var("ow", "int64")), layout, method,
                       coordinate_transformation_mode, rounding_method, cubic_alpha,
                       cubic_exclude, dtype)
    return te.create_prim_func([data, out]).with_attr("global_symbol", "resize2d")


def _shape_values(bb: relax.BlockBuilder, shape: relax.Expr):
    """The PrimExprs of a Relax shape argument, or None when only its rank is known."""
    if isinstance(shape, relax.Var):
        bound = bb.lookup_binding(shape)
        shape = bound if isinstance(bound, relax.ShapeExpr) else shape
    if isinstance(shape, relax.ShapeExpr):
        return list(shape.values)
    values = getattr(shape.ty, "values", None)
    return None if values is None else list(values)


def _default_legalization(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)


def legalize_resize2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """Legalization of ``relax.image.resize2d`` through ``resize2d``'s
    computation (for ``LegalizeOps(customize_legalize_map=...)``); falls back
    to TVM's for what it does not cover (tf_crop_and_resize, packed layouts).
    Relax's ``rounding_method=""`` is read as TVM does: "round" with
    align_corners, else "floor"."""
    attrs = call.attrs
    mode = str(attrs.coordinate_transformation_mode)
    rounding = str(attrs.rounding_method) or ("round" if mode == "align_corners" else "floor")
    size = _shape_values(bb, call.args[1])
    try:
        _check_resize(str(attrs.layout), str(attrs.method), mode, rounding)
    except ValueError:
        size = None
    if size is None:
        return _default_legalization(bb, call)
    dtype = str(attrs.out_dtype) if attrs.out_dtype is not None else str(call.args[0].ty.dtype)
    size = [v if str(v.ty.dtype) == "int64" else tirx.Cast("int64", v) for v in size]
    return bb.call_te(_resize2d_te, call.args[0], size, str(attrs.layout), str(attrs.method), mode,
                      rounding, float(attrs.cubic_alpha), int(attrs.cubic_exclude), dtype,
                      primfunc_name_hint="resize2d")


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
                src.append(_i64(0) if d.value == 1 else i)
            elif analyzer.can_prove_equal(d, shape[lead + j]):
                src.append(i)
            else:
                src.append(tirx.Select(d == 1, _i64(0), i))
        return data[tuple(src)]

    return te.compute(shape, compute, name="broadcast_to")


def legalize_broadcast_to(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """Legalization of ``relax.broadcast_to`` for
    ``LegalizeOps(customize_legalize_map={"relax.broadcast_to": ...})``."""
    values = _shape_values(bb, call.args[1])
    if values is None:  # rank-only target shape: nothing better than the default
        return _default_legalization(bb, call)
    return bb.call_te(_broadcast_to_te, call.args[0], values, primfunc_name_hint="broadcast_to")
