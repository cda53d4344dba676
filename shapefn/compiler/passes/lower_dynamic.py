"""Lowers Relax's data-dependent ops through the shape-function registry.

Runs before TVM's legalization. Each op whose output shape depends on input
values becomes: a host shape-function call (the VM hands it what the op's
mask says), a ``match_cast`` binding fresh size variables, and a kernel whose
output carries those variables. Count-sized ops (nonzero, unique, NMS) get an
upper bound, a kernel that writes a count, a read of that count alone, and a
view of the exact result. Everything else is left to TVM. Which ops are
lowered, and how, is one table (``_LOWERINGS``: op name -> the method).

For a GPU target the kernels are shapefn's GPU forms where there are some
(``target_schedule.kernel_form``), top-k kernels made by ``shapefn.compiler.ops``
before the target was known included.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax, tirx

from ..kernels import count as count_kernels
from ..kernels import dynamic as dynamic_kernels
from ..kernels.concat import sequential_concat
from ..kernels.slicing import slice_extents, strided_slice
from ..schedules.target_schedule import kernel_form
from ..shape_calls import emit_count, emit_shape, emit_view

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@dataclass(frozen=True)
class _Lowering:
    """How the pass lowers calls of one Relax op."""

    method: str                       # the _DynamicOps method: (call) -> the lowered expression
    counted: bool = False             # count-sized: lowered once per scope (the count is read back)
    unknown_shape_only: bool = False  # only calls whose result's shape is unknown


_BROADCASTING = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.floor_divide",
                 "relax.power", "relax.maximum", "relax.minimum", "relax.equal", "relax.not_equal",
                 "relax.less", "relax.less_equal", "relax.greater", "relax.greater_equal", "relax.logical_and",
                 "relax.logical_or", "relax.logical_xor", "relax.bitwise_and", "relax.bitwise_or",
                 "relax.bitwise_xor", "relax.left_shift", "relax.right_shift", "relax.atan2", "relax.where",
                 "relax.floor_mod", "relax.mod")
# Relax op name -> its lowering. Ops with a shape argument made from a
# tensor's value (``R.tensor_to_shape``) go through ``_from_runtime_shape``.
_LOWERINGS: dict[str, _Lowering] = {
    "relax.nonzero": _Lowering("_nonzero", counted=True),
    "relax.unique": _Lowering("_unique", counted=True),
    "relax.vision.all_class_non_max_suppression": _Lowering("_nms", counted=True),
    "relax.dynamic_strided_slice": _Lowering("_strided_slice"),
    **{name: _Lowering("_from_runtime_shape") for name in ("relax.reshape", "relax.full", "relax.zeros", "relax.ones",
                                                            "relax.broadcast_to", "relax.image.resize2d")},
    **{name: _Lowering("_broadcasting", unknown_shape_only=True) for name in _BROADCASTING},
    "relax.concat": _Lowering("_concat", unknown_shape_only=True),
    "relax.matmul": _Lowering("_batched_matmul", unknown_shape_only=True),
}


def _unknown_shape(call: relax.Call) -> bool:
    ty = call.ty
    return isinstance(ty, relax.TensorType) and ty.shape is None and ty.ndim >= 0


def _rank_only(expr: relax.Expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and ty.shape is None and ty.ndim >= 0 and ty.dtype is not None


def _dtype(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


def _ndim(expr: relax.Expr) -> int:
    ndim = expr.ty.ndim
    if ndim < 0:
        raise ValueError(f"shapefn needs the rank of {expr} to lower a data-dependent op")
    return ndim


@relax.expr_functor.mutator
class _Lowering(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, gpu: bool):
        super().__init__(mod)
        self._mod = mod
        self._gpu = gpu
        self._kernels: dict[str, relax.GlobalVar] = {}
        self._seen: list[dict] = [{}]  # per scope: count-sized call -> its lowered value
        self._host_values: dict[int, bool] = {}  # var -> may be on the host
        self._function = "main"  # the function being lowered

    def run(self) -> tvm.IRModule:
        for gv, func in self._mod.functions.items():
            if isinstance(func, relax.Function):
                self._function = gv.name_hint
                self.builder_.update_func(gv, self.visit_expr(func))
            elif self._gpu and isinstance(func, tvm.tirx.PrimFunc):
                gpu_form = _gpu_topk(gv.name_hint, func)
                if gpu_form is not None:
                    self.builder_.update_func(gv, gpu_form)
        return self.builder_.get()

    def _kernel(self, name: str, func) -> relax.GlobalVar:
        if name not in self._kernels:
            self._kernels[name] = self.builder_.add_func(func, name)
        return self._kernels[name]

    def _source(self, shape: relax.Expr) -> relax.Expr | None:
        """The tensor whose value ``shape`` holds, if it is bound to
        ``R.tensor_to_shape(tensor)``."""
        if not isinstance(shape, relax.Var):
            return None
        value = self.lookup_binding(shape)
        if isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.tensor_to_shape":
            return value.args[0]
        return None

    def _from_shapes(self, expr: relax.Expr) -> bool:
        """Whether ``expr`` may be on the host: computed from shapes and
        constants alone (placement keeps it there), or from a parameter of a
        function other than ``main`` (a loop's body, whose small tensors
        ``host_params`` may move to the host: Mask R-CNN's paste-masks loop
        reads each box there). ``main``'s parameters and kernels' results
        are on the device."""
        if isinstance(expr, (relax.ShapeExpr, tvm.ir.GenericConst)) or isinstance(expr.ty, tvm.ir.PrimType):
            return True
        if not isinstance(expr, relax.Var):
            return False
        key = expr.__chandle__()
        if key not in self._host_values:
            self._host_values[key] = False  # (until shown otherwise)
            value = self.lookup_binding(expr)
            if value is None:  # (a parameter)
                self._host_values[key] = self._function != "main"
            elif isinstance(value, relax.Var):
                self._host_values[key] = self._from_shapes(value)
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op != _CALL_TIR:
                self._host_values[key] = all(self._from_shapes(a) for a in value.args
                                             if isinstance(a.ty, relax.TensorType))
        return self._host_values[key]

    def visit_seq_expr_(self, seq: relax.SeqExpr) -> relax.Expr:
        self._seen.append({})
        try:
            return super().visit_seq_expr_(seq)
        finally:
            self._seen.pop()

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self._with_known_shapes(super().visit_call_(call))
        rule = _LOWERINGS.get(getattr(call.op, "name", None))
        if rule is None or (rule.unknown_shape_only and not _unknown_shape(call)):
            return call
        lower = getattr(self, rule.method)
        if not rule.counted:
            return lower(call)
        # Exporters repeat count-sized ops (SSD-lite runs each class's
        # nonzero twice) and each costs a read of its count: compute each
        # once per scope.
        k = tvm_ffi.StructuralKey(call)
        for scope in reversed(self._seen):
            if k in scope:
                return scope[k]
        bound = self.builder_.emit(lower(call))
        self._seen[-1][k] = bound
        return bound

    def _with_known_shapes(self, call: relax.Call) -> relax.Call:
        """An op whose tensor operands have a rank but no shape (results of
        calls and Ifs: a recursive function's result type cannot name the
        sizes) gets them cast to fresh sizes, read from the values at run
        time; TVM legalizes only ops whose operand shapes it knows."""
        if not isinstance(call.op, tvm.ir.Op) or not any(_rank_only(a) for a in call.args):
            return call
        bb = self.builder_
        args = []
        for a in call.args:
            if _rank_only(a):
                dims = [tvm.tirx.Var(f"{a.name if isinstance(a, relax.Var) else 'arg'}_{i}", "int64")
                        for i in range(a.ty.ndim)]
                a = bb.match_cast(a, relax.TensorType(dims, a.ty.dtype))
            args.append(a)
        return bb.normalize(relax.Call(call.op, args, call.attrs, call.ty_args))

    def _broadcasting(self, call: relax.Call) -> relax.Expr:
        """An elementwise op on operands with unrelated symbolic sizes (which
        may be 1 only at run time): the host broadcasts the shapes, the
        operands are broadcast to them, and the op sees equal shapes."""
        tensors = [a for a in call.args if isinstance(a.ty, relax.TensorType)]
        if any(t.ty.shape is None for t in tensors) or len(tensors) not in (2, 3):
            return call
        bb = self.builder_
        ndim = max(t.ty.ndim for t in tensors)
        op = "shapefn.broadcast" if len(tensors) == 2 else "shapefn.broadcast3"
        (dims,) = emit_shape(bb, op, tensors, [ndim], prefix="bcast")
        target = relax.ShapeExpr(dims)
        args = [bb.emit(relax.op.broadcast_to(a, target)) if isinstance(a.ty, relax.TensorType) else a
                for a in call.args]
        return relax.Call(call.op, args, call.attrs, call.ty_args)

    def _batched_matmul(self, call: relax.Call) -> relax.Expr:
        """A matmul whose batch sizes are unrelated symbols (which may be 1
        only at run time; Relax cannot type it): the host broadcasts the
        batch shapes, both operands are broadcast to them, and the matmul
        sees equal batch sizes."""
        a, b = call.args
        if any(t.ty.shape is None or t.ty.ndim < 2 for t in (a, b)):
            return call
        bb = self.builder_
        ndim = max(a.ty.ndim, b.ty.ndim) - 2
        (batch,) = emit_shape(bb, "shapefn.matmul_batch", [a, b], [ndim], prefix="batch")
        a, b = (bb.emit(relax.op.broadcast_to(t, relax.ShapeExpr([*batch, *t.ty.shape.values[-2:]])))
                for t in (a, b))
        return relax.Call(call.op, [a, b], call.attrs, call.ty_args)

    def _concat(self, call: relax.Call) -> relax.Expr:
        """Concat whose inputs' other sizes are symbolically unrelated (Relax
        cannot type it): a kernel that reads each input with its own sizes;
        the output takes the first input's sizes off the axis (ONNX and Relax
        require them equal; concat does not broadcast)."""
        (fields,) = call.args
        bb = self.builder_
        if isinstance(fields, relax.Tuple):
            tensors = list(fields.fields)
        elif isinstance(fields.ty, relax.TupleType):
            tensors = [bb.emit(relax.TupleGetItem(fields, i)) for i in range(len(fields.ty.fields))]
        else:
            return call
        if not tensors or any(t.ty.shape is None for t in tensors):
            return call
        ndim, dtype = _ndim(tensors[0]), _dtype(tensors[0])
        axis = int(call.attrs.axis)
        axis = axis + ndim if axis < 0 else axis
        dims = list(tensors[0].ty.shape.values)
        dims[axis] = sum((t.ty.shape.values[axis] for t in tensors[1:]), dims[axis])
        kernel = self._kernel(f"shapefn_concat_{len(tensors)}x{ndim}d_{axis}_{dtype}",
                              kernel_form(sequential_concat, self._gpu)(len(tensors), ndim, axis, dtype))
        return relax.call_tir(kernel, tensors, relax.TensorType(dims, dtype))

    def _strided_slice(self, call: relax.Call) -> relax.Expr:
        """The shape function reads begin/end/strides (ndim values each):
        those shapes and constants give are on the host already. Where two
        or three come from the device, a kernel there computes the extents
        and the shape function reads those instead (ndim values: what TVM
        reads, computing the shape on the device too)."""
        bb = self.builder_
        data, begin, end, strides = call.args
        ndim, dtype = _ndim(data), _dtype(data)
        from_device = sum(not self._from_shapes(v) for v in (begin, end, strides))
        read_parameters = data.ty.shape is None or from_device < 2
        if read_parameters:
            (dims,) = emit_shape(bb, "relax.dynamic_strided_slice", [data, begin, end, strides], [ndim],
                                 prefix="slice")
        begin, end, strides = (v if _dtype(v) == "int64" else bb.emit(relax.op.astype(v, "int64"))
                               for v in (begin, end, strides))
        if not read_parameters:
            kernel = self._kernel(f"shapefn_slice_extents_{ndim}d_{dtype}", slice_extents(ndim, dtype))
            extents = bb.emit(relax.call_tir(kernel, [data, begin, end, strides], relax.TensorType([ndim], "int64")))
            (dims,) = emit_shape(bb, "shapefn.slice_extents", [data, extents], [ndim], prefix="slice")
        kernel = self._kernel(f"shapefn_strided_slice_{ndim}d_{dtype}", strided_slice(ndim, dtype))
        return relax.call_tir(kernel, [data, begin, strides], relax.TensorType(dims, dtype))

    def _from_runtime_shape(self, call: relax.Call) -> relax.Expr:
        """``op(..., R.tensor_to_shape(t))``: the shape function reads t's value
        (with -1 / 0 / broadcasting rules applied on the host); the op then
        gets a shape of fresh size variables that TVM legalizes as usual."""
        name = call.op.name
        shape_arg = 0 if name in ("relax.full", "relax.zeros", "relax.ones") else 1
        source = self._source(call.args[shape_arg])
        if source is None:
            return call
        bb = self.builder_
        ndim = call.ty.ndim
        if name == "relax.full":
            inputs, attrs = [call.args[1], source], ()
        elif name in ("relax.zeros", "relax.ones"):
            inputs, attrs = [source], ()
        elif name == "relax.broadcast_to":
            inputs, attrs = [call.args[0], source], (0,)
        elif name == "relax.image.resize2d":
            layout = str(call.attrs.layout)
            if layout not in ("NCHW", "NHWC"):
                return call
            inputs, attrs = [call.args[0], source], (0 if layout == "NCHW" else 1,)
        else:
            inputs, attrs = [call.args[0], source], ()
        (dims,) = emit_shape(bb, name, inputs, [ndim], attrs, prefix=name.split(".")[-1])
        if name == "relax.image.resize2d":
            spatial = dims[2:] if str(call.attrs.layout) == "NCHW" else dims[1:3]
            args = [call.args[0], relax.ShapeExpr(spatial), *call.args[2:]]
        else:
            args = list(call.args)
            args[shape_arg] = relax.ShapeExpr(dims)
        return relax.Call(call.op, args, call.attrs, call.ty_args)

    def _nonzero(self, call: relax.Call) -> relax.Expr:
        bb = self.builder_
        (data,) = call.args
        ndim, dtype = _ndim(data), _dtype(data)
        ((rows, upper),) = emit_shape(bb, "relax.nonzero", [data], [2], prefix="nonzero")
        kernel = self._kernel(f"shapefn_nonzero_{ndim}d_{dtype}",
                              kernel_form(count_kernels.nonzero, self._gpu)(ndim, dtype))
        result = bb.emit(relax.call_tir(kernel, [data], [relax.TensorType([rows, upper], "int64"),
                                                         relax.TensorType([1], "int64")]))
        count = emit_count(bb, bb.emit(relax.TupleGetItem(result, 1)), "nonzero")
        return emit_view(bb, bb.emit(relax.TupleGetItem(result, 0)), [rows, count], "int64")

    def _unique(self, call: relax.Call) -> relax.Expr:
        data, is_sorted, return_index, return_inverse, return_counts, *axis = call.args
        flags = [bool(f.value if hasattr(f, "value") else f) for f in (return_index, return_inverse, return_counts)]
        if axis:
            return self._unique_slices(call, data, _constant_bool(is_sorted), flags, _axis_value(axis[0]))
        bb = self.builder_
        if not _constant_bool(is_sorted):
            # In order of first occurrence: the slices kernel over elements.
            numel = math.prod(data.ty.shape.values) if _ndim(data) else tirx.IntImm("int64", 1)
            flat = bb.emit(relax.op.reshape(data, relax.ShapeExpr([numel])))
            return self._unique_slices(call, flat, False, flags, 0)
        dtype = _dtype(data)
        shapes = emit_shape(bb, "relax.unique", [data], [1, 1, 1, 1], prefix="unique")
        (upper,), (numel,) = shapes[0], shapes[2]
        ndim = _ndim(data)
        kernel = self._kernel(f"shapefn_unique_{ndim}d_{dtype}",
                              kernel_form(count_kernels.unique, self._gpu)(dtype, ndim))
        result = bb.emit(relax.call_tir(kernel, [data], [
            relax.TensorType([upper], dtype), relax.TensorType([upper], "int64"),
            relax.TensorType([numel], "int64"), relax.TensorType([upper], "int64"),
            relax.TensorType([1], "int64")]))
        count = emit_count(bb, bb.emit(relax.TupleGetItem(result, 4)), "unique")
        values = emit_view(bb, bb.emit(relax.TupleGetItem(result, 0)), [count], dtype)
        outputs = [values]
        for flag, k, exact in zip(flags, (1, 2, 3), (True, False, True)):
            if flag:
                item = bb.emit(relax.TupleGetItem(result, k))
                outputs.append(emit_view(bb, item, [count], "int64") if exact else item)
        return outputs[0] if len(outputs) == 1 else relax.Tuple(outputs)

    def _unique_slices(self, call, data, is_sorted: bool, flags, axis: int) -> relax.Expr:
        """Unique along ``axis``: the axis moved first and the rest flattened
        into rows of one kernel (``count_kernels.unique_slices``); only the
        count is read back. Sizes come from the input's shape: no shape function."""
        bb = self.builder_
        ndim, dtype = _ndim(data), _dtype(data)
        axis %= ndim
        dims = list(data.ty.shape.values)
        rest = [d for a, d in enumerate(dims) if a != axis]
        perm = [axis] + [a for a in range(ndim) if a != axis]
        rows, width = dims[axis], math.prod(rest) if rest else tirx.IntImm("int64", 1)
        moved = bb.emit(relax.op.reshape(relax.op.permute_dims(data, perm), relax.ShapeExpr([rows, width])))
        kernel = self._kernel(f"shapefn_unique_slices_{dtype}_{'sorted' if is_sorted else 'first'}",
                              kernel_form(count_kernels.unique_slices, self._gpu)(dtype, is_sorted))
        result = bb.emit(relax.call_tir(kernel, [moved], [
            relax.TensorType([rows, width], dtype), relax.TensorType([rows], "int64"),
            relax.TensorType([rows], "int64"), relax.TensorType([rows], "int64"), relax.TensorType([1], "int64")]))
        count = emit_count(bb, bb.emit(relax.TupleGetItem(result, 4)), "unique")
        slices = emit_view(bb, bb.emit(relax.TupleGetItem(result, 0)), [count, width], dtype)
        slices = bb.emit(relax.op.reshape(slices, relax.ShapeExpr([count, *rest])))
        outputs = [bb.emit(relax.op.permute_dims(slices, [perm.index(a) for a in range(ndim)]))]
        for flag, k, exact in zip(flags, (1, 2, 3), (True, False, True)):
            if flag:
                item = bb.emit(relax.TupleGetItem(result, k))
                outputs.append(emit_view(bb, item, [count], "int64") if exact else item)
        return outputs[0] if len(outputs) == 1 else relax.Tuple(outputs)

    def _nms(self, call: relax.Call) -> relax.Expr:
        bb = self.builder_
        boxes, scores, max_out, iou, score_threshold = call.args
        if str(call.attrs.output_format) != "onnx":
            raise NotImplementedError("shapefn lowers all_class_non_max_suppression with output_format='onnx'")
        ((upper, three),) = emit_shape(bb, "relax.vision.all_class_non_max_suppression",
                                       [boxes, scores, max_out, iou, score_threshold], [2], prefix="nms")
        kernel = self._kernel("shapefn_non_max_suppression",
                              kernel_form(count_kernels.non_max_suppression, self._gpu)())
        args = [boxes, scores] + [_as_vector(bb, v, d) for v, d in ((max_out, "int64"), (iou, "float32"),
                                                                       (score_threshold, "float32"))]
        result = bb.emit(relax.call_tir(kernel, args, [relax.TensorType([upper, three], "int64"),
                                                       relax.TensorType([1], "int64")]))
        count_tensor = bb.emit(relax.TupleGetItem(result, 1))
        count = emit_count(bb, count_tensor, "nms")
        selected = emit_view(bb, bb.emit(relax.TupleGetItem(result, 0)), [count, three], "int64")
        # Relax's op returns (selected rows, upper bound; number valid): keep that
        # contract with the exact rows, so downstream trimming is a no-op.
        return relax.Tuple([selected, count_tensor])


