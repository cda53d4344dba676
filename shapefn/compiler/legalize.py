"""Legalizations shapefn overrides in TVM's ``LegalizeOps``.

``broadcast_to`` from a size-1 dimension known only at run time and
``resize2d`` with symbolic output sizes, because TVM's are wrong there (build
failures, off-by-one pixels against onnxruntime); ``concat`` of many inputs
whose sizes along the axis are symbolic and ``scatter_elements``, because
TVM's are slow to compile there (see ``legalize_concat`` and
``legalize_scatter_elements``).
"""
from __future__ import annotations

import functools

from tvm import ir, relax, tirx, topi
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import dyn_kernels, scan_kernels
from .dyn_kernels import legalize_broadcast_to, legalize_resize2d
from .target_schedule import kernel_form

# TVM's concat reads element j from a chain of selects whose conditions and
# indices are prefix sums of the inputs' extents: with symbolic extents
# nothing folds and the kernel's code grows with the square of the number of
# inputs (compiling it takes ~0.5 s at 4 such inputs, 20 s at 32, 100 s at the 91
# in SSD-lite's post-processing). Fewer than this many stay with TVM's, which
# can fuse into its neighbours.
SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS = 4
# Inputs per sequential concat kernel. Each tensor argument costs checks in
# the kernel's entry (type, rank, dtype, shape, device) that LLVM compiles in
# time growing faster than the argument count (~0.2 s at 8, ~6 s at 64), so
# more inputs are concatenated in a tree of such kernels (one small copy per
# level; all kernels of one arity are one kernel).
SEQUENTIAL_CONCAT_MAX_INPUTS = 8


def legalize_map(gpu: bool = False) -> dict:
    """shapefn's legalizations; ``gpu``: with the GPU forms of its kernels
    (``target_schedule.kernel_form``)."""
    return {"relax.broadcast_to": legalize_broadcast_to, "relax.image.resize2d": legalize_resize2d,
            "relax.concat": functools.partial(legalize_concat, gpu=gpu),
            "relax.scatter_elements": functools.partial(legalize_scatter_elements, gpu=gpu),
            "relax.topk": functools.partial(legalize_topk, gpu=gpu),
            "relax.cumsum": functools.partial(legalize_cumulative, op="sum", gpu=gpu),
            "relax.cumprod": functools.partial(legalize_cumulative, op="prod", gpu=gpu)}


