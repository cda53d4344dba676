"""Legalizations shapefn overrides in TVM's ``LegalizeOps``.

``conv2d`` and ``matmul`` by constants and ``roi_align`` on the CPU, whose
defaults are far from the machine's speed (``kernels/cpu_conv.py``,
``kernels/cpu_depthwise.py``, ``kernels/cpu_dense.py``,
``kernels/cpu_roi_align.py``); ``relu``, ``clip``, ``maximum`` and ``minimum``,
which give a number for NaN where ONNX keeps NaN;
``broadcast_to`` from a size-1 dimension known only at run time and
``resize2d`` with symbolic output sizes, because TVM's are wrong there (build
failures, off-by-one pixels against onnxruntime); ``concat`` of many inputs
whose sizes along the axis are symbolic and ``scatter_elements``, because
TVM's are slow to compile there (see ``legalize_concat`` and
``legalize_scatter_elements``).
"""
from __future__ import annotations

import functools

import tvm
from tvm import ir, relax, te, tirx, topi

from ..kernels import cpu_conv, cpu_dense, cpu_depthwise, cpu_roi_align, dynamic, gather, resize, scan
from ..kernels.concat import sequential_concat
from ..kernels.scatter import SCATTER_REDUCTIONS, scatter_elements, scatter_nd
from ..schedules.target_schedule import host_cpu_features, kernel_form
from .placement import is_tensor_const

# TVM's concat reads element j from a chain of selects whose conditions and
# indices are prefix sums of the inputs' extents: with symbolic extents
# nothing folds and the kernel's code, and its compile time, grow with the
# square of the number of inputs (docs/bench/compiler.md). Fewer than this
# many stay with TVM's, which can fuse into its neighbours.
SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS = 4
# Inputs per sequential concat kernel. Each tensor argument costs checks in
# the kernel's entry (type, rank, dtype, shape, device) that LLVM compiles in
# time growing faster than the argument count (docs/bench/compiler.md: 0.1 s
# at 16, 6 s at 64), so more inputs are concatenated in a tree of such
# kernels (one small copy per level; all kernels of one arity are one kernel).
SEQUENTIAL_CONCAT_MAX_INPUTS = 16


def legalize_map(gpu: bool = False) -> dict:
    """shapefn's legalizations; ``gpu``: with the GPU forms of its kernels
    (``target_schedule.kernel_form``)."""
    # GEMM-like ops by constant weights, as register-tiled CPU kernels
    cpu_gemms = {"relax.nn.conv2d": legalize_conv2d, "relax.nn.conv2d_transpose": legalize_conv2d_transpose,
                 "relax.vision.roi_align": legalize_roi_align}
    return {"relax.broadcast_to": legalize_broadcast_to, "relax.image.resize2d": legalize_resize2d,
            "relax.concat": functools.partial(legalize_concat, gpu=gpu),
            "relax.scatter_elements": functools.partial(legalize_scatter_elements, gpu=gpu),
            "relax.scatter_nd": functools.partial(legalize_scatter_nd, gpu=gpu),
            "relax.topk": functools.partial(legalize_topk, gpu=gpu),
            "relax.sort": functools.partial(legalize_sort, gpu=gpu, output="values"),
            "relax.argsort": functools.partial(legalize_sort, gpu=gpu, output="indices"),
            "relax.cumsum": functools.partial(legalize_cumulative, op="sum", gpu=gpu),
            "relax.cumprod": functools.partial(legalize_cumulative, op="prod", gpu=gpu),
            "relax.nn.relu": legalize_relu, "relax.clip": legalize_clip,
            "relax.maximum": functools.partial(legalize_extremum, op="max"),
            "relax.minimum": functools.partial(legalize_extremum, op="min"),
            "relax.max": functools.partial(legalize_reduction, op="max"),
            "relax.argmax": functools.partial(legalize_arg_extreme, op="max"),
            "relax.argmin": functools.partial(legalize_arg_extreme, op="min"),
            "relax.min": functools.partial(legalize_reduction, op="min"),
            "relax.mean": functools.partial(legalize_reduction, op="mean"),
            "relax.take": legalize_take, "relax.gather_nd": legalize_gather_nd,
            "relax.matmul": functools.partial(legalize_matmul, gpu=gpu),
            "relax.nn.softmax": legalize_softmax,
            "relax.gather_elements": legalize_gather_elements,
            **{op: legalize_reshape for op in RESHAPES},
            **({"relax.vision.roi_align": legalize_roi_align_gpu} if gpu else cpu_gemms)}