def _constant_bool(value) -> bool:
    return bool(value.value if hasattr(value, "value") else value)


def _axis_value(value) -> int:
    return int(value.value if hasattr(value, "value") else value)


def _as_vector(bb: relax.BlockBuilder, value: relax.Expr, dtype: str) -> relax.Expr:
    """A scalar operand as a 1-element tensor of ``dtype``."""
    if isinstance(getattr(value, "ty", None), tvm.ir.PrimType):
        value = relax.const(value.value, dtype)
    if _dtype(value) != dtype:
        value = bb.emit(relax.op.astype(value, dtype))
    if _ndim(value) == 0:
        value = bb.emit(relax.op.reshape(value, [1]))
    return value


# How ``shapefn.compiler.ops.topk`` names its kernels.
_TOPK_NAME = re.compile(r"shapefn_topk_(\d+)d_(\d+)_(\w+)_([01])([01])")


def _gpu_topk(name: str, func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc | None:
    """The GPU form of a top-k kernel ``shapefn.compiler.ops.topk`` put in the module
    (recognised by its name, confirmed by its structure), if there is one."""
    match = _TOPK_NAME.fullmatch(name)
    gpu_form = kernel_form(dynamic_kernels.topk, gpu=True)
    if match is None or gpu_form is dynamic_kernels.topk:
        return None
    ndim, axis, dtype, largest, is_sorted = match.groups()
    args = (int(ndim), int(axis), dtype, largest == "1", is_sorted == "1")
    if not tvm_ffi.structural_equal(func, dynamic_kernels.topk(*args)):
        return None
    return gpu_form(*args)


def lower_dynamic_ops(mod: tvm.IRModule, gpu: bool = False) -> tvm.IRModule:
    """The module with every data-dependent op lowered through the registry;
    ``gpu``: with the kernels' GPU forms."""
    return _Lowering(mod, gpu).run()