def legalize_topk(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """``relax.topk`` with a constant k (TVM 0.27 has no legalization for it)
    through shapefn's top-k kernel, the one a runtime k uses."""
    (data,) = call.args
    attrs = call.attrs
    ndim, dtype = data.ty.ndim, str(data.ty.dtype)
    values_type, indices_type = call.ty.fields if isinstance(call.ty, relax.TupleType) else (call.ty, call.ty)
    out_shape = (values_type if str(attrs.ret_type) != "indices" else indices_type).shape
    kernel = kernel_form(dyn_kernels.topk, gpu)(ndim, int(attrs.axis) % ndim, dtype, bool(attrs.largest), True)
    result = bb.emit(relax.call_tir(bb.add_func(kernel, "topk"), [data],
                                    [relax.TensorType(out_shape, dtype), relax.TensorType(out_shape, "int64")]))
    values, indices = bb.emit(relax.TupleGetItem(result, 0)), bb.emit(relax.TupleGetItem(result, 1))
    if str(attrs.dtype) != "int64":
        indices = bb.emit_te(topi.cast, indices, str(attrs.dtype))
    return {"both": relax.Tuple([values, indices]), "values": values, "indices": indices}[str(attrs.ret_type)]


def legalize_cumulative(bb: relax.BlockBuilder, call: relax.Call, op: str, gpu: bool = False) -> relax.Expr:
    """``relax.cumsum`` / ``relax.cumprod`` (no legalization in TVM 0.27)
    through ``scan_kernels.cumulative``; without an axis, over the flattened
    input, as Relax defines it."""
    (data,) = call.args
    out_dtype = str(call.ty.dtype)
    if call.attrs.axis is None:
        data = bb.emit_te(topi.reshape, data, [-1])
        axis = 0
    else:
        axis = int(call.attrs.axis)
    ndim = data.ty.ndim
    kernel = kernel_form(scan_kernels.cumulative, gpu)(ndim, axis % ndim, str(data.ty.dtype), out_dtype, op,
                                                       bool(call.attrs.exclusive))
    return relax.call_tir(bb.add_func(kernel, f"cum{op}"), [data], relax.TensorType(data.ty.shape, out_dtype))


def sequential_concat(num_inputs: int, ndim: int, axis: int, dtype: str) -> tirx.PrimFunc:
    """Concatenation along ``axis`` as one copy loop nest per input, each
    writing at its running offset: ``(x0, ..., x{n-1}, out)``. Code size is
    linear in the number of inputs; sizes off the axis are shared."""
    dims = [tirx.Var(f"d{a}", "int64") for a in range(ndim)]
    extents = [tirx.Var(f"n{k}", "int64") for k in range(num_inputs)]

    def shape(extent):
        return [extent if a == axis else d for a, d in enumerate(dims)]

    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tirx.noalias": True})
        inputs = [T.buffer_proxy(T.arg(f"x{k}", tirx.decl_buffer(shape(n), dtype, name=f"x{k}")))
                  for k, n in enumerate(extents)]
        total = sum(extents[1:], extents[0])
        out = T.buffer_proxy(T.arg("out", tirx.decl_buffer(shape(total), dtype, name="out")))
        offset = tirx.const(0, "int64")
        for x, n in zip(inputs, extents):
            with T.grid(*shape(n)) as idx:
                idx = list(idx) if ndim > 1 else [idx]
                out[tuple(i + offset if a == axis else i for a, i in enumerate(idx))] = x[tuple(idx)]
            offset = offset + n
    return ib.get()


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


_SCATTER_REDUCTIONS = {
    "update": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "mean": lambda old, new: (old + new) / 2,  # as TVM's: pairwise, in order
    "min": tirx.min,
    "max": tirx.max,
}


def scatter_elements(ndim: int, axis: int, reduction: str, dtype: str, index_dtype: str) -> tirx.PrimFunc:
    """ONNX ScatterElements: ``(data, indices, updates, out)``; ``out`` is
    ``data`` with ``out[..., indices[p], ...] = f(out[...], updates[p])`` at
    ``axis`` for every position ``p`` of ``indices`` in row-major order
    (negative indices count from the end).

    TVM's kernel walks a flat index and reads the N-d tensors through it:
    with symbolic sizes every read becomes a chain of divisions and remainders
    by products of sizes, which took LLVM minutes for Faster R-CNN's 4-d
    scatter (~650 s on a loaded 2-core machine); nested loops over the
    indices' own shape leave plain strided addressing. It also addresses
    ``data`` with the indices' sizes: wrong when the indices are narrower
    than the data in a dimension other than the first, the axis and the one
    after it (ONNX allows any indices no larger than the data).
    """
    if reduction not in _SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_elements: unsupported reduction {reduction!r}")
    combine = _SCATTER_REDUCTIONS[reduction]
    data_shape = [tirx.Var(f"d{a}", "int64") for a in range(ndim)]
    index_shape = [tirx.Var(f"i{a}", "int64") for a in range(ndim)]

    def arg(name, shape, arg_dtype):
        return T.buffer_proxy(T.arg(name, tirx.decl_buffer(shape, arg_dtype, name=name)))

    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tirx.noalias": True})
        data = arg("data", data_shape, dtype)
        indices = arg("indices", index_shape, index_dtype)
        updates = arg("updates", index_shape, dtype)
        out = arg("out", data_shape, dtype)
        with T.grid(*data_shape) as p:
            p = tuple(p) if ndim > 1 else (p,)
            out[p] = data[p]
        with T.grid(*index_shape) as p:
            p = tuple(p) if ndim > 1 else (p,)
            k = tirx.Cast("int64", indices[p])
            k = tirx.if_then_else(k < 0, k + data_shape[axis], k)
            target = p[:axis] + (k,) + p[axis + 1:]
            out[target] = combine(out[target], updates[p])
    return ib.get()


def legalize_scatter_elements(bb: relax.BlockBuilder, call: relax.Call, gpu: bool = False) -> relax.Expr:
    """``relax.scatter_elements`` through ``scatter_elements`` when the rank
    and dtypes are known; TVM's legalization otherwise."""
    data, indices, updates = call.args
    known = [getattr(t.ty, "ndim", -1) >= 1 and t.ty.dtype is not None for t in (data, indices, updates)]
    if not all(known) or call.ty.shape is None or str(call.attrs.reduction) not in _SCATTER_REDUCTIONS:
        return _default_legalization(bb, call)
    ndim = data.ty.ndim
    kernel = kernel_form(scatter_elements, gpu)(ndim, int(call.attrs.axis) % ndim, str(call.attrs.reduction),
                                                str(data.ty.dtype), str(indices.ty.dtype))
    return relax.call_tir(bb.add_func(kernel, "scatter_elements"), [data, indices, updates], call.ty)


def _default_legalization(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