def _vector_lanes() -> int:
    target = tvm.target.Target.current()
    return cpu_conv.lanes(host_cpu_features(target) if target is not None else ())


def legalize_roi_align(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A CPU RoIAlign of a fixed number of samples per bin over NCHW float32
    maps as ``cpu_roi_align``'s kernel; any other as TVM's."""
    attrs = call.attrs
    data, rois = call.args
    if str(attrs.layout) != "NCHW" or str(attrs.mode) not in ("avg", "max") or int(attrs.sample_ratio) <= 0 \
            or {str(data.ty.dtype), str(rois.ty.dtype)} != {"float32"}:
        return _default_legalization(bb, call)
    return bb.call_te(cpu_roi_align.roi_align_te, data, rois, [int(s) for s in attrs.pooled_size],
                      float(attrs.spatial_scale), int(attrs.sample_ratio), bool(attrs.aligned),
                      str(attrs.mode), primfunc_name_hint="roi_align",
                      primfunc_attrs={cpu_roi_align.ROI_ALIGN_ATTR: True})


def legalize_roi_align_gpu(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """TVM's RoIAlign, kept out of fusion as the CPU's is (its own schedule
    takes no epilogue): a model makes the same kernel calls on every device."""
    legalized = _default_legalization(bb, call)
    kernel = legalized.args[0]
    bb.update_func(kernel, bb.get()[kernel].with_attr("op_pattern", 8))  # kOpaque
    return legalized


def legalize_matmul(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """A half-precision matmul accumulating in float32 (as numpy, ONNX's
    reference and GPU libraries do: summed in float16, a row of 64 products
    is 2 ulp off); a CPU matmul of a float32 matrix by a constant one as
    ``cpu_dense``'s register-tiled kernel, its weight packed here; any other
    as TVM's."""
    data, other = call.args
    dtype = str(call.attrs.out_dtype or data.ty.dtype)
    if dtype == "float16" and {str(data.ty.dtype), str(other.ty.dtype)} == {"float16"}:
        wide = bb.emit(_default_legalization(bb, bb.normalize(relax.op.matmul(data, other, out_dtype="float32"))))
        return bb.call_te(topi.cast, wide, "float16", primfunc_name_hint="cast")
    if gpu or not is_tensor_const(other) or data.ty.ndim != 2 or other.ty.ndim != 2 \
            or {str(data.ty.dtype), str(other.ty.dtype), dtype} != {"float32"}:
        return _default_legalization(bb, call)  # (a transposed constant is folded to one: relax_passes)
    weight = other.value.numpy()
    packed = relax.const(cpu_dense.pack_weight(weight, _vector_lanes()))
    return bb.call_te(cpu_dense.dense_te, data, packed, int(weight.shape[1]), dtype, primfunc_name_hint="dense")


def legalize_softmax(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A half-precision softmax rounded as numpy rounds it (ONNX's reference):
    each exponential and the division computed in float32 and rounded to
    float16, the exponentials summed in float32 and the sum rounded once
    (summed in float16, the sum drifts by ulps); any other as TVM's."""
    (data,) = call.args
    if str(data.ty.dtype) != "float16":
        return _default_legalization(bb, call)
    return bb.call_te(_half_softmax, data, int(call.attrs.axis) % data.ty.ndim, primfunc_name_hint="softmax")


def _half_softmax(x: te.Tensor, axis: int) -> te.Tensor:
    def wide(t):
        return topi.cast(t, "float32")

    def half(t):
        return topi.cast(t, "float16")

    shifted = topi.subtract(x, topi.max(x, axis=axis, keepdims=True))
    exps = half(topi.exp(wide(shifted)))
    total = half(topi.sum(wide(exps), axis=axis, keepdims=True))
    return half(topi.divide(wide(exps), wide(total)))


def legalize_conv2d_transpose(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A CPU transposed convolution whose stride equals its kernel, without
    padding, groups or dilation (Mask R-CNN's mask upsampling), as a packed
    1x1 convolution spread over blocks (``cpu_conv.transposed_weight``); any
    other as TVM's."""
    attrs = call.attrs
    data, weight = call.args
    dtype = str(attrs.out_dtype or data.ty.dtype)
    kernel = [int(d) for d in weight.ty.shape.values[2:]] if is_tensor_const(weight) else None
    if (kernel is None or [int(s) for s in attrs.strides] != kernel or any(int(p) for p in attrs.padding)
            or any(int(p) for p in attrs.output_padding) or any(int(d) != 1 for d in attrs.dilation)
            or int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "IOHW"
            or str(attrs.out_layout) != "NCHW" or {str(data.ty.dtype), str(weight.ty.dtype), dtype} != {"float32"}):
        return _default_legalization(bb, call)
    as_conv = cpu_conv.transposed_weight(weight.value.numpy())
    packed = relax.const(cpu_conv.pack_weight(as_conv, _vector_lanes()))
    return bb.call_te(cpu_conv.conv2d_te, data, packed, as_conv.shape[0], [1, 1], [0, 0, 0, 0], [1, 1], dtype,
                      kernel, primfunc_name_hint="conv2d_transpose")


def legalize_conv2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A CPU convolution of NCHW data with a constant OIHW weight as
    ``cpu_conv``'s register-tiled kernel (one group; its weight packed
    here) or ``cpu_depthwise``'s (one input channel per group); any other
    convolution as TVM's."""
    attrs = call.attrs
    data, weight = call.args
    dtype = str(attrs.out_dtype or data.ty.dtype)
    if (not is_tensor_const(weight) or str(attrs.data_layout) != "NCHW"
            or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) != "NCHW"
            or {str(data.ty.dtype), str(weight.ty.dtype), dtype} != {"float32"}):
        return _default_legalization(bb, call)
    groups = int(attrs.groups)
    if groups != 1:
        if int(weight.ty.shape[1]) != 1:  # (one input channel per group: depthwise)
            return _default_legalization(bb, call)
        return bb.call_te(cpu_depthwise.depthwise_te, data, weight, groups, [int(s) for s in attrs.strides],
                          [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation], dtype,
                          _vector_lanes(), primfunc_name_hint="depthwise_conv2d")
    packed = relax.const(cpu_conv.pack_weight(weight.value.numpy(), _vector_lanes()))
    return bb.call_te(cpu_conv.conv2d_te, data, packed, int(weight.ty.shape[0]),
                      [int(s) for s in attrs.strides], [int(p) for p in attrs.padding],
                      [int(d) for d in attrs.dilation], dtype, primfunc_name_hint="conv2d")


# Gathers read their indices from tensors, which may hold anything at run
# time: an index out of range is clamped to the nearest element (onnxruntime
# raises; a kernel on a GPU device cannot, and TVM's default reads out of
# bounds, which crashed the process: found by fuzzing).
# Gathers are injective: each output element reads elements of its inputs
# found from its own index. TVM's pattern analysis sees a load indexed by a
# load and calls them opaque, which keeps them out of fusion: an index
# computation and the gather that uses it would be two kernels.
_GATHER = {"op_pattern": 2}  # kInjective


# Ops that only reshape: their kernels are marked ``RESHAPE`` (a kernel left
# unfused becomes a view: ``rewrites.reshapes_as_views``).
RESHAPES = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")
RESHAPE = "shapefn.reshape"


def legalize_reshape(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """TVM's legalization, its kernel marked ``RESHAPE``."""
    lowered = _default_legalization(bb, call)
    if isinstance(lowered, relax.Call) and isinstance(lowered.op, ir.Op) and lowered.op.name == "relax.call_tir":
        gv = lowered.args[0]
        bb.update_func(gv, bb.get()[gv].with_attr(RESHAPE, True))
    return lowered


def legalize_take(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``relax.take`` with every index checked (``kernels/gather.py``):
    ``mode="fast"``, which the importer's Gather and shapefn's converters
    use, as ONNX's Gather defines; "clip" and "wrap" as TVM's."""
    if str(call.attrs.mode) != "fast":
        return bb.call_te(topi.take, call.args[0], call.args[1], call.attrs.axis, mode=str(call.attrs.mode),
                          primfunc_name_hint="take", primfunc_attrs=_GATHER)
    axis = None if call.attrs.axis is None else int(call.attrs.axis)
    return bb.call_te(gather.take, call.args[0], call.args[1], axis, primfunc_name_hint="take",
                      primfunc_attrs=_GATHER)


def legalize_gather_nd(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``relax.gather_nd`` with every index checked (``kernels/gather.py``)."""
    return bb.call_te(gather.gather_nd, call.args[0], call.args[1], int(call.attrs.batch_dims),
                      primfunc_name_hint="gather_nd", primfunc_attrs=_GATHER)


def legalize_gather_elements(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``relax.gather_elements`` with every index checked (``kernels/gather.py``)."""
    return bb.call_te(gather.gather_elements, call.args[0], call.args[1], int(call.attrs.axis),
                      primfunc_name_hint="gather_elements", primfunc_attrs=_GATHER)


# What a reduction over nothing gives, as onnxruntime has it (ReduceMax of an
# empty float tensor is -inf; TVM's identity is the lowest finite value), by
# op and dtype kind; absent: TVM's identity is right.
_EMPTY_REDUCTION = {("max", "f"): float("-inf"), ("min", "f"): float("inf"), ("mean", "f"): 0.0, ("mean", "i"): 0,
                    ("mean", "u"): 0}


def legalize_reduction(bb: relax.BlockBuilder, call: relax.Call, op: str) -> relax.Expr:
    """``relax.max`` / ``min`` / ``mean`` that give onnxruntime's value where
    the reduced axes hold nothing at run time (``_EMPTY_REDUCTION``; TVM
    handles only sizes 0 known at import time); a mean of integers does not
    divide by 0 there."""
    data = call.args[0]
    dtype = str(data.ty.dtype)
    empty = _EMPTY_REDUCTION.get((op, "f" if "float" in dtype else dtype[0]))
    if empty is None or data.ty.shape is None:
        return _default_legalization(bb, call)
    ndim = data.ty.ndim
    axes = [int(a) % ndim for a in call.attrs.axis] if call.attrs.axis is not None else list(range(ndim))
    keepdims = bool(call.attrs.keepdims)

    def reduce(x):
        count = functools.reduce(lambda a, b: a * b, [x.shape[a] for a in axes], tirx.const(1, "int64"))
        if op == "mean":
            total = topi.sum(x, axes, keepdims)

            def value(*i):
                mean = (total(*i) / tirx.Cast(dtype, count) if "float" in dtype
                        else tirx.truncdiv(total(*i), tirx.Cast(dtype, tirx.max(count, 1))))
                return tirx.if_then_else(count == 0, tirx.const(empty, dtype), mean)
        else:
            result = _extreme(x, axes, keepdims, op)

            def value(*i):
                return tirx.if_then_else(count == 0, tirx.const(empty, dtype), result(*i))
        shape = [1 if a in axes else d for a, d in enumerate(x.shape)] if keepdims \
            else [d for a, d in enumerate(x.shape) if a not in axes]
        return te.compute(shape, value, name=op)

    return bb.call_te(reduce, data, primfunc_name_hint=op)


def _extreme(x: te.Tensor, axes: list, keepdims: bool, op: str):
    """The max (or min) of ``x`` over ``axes``, NaN wherever one is there
    (numpy's and ONNX's reference's rule). Floats are compared as integers
    that sort as they do (``_order_keys``), because TVM's float max starts
    from the lowest finite value: over a row of -inf (a fully masked
    attention row) it gives that value, not -inf. The integer reduction is
    one TVM's GPU rules schedule like any other."""
    reduce = topi.max if op == "max" else topi.min
    dtype = str(x.dtype)
    if "float" not in dtype:
        return reduce(x, axes, keepdims)
    best = reduce(_order_keys(x, nan_first=op), axes, keepdims)
    return te.compute(best.shape, lambda *i: _key_value(best(*i), dtype), name=op)


def legalize_arg_extreme(bb: relax.BlockBuilder, call: relax.Call, op: str) -> relax.Expr:
    """``relax.argmax`` / ``argmin`` of floats: the first NaN wherever one is
    there (numpy's and ONNX's reference's rule), else the first extreme;
    the same integer keys as ``_extreme``."""
    data = call.args[0]
    if "float" not in str(data.ty.dtype) or data.ty.shape is None:
        return _default_legalization(bb, call)
    axis = None if call.attrs.axis is None else int(call.attrs.axis)
    reduce = topi.argmax if op == "max" else topi.argmin

    def arg_extreme(x):
        return reduce(_order_keys(x, nan_first=op), axis, bool(call.attrs.keepdims))

    return bb.call_te(arg_extreme, data, primfunc_name_hint=f"arg{op}")


def _order_keys(x: te.Tensor, nan_first: str) -> te.Tensor:
    """Each float of ``x`` as an integer of its width that sorts as the
    floats do (the sign bit kept, the other bits of a negative one flipped),
    NaN as the integer that the reduction ``nan_first`` ("max" or "min")
    picks before any other."""
    dtype = str(x.dtype)
    bits = tvm.DataType(dtype).bits
    itype = f"int{bits}"
    nan_key = tirx.max_value(itype) if nan_first == "max" else tirx.min_value(itype)

    def key(*i):
        return tirx.if_then_else(tirx.isnan(x(*i)), nan_key, _flipped(tirx.reinterpret(itype, x(*i)), bits))

    return te.compute(x.shape, key, name="order_key")


def _flipped(word, bits: int):
    """``_order_keys``' map of a float's bits, its own inverse (the sign bit is kept)."""
    itype = f"int{bits}"
    return word ^ ((word >> tirx.const(bits - 1, itype)) & tirx.const((1 << (bits - 1)) - 1, itype))


def _key_value(key, dtype: str):
    """The float an ``_order_keys`` key stands for (a NaN's: a NaN)."""
    return tirx.reinterpret(dtype, _flipped(key, tvm.DataType(dtype).bits))


def legalize_relu(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``relax.nn.relu`` keeping NaN, as ONNX's Relu (onnxruntime) does:
    TVM's ``max(x, 0)`` compiles to a compare-and-select that gives 0."""
    (data,) = call.args
    if "float" not in str(data.ty.dtype):
        return _default_legalization(bb, call)

    def relu(x):
        zero = tirx.const(0, x.dtype)
        return te.compute(x.shape, lambda *i: _nan_kept(x(*i), tirx.max(x(*i), zero)), name="relu")

    return bb.call_te(relu, data, primfunc_name_hint="relu")


def legalize_clip(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``relax.clip`` keeping NaN, as ONNX's Clip and HardSigmoid do (a NaN
    ``alpha`` makes every element NaN there); TVM's clip gives a bound."""
    data, low, high = call.args
    if "float" not in str(data.ty.dtype):
        return _default_legalization(bb, call)

    def clip(x, a_min, a_max):
        a_min, a_max = tirx.Cast(x.dtype, a_min), tirx.Cast(x.dtype, a_max)
        return te.compute(x.shape, lambda *i: _nan_kept(x(*i), tirx.max(tirx.min(x(*i), a_max), a_min)), name="clip")

    return bb.call_te(clip, data, low, high, primfunc_name_hint="clip")


def legalize_extremum(bb: relax.BlockBuilder, call: relax.Call, op: str) -> relax.Expr:
    """``relax.maximum`` / ``minimum`` of floats with NaN from either side,
    as ONNX's Max and Min (onnxruntime) give it and as Clip before opset 11
    (a maximum and a minimum with infinite bounds) needs it."""
    a, b = call.args
    if "float" not in str(call.ty.dtype) or call.ty.shape is None:
        return _default_legalization(bb, call)
    extremum = tirx.max if op == "max" else tirx.min

    def compute(x, y):
        shape = list(call.ty.shape.values)

        def value(*i):
            u, v = _broadcast_read(x, i), _broadcast_read(y, i)
            return _nan_kept(u, _nan_kept(v, extremum(u, v)))

        return te.compute(shape, value, name=op)

    return bb.call_te(compute, a, b, primfunc_name_hint=f"{op}imum")


def _broadcast_read(tensor, index):
    """``tensor`` read at output ``index`` as numpy broadcasts it (its
    trailing axes; an axis of literal size 1 at 0), as TVM's broadcast does."""
    if not isinstance(tensor, te.Tensor):
        return tensor
    rank = len(tensor.shape)
    tail = index[len(index) - rank:]
    return tensor(*[0 if isinstance(d, tirx.IntImm) and d.value == 1 else i for d, i in zip(tensor.shape, tail)])


def _nan_kept(value, result):
    return tirx.Select(tirx.isnan(value), value, result)


def legalize_topk(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """``relax.topk`` with a constant k (TVM 0.27 has no legalization for it)
    through shapefn's top-k kernel, the one a runtime k uses."""
    (data,) = call.args
    attrs = call.attrs
    ndim, dtype = data.ty.ndim, str(data.ty.dtype)
    values_type, indices_type = call.ty.fields if isinstance(call.ty, relax.TupleType) else (call.ty, call.ty)
    out_shape = (values_type if str(attrs.ret_type) != "indices" else indices_type).shape
    kernel = kernel_form(dynamic.topk, gpu)(ndim, int(attrs.axis) % ndim, dtype, bool(attrs.largest), True)
    result = bb.emit(relax.call_tir(bb.add_func(kernel, "topk"), [data],
                                    [relax.TensorType(out_shape, dtype), relax.TensorType(out_shape, "int64")]))
    values, indices = bb.emit(relax.TupleGetItem(result, 0)), bb.emit(relax.TupleGetItem(result, 1))
    if str(attrs.dtype) != "int64":
        indices = bb.emit_te(topi.cast, indices, str(attrs.dtype))
    return {"both": relax.Tuple([values, indices]), "values": values, "indices": indices}[str(attrs.ret_type)]


def legalize_sort(bb: relax.BlockBuilder, call: relax.Call, output: str, gpu: bool = False) -> relax.Expr:
    """``relax.sort`` (``output="values"``) and ``relax.argsort``
    (``"indices"``) through shapefn's top-k kernel with k the whole axis:
    stable (equal values by the lower index, in either direction), NaN the
    largest value, as top-k orders them. (TVM's own lowering of the two,
    ``DispatchSortScan``, calls a packed function of TVM's runtime on CPUs.)"""
    (data,) = call.args
    ndim, dtype = data.ty.ndim, str(data.ty.dtype)
    if ndim == 0:
        return data if output == "values" else bb.emit(relax.const(0, str(call.attrs.dtype)))
    shape = data.ty.shape
    kernel = kernel_form(dynamic.topk, gpu)(ndim, int(call.attrs.axis) % ndim, dtype, bool(call.attrs.descending), True)
    result = bb.emit(relax.call_tir(bb.add_func(kernel, "sort"), [data],
                                    [relax.TensorType(shape, dtype), relax.TensorType(shape, "int64")]))
    if output == "values":
        return bb.emit(relax.TupleGetItem(result, 0))
    indices = bb.emit(relax.TupleGetItem(result, 1))
    if str(call.attrs.dtype) != "int64":
        indices = bb.emit_te(topi.cast, indices, str(call.attrs.dtype))
    return indices


def legalize_cumulative(bb: relax.BlockBuilder, call: relax.Call, op: str, gpu: bool = False) -> relax.Expr:
    """``relax.cumsum`` / ``relax.cumprod`` (no legalization in TVM 0.27)
    through ``scan.cumulative``; without an axis, over the flattened
    input, as Relax defines it."""
    (data,) = call.args
    out_dtype = str(call.ty.dtype)
    if call.attrs.axis is None:
        data = bb.emit_te(topi.reshape, data, [-1])
        axis = 0
    else:
        axis = int(call.attrs.axis)
    ndim = data.ty.ndim
    kernel = kernel_form(scan.cumulative, gpu)(ndim, axis % ndim, str(data.ty.dtype), out_dtype, op,
                                                       bool(call.attrs.exclusive))
    return relax.call_tir(bb.add_func(kernel, f"cum{op}"), [data], relax.TensorType(data.ty.shape, out_dtype))


def legalize_concat(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """``relax.concat`` through ``sequential_concat`` kernels when at least
    ``SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS`` inputs have a symbolic extent
    along the axis; TVM's legalization otherwise."""
    (fields,) = call.args
    out_type = call.ty
    shapes = [getattr(f.ty, "shape", None) for f in fields.fields] if isinstance(fields, relax.Tuple) else None
    if not shapes or any(not isinstance(s, relax.ShapeExpr) for s in shapes) \
            or not isinstance(out_type, relax.TensorType) or out_type.shape is None:
        return _default_legalization(bb, call)
    ndim = len(shapes[0].values)
    axis = int(call.attrs.axis) % ndim
    if sum(not isinstance(s.values[axis], tirx.IntImm) for s in shapes) < SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS:
        return _default_legalization(bb, call)
    dtype = str(out_type.dtype)
    group = SEQUENTIAL_CONCAT_MAX_INPUTS
    tensors = list(fields.fields)
    while len(tensors) > group:
        tensors = [_concat_call(bb, tensors[i:i + group], axis, dtype, gpu)
                   for i in range(0, len(tensors), group)]
    return relax.call_tir(_kernel(bb, len(tensors), ndim, axis, dtype, gpu), tensors, out_type)


def _concat_call(bb: relax.BlockBuilder, tensors: list, axis: int, dtype: str, gpu: bool) -> relax.Expr:
    """A variable bound to the sequential concat of ``tensors`` (one tensor as is)."""
    if len(tensors) == 1:
        return tensors[0]
    dims = list(tensors[0].ty.shape.values)
    dims[axis] = sum((t.ty.shape.values[axis] for t in tensors[1:]), dims[axis])
    return bb.emit(relax.call_tir(_kernel(bb, len(tensors), len(dims), axis, dtype, gpu), tensors,
                                  relax.TensorType(dims, dtype)))


def _kernel(bb: relax.BlockBuilder, num_inputs: int, ndim: int, axis: int, dtype: str, gpu: bool) -> relax.GlobalVar:
    return bb.add_func(kernel_form(sequential_concat, gpu)(num_inputs, ndim, axis, dtype), "concat")


def legalize_scatter_elements(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """``relax.scatter_elements`` through ``scatter_elements`` when the rank
    and dtypes are known; TVM's legalization otherwise."""
    data, indices, updates = call.args
    known = [getattr(t.ty, "ndim", -1) >= 1 and t.ty.dtype is not None for t in (data, indices, updates)]
    if not all(known) or call.ty.shape is None or str(call.attrs.reduction) not in SCATTER_REDUCTIONS:
        return _default_legalization(bb, call)
    ndim = data.ty.ndim
    kernel = kernel_form(scatter_elements, gpu)(ndim, int(call.attrs.axis) % ndim, str(call.attrs.reduction),
                                                str(data.ty.dtype), str(indices.ty.dtype))
    return relax.call_tir(bb.add_func(kernel, "scatter_elements"), [data, indices, updates], call.ty)


def legalize_scatter_nd(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """``relax.scatter_nd`` through ``scatter_nd``, every coordinate checked,
    when the ranks, dtypes and the index tuples' length are known; TVM's
    legalization otherwise."""
    data, indices, updates = call.args
    known = [getattr(t.ty, "ndim", -1) >= 1 and t.ty.dtype is not None for t in (data, indices, updates)]
    shape = getattr(indices.ty, "shape", None)
    reduction = str(call.attrs.reduction)
    if not all(known) or shape is None or not isinstance(shape.values[-1], tirx.IntImm) \
            or (reduction != "update" and reduction not in SCATTER_REDUCTIONS):
        return _default_legalization(bb, call)
    kernel = kernel_form(scatter_nd, gpu)(data.ty.ndim, indices.ty.ndim, int(shape.values[-1]), reduction,
                                          str(data.ty.dtype), str(indices.ty.dtype))
    return relax.call_tir(bb.add_func(kernel, "scatter_nd"), [data, indices, updates], call.ty)


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
        resize.check_resize(str(attrs.layout), str(attrs.method), mode, rounding)
    except ValueError:
        size = None
    if size is None:
        return _default_legalization(bb, call)
    dtype = str(attrs.out_dtype) if attrs.out_dtype is not None else str(call.args[0].ty.dtype)
    size = [v if str(v.ty.dtype) == "int64" else tirx.Cast("int64", v) for v in size]
    return bb.call_te(resize.resize2d_te, call.args[0], size, str(attrs.layout), str(attrs.method), mode,
                      rounding, float(attrs.cubic_alpha), int(attrs.cubic_exclude), dtype,
                      primfunc_name_hint="resize2d")


def legalize_broadcast_to(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """Legalization of ``relax.broadcast_to`` for
    ``LegalizeOps(customize_legalize_map={"relax.broadcast_to": ...})``."""
    values = _shape_values(bb, call.args[1])
    if values is None:  # rank-only target shape: nothing better than the default
        return _default_legalization(bb, call)
    return bb.call_te(dynamic.broadcast_to_te, call.args[0], values, primfunc_name_hint="broadcast_to")


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
