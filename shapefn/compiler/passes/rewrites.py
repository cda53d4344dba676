"""Rewrites before legalization that leave fewer kernels.

**Values known from sizes.** Exporters compute shapes, indices and limits
with small integer tensors: ONNX's ``Shape -> Gather -> Add -> Where``
normalizing a negative index, ``ReduceMin(Concat(count, 300))`` taking the
smaller of a count and a limit. Each such operation is a kernel of its own,
and a tensor read as a shape (``tensor_to_shape``, a shape function's value
input) is read on the host from a kernel's output. Here the elements of
every small integer tensor that follow from sizes and constants are tracked
as size expressions, and

* a tensor whose elements are all known becomes a constant, or one
  ``shape_to_tensor`` of its size expressions (reshaped), which fuses with
  what uses it;
* ``tensor_to_shape`` of one becomes the shape itself;
* a shape function's value input that is one becomes a shape (1-d) or an
  integer (0-d), which the VM hands over from its registers: no kernel runs
  for it.

Only expressions the VM's integer instructions compute are used
(``size_registers._ARITH`` and its comparisons).

**Constant runs.** Detection models label each class's boxes with
``full(count_k, k)`` and concatenate the labels of all classes: a kernel
per class, and a tree of concatenations. A concatenation of fills becomes
one kernel that writes each element the value of the run it falls in.

**Clamps by constants.** ONNX ``Clip`` with its bounds as inputs imports as
``minimum(maximum(x, lo), hi)`` of scalar constants: broadcasts, which
fusion does not put after a convolution. They become ``clip``, elementwise.

**Nonzero of a comparison.** ``nonzero(x > threshold)`` (any comparison
with a scalar constant), of a 1-D ``x`` or of a column ``take(scores, k,
axis=1)``, is one kernel that compares where it reads: torchvision's
detection heads keep each class's candidates so. The shape of a
``nonzero`` result is ``(ndim, numel)`` of its input, known from its type:
no shape function is called for it.

**Reshapes as views** (``reshapes_as_views``, after fusion): a kernel left
alone that only reshapes (legalized from a reshape, ``legalize.RESHAPE``,
or so by TVM's ``has_reshape_pattern``) becomes a view of
its input's storage (``shapefn.view``): tensors are compact, nothing is
copied.

**Gathers read by several operations.** A ``take`` or ``strided_slice``
whose result feeds several operations that fusion cannot put into one
kernel (a comparison before a ``nonzero`` and a ``gather_nd`` after it) is
computed once per user instead: each copy fuses into its user, and the
gathered tensor is never stored.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, s_tir, te, tirx

from ..kernels import count as count_kernels
from ..schedules.target_schedule import kernel_form
from ..shape_calls import SHAPE_FUNC, VIEW
from .legalize import RESHAPE
from .placement import SMALL_ELEMENTS, is_tensor_const

__all__ = ["fewer_kernels", "reshape_calls_replaced", "reshapes_as_views"]

_INT_DTYPES = ("int64", "int32")
_REDUCTIONS = {"relax.min": tirx.min, "relax.max": tirx.max, "relax.sum": lambda a, b: a + b,
               "relax.prod": lambda a, b: a * b}
_BINARY = {"relax.add": lambda a, b: a + b, "relax.subtract": lambda a, b: a - b,
           "relax.multiply": lambda a, b: a * b, "relax.floor_divide": tirx.floordiv,
           "relax.floor_mod": tirx.floormod, "relax.maximum": tirx.max, "relax.minimum": tirx.min,
           "relax.less": lambda a, b: a < b, "relax.greater": lambda a, b: a > b,
           "relax.less_equal": lambda a, b: a <= b, "relax.greater_equal": lambda a, b: a >= b,
           "relax.equal": tirx.EQ, "relax.not_equal": tirx.NE,
           "relax.logical_and": tirx.And, "relax.logical_or": tirx.Or}
_SAME_VALUES = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")
# Nodes the VM's integer instructions compute (compiler/codegen/size_registers.py).
_EXPRESSIBLE = (tirx.IntImm, tirx.Var, tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min,
                tirx.Max, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE, tirx.And, tirx.Or, tirx.Not,
                tirx.Cast)
# call_pure_packed(shapefn.shape_func, op name, attributes, *inputs)
_SHAPE_FUNC_INPUTS = 3
# (lower_dynamic.py) nonzero of a 1-D bool tensor.
_NONZERO_1D = "shapefn_nonzero_1d_bool"
# Users a gather is copied into: operations that fuse with an injective producer.
_GATHER_USERS = ("relax.gather_nd", "relax.take", "relax.where", "relax.astype", *_BINARY)


def fewer_kernels(mod: tvm.IRModule, gpu: bool = False) -> tvm.IRModule:
    """``mod`` with the rewrites of the module's docstring; kernels it adds
    in their GPU forms if ``gpu``."""
    sizes = _SizeValues(mod, gpu)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            sizes.builder_.update_func(gv, relax.analysis.remove_all_unused(sizes.visit_expr(func)))
    mod = sizes.builder_.get()
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = relax.analysis.remove_all_unused(_GatherPerUser(mod).visit_expr(func))
    return mod


def reshapes_as_views(mod: tvm.IRModule) -> tvm.IRModule:
    """Calls of reshape kernels (see the module's docstring) as ``shapefn.view``."""
    return reshape_calls_replaced(
        mod, lambda data, ty: relax.op.call_pure_packed(VIEW, data, ty.shape, ty_args=ty))


def reshape_calls_replaced(mod: tvm.IRModule, replacement, in_dataflow_only: bool = False) -> tvm.IRModule:
    """Each call of a kernel that only reshapes (legalized from a reshape,
    ``legalize.RESHAPE``, or so by TVM's ``has_reshape_pattern``, asked only
    of kernels written as blocks: it fails on others) replaced by
    ``replacement(data, out_type)``; with ``in_dataflow_only``, only calls in
    dataflow blocks."""
    reshapes = {gv.name_hint for gv, func in mod.functions.items()
                if isinstance(func, tirx.PrimFunc) and (
                    func.attrs is not None and bool(func.attrs.get(RESHAPE, False))
                    or isinstance(func.body, s_tir.SBlockRealize) and relax.analysis.has_reshape_pattern(func))}
    if not reshapes:
        return mod
    calls = _ReshapeCalls(reshapes, replacement, in_dataflow_only, mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = calls.visit_expr(func)
    return mod


@relax.expr_functor.mutator
class _ReshapeCalls(relax.PyExprMutator):
    def __init__(self, reshapes: set, replacement, in_dataflow_only: bool, mod: tvm.IRModule):
        super().__init__(mod)
        self._reshapes, self._replacement = reshapes, replacement
        self._in_dataflow_only, self._in_dataflow = in_dataflow_only, False

    def visit_dataflow_block_(self, block: relax.DataflowBlock) -> relax.BindingBlock:
        self._in_dataflow = True
        try:
            return super().visit_dataflow_block_(block)
        finally:
            self._in_dataflow = False

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir"
                and call.args[0].name_hint in self._reshapes and isinstance(call.args[1], relax.Tuple)
                and (self._in_dataflow or not self._in_dataflow_only)):
            return call
        data = call.args[1].fields[0]
        out = call.ty
        if not (isinstance(data.ty, relax.TensorType) and isinstance(out, relax.TensorType)
                and isinstance(out.shape, relax.ShapeExpr) and str(data.ty.dtype) == str(out.dtype)):
            return call
        return self._replacement(data, out)


class _Known:
    """A small tensor's elements (row-major) as int64 size expressions,
    and its static shape."""

    def __init__(self, shape: tuple[int, ...], values: list):
        self.shape, self.values = shape, values


def _static_shape(ty) -> tuple[int, ...] | None:
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = ty.shape.values
    if not all(isinstance(d, tirx.IntImm) for d in dims):
        return None
    shape = tuple(int(d.value) for d in dims)
    return shape if int(np.prod(shape, dtype=np.int64)) <= SMALL_ELEMENTS else None


def _expressible(expr) -> bool:
    unexpressible = []

    def visit(node):
        if not isinstance(node, _EXPRESSIBLE):
            unexpressible.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(expr, [(tvm.ir.Expr, visit)], order="pre")
    return not unexpressible


def _int64(values: list) -> list:
    """Size expressions as int64 (comparisons are bool)."""
    return [v if str(v.ty) == "int64" else tirx.Cast("int64", v) for v in values]


def _int(expr) -> int | None:
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


@relax.expr_functor.mutator
class _SizeValues(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, gpu: bool):
        super().__init__(mod)
        self._gpu = gpu
        self._analyzer = tvm.sym.Analyzer()
        self._memo: dict = {}

    # -- what is known --------------------------------------------------------

    def known(self, expr: relax.Expr) -> _Known | None:
        """The elements of ``expr`` if they follow from sizes and constants."""
        if isinstance(expr, relax.Var):
            if expr not in self._memo:
                bound = self.lookup_binding(expr)
                self._memo[expr] = self.known(bound) if bound is not None else None
            return self._memo[expr]
        if is_tensor_const(expr):
            return self._known_const(expr)
        if isinstance(expr, relax.Call):
            return self._known_call(expr)
        return None

    def _known_const(self, const) -> _Known | None:
        array = const.value.numpy()
        if array.size > SMALL_ELEMENTS or not (np.issubdtype(array.dtype, np.integer) or array.dtype == bool):
            return None
        return _Known(array.shape, [tirx.IntImm("int64", int(v)) for v in array.reshape(-1)])

    def _simplified(self, values, shape) -> _Known | None:
        values = [self._analyzer.simplify(v) for v in values]
        return _Known(tuple(shape), values) if all(_expressible(v) for v in values) else None

    def _known_call(self, call: relax.Call) -> _Known | None:
        if not isinstance(call.op, tvm.ir.Op):
            return None
        name = call.op.name
        out = _static_shape(call.ty)
        dtype = str(call.ty.dtype) if isinstance(call.ty, relax.TensorType) else None
        if out is None or dtype not in (*_INT_DTYPES, "bool"):
            return None
        if name == "relax.shape_to_tensor":
            shape = call.args[0]
            dims = shape.values if isinstance(shape, relax.ShapeExpr) else getattr(shape.ty, "values", None)
            if dims is None:
                return None
            return self._simplified([tirx.Cast("int64", d) if str(d.ty) != "int64" else d for d in dims], out)
        if name in _SAME_VALUES or name == "relax.astype" and str(call.args[0].ty.dtype) in (*_INT_DTYPES, "bool"):
            data = self.known(call.args[0])
            return _Known(out, data.values) if data is not None else None
        if name in _REDUCTIONS:
            data = self.known(call.args[0])
            if data is None or not data.values or call.attrs.axis is not None and len(data.shape) > 1:
                return None
            return self._simplified([functools.reduce(_REDUCTIONS[name], data.values)], out)
        if name == "relax.take":
            return self._take(call, out)
        if name == "relax.strided_slice":
            return self._strided_slice(call, out)
        if name == "relax.concat":
            parts = [self.known(t) for t in call.args[0].fields] if isinstance(call.args[0], relax.Tuple) else None
            if parts is None or any(p is None or len(p.shape) != 1 for p in parts):
                return None
            return _Known(out, [v for p in parts for v in p.values])
        if name in _BINARY:
            a, b = self.known(call.args[0]), self.known(call.args[1])
            pairs = _broadcast(a, b, out)
            return self._simplified([_BINARY[name](x, y) for x, y in pairs], out) if pairs else None
        if name == "relax.where":
            c, a, b = (self.known(x) for x in call.args)
            triples = _broadcast3(c, a, b, out)
            if triples is None:
                return None
            return self._simplified([y + tirx.Cast("int64", x) * (t - y) for x, t, y in triples], out)
        return None

    def _take(self, call, out) -> _Known | None:
        data, indices = self.known(call.args[0]), self.known(call.args[1])
        if data is None or indices is None or len(data.shape) != 1:
            return None
        n, picked = data.shape[0], []
        for i in indices.values:
            i = _int(self._analyzer.simplify(i))
            if i is None or n == 0:
                return None
            if call.attrs.mode == "wrap":
                i %= n
            elif i < 0:
                i += n
            if not 0 <= i < n:
                return None
            picked.append(data.values[i])
        return _Known(out, picked)

    def _strided_slice(self, call, out) -> _Known | None:
        data = self.known(call.args[0])
        if data is None or len(data.shape) != 1:
            return None
        fields = [[_int(f.value) for f in arg.fields] for arg in call.args[1:]]
        step = fields[3][0] if len(fields) > 3 else 1
        if any(v is None for f in fields for v in f) or fields[0] not in ([0], [-1]) or step == 0:
            return None
        values = data.values[fields[1][0]:fields[2][0]:step]
        return _Known(out, values) if len(values) == int(np.prod(out, dtype=np.int64)) else None

    # -- rewrites -----------------------------------------------------------

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        if call.op.name == "relax.call_pure_packed" and call.args[0].global_symbol == SHAPE_FUNC:
            return self._shape_func(call)
        if call.op.name == "relax.call_tir" and call.args[0].name_hint.startswith(_NONZERO_1D):
            return self._nonzero_of_compare(call)
        if call.op.name == "relax.shape_of":
            shape = getattr(call.args[0].ty, "shape", None)
            return shape if isinstance(shape, relax.ShapeExpr) else call
        if call.op.name == "relax.tensor_to_shape":
            known = self.known(call.args[0])
            return relax.ShapeExpr(_int64(known.values)) if known is not None else call
        if call.op.name in ("relax.maximum", "relax.minimum"):
            clamp = self._clamp(call)
            if clamp is not None:
                return clamp
        if call.op.name == "relax.concat":
            runs = self._runs(call)
            if runs is not None:
                return runs
        if call.op.name == "relax.shape_to_tensor" or self._is_sizes(call):
            return call
        known = self.known(call)
        if known is None:
            return call
        dtype = str(call.ty.dtype)
        if all(isinstance(v, tirx.IntImm) for v in known.values):
            array = np.array([int(v.value) for v in known.values], np.int64).reshape(known.shape)
            return relax.const(array.astype(dtype), dtype)
        if dtype == "bool":
            return call
        tensor = relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr(_int64(known.values))), known.shape)
        return tensor if dtype == "int64" else relax.op.astype(tensor, dtype)

    def _clamp(self, call: relax.Call) -> relax.Expr | None:
        """``maximum``/``minimum`` of a float tensor and a scalar constant as
        ``clip``; None for any other (integer ones may be sizes)."""
        x, bound = call.args
        if not (isinstance(x.ty, relax.TensorType) and isinstance(call.ty, relax.TensorType)
                and str(x.ty.dtype).startswith("float") and x.ty.shape is not None and call.ty.shape is not None
                and tvm_ffi.structural_equal(x.ty.shape, call.ty.shape)):
            return None
        value = self._scalar_constant(bound)
        if value is None:
            return None
        if call.op.name == "relax.maximum":
            return relax.op.clip(x, value, float("inf"))
        return relax.op.clip(x, float("-inf"), value)

    def _scalar_constant(self, expr: relax.Expr) -> float | None:
        """A one-element float constant, or ONNX's ``Clip`` bound computed from
        one (``where(isnan(c), -inf, c)``)."""
        expr = self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
        if expr is not None and is_tensor_const(expr):
            value = expr.value.numpy()
            return float(value.reshape(-1)[0]) if value.size == 1 and value.dtype.kind == "f" else None
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.where":
            cond = self.lookup_binding(expr.args[0]) if isinstance(expr.args[0], relax.Var) else expr.args[0]
            if isinstance(cond, relax.Call) and isinstance(cond.op, tvm.ir.Op) and cond.op.name == "relax.isnan":
                tested = self._scalar_constant(cond.args[0])
                if tested is not None:
                    return self._scalar_constant(expr.args[1] if np.isnan(tested) else expr.args[2])
        return None

    def _runs(self, call: relax.Call) -> relax.Expr | None:
        """A 1-d concatenation of constant fills as one kernel."""
        fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else None
        if not fields or len(fields) < 2 or not isinstance(call.ty, relax.TensorType) or call.ty.ndim != 1:
            return None
        lengths, values = [], []
        for field in fields:
            fill = self.lookup_binding(field) if isinstance(field, relax.Var) else field
            if not (isinstance(fill, relax.Call) and isinstance(fill.op, tvm.ir.Op) and fill.op.name == "relax.full"
                    and isinstance(fill.args[0], relax.ShapeExpr) and len(fill.args[0].values) == 1
                    and is_tensor_const(fill.args[1])):
                return None
            lengths.append(fill.args[0].values[0])
            values.append(fill.args[1].value.numpy().item())
        dtype = str(call.ty.dtype)
        ends = list(itertools.accumulate(lengths))

        def runs(*ends):
            def element(i):
                value = tirx.const(values[-1], dtype)
                for end, v in zip(reversed(ends[:-1]), reversed(values[:-1])):
                    value = tirx.Select(i < end, tirx.const(v, dtype), value)
                return value
            return te.compute((ends[-1],), element, name="runs")

        return self.builder_.call_te(runs, *ends, primfunc_name_hint="constant_runs")

    def _is_sizes(self, call: relax.Call) -> bool:
        """Already the form this pass leaves: a reshape (or cast) of ``shape_to_tensor``."""
        if call.op.name not in ("relax.reshape", "relax.astype"):
            return False
        inner = call.args[0]
        inner = self.lookup_binding(inner) if isinstance(inner, relax.Var) else inner
        if isinstance(inner, relax.Call) and isinstance(inner.op, tvm.ir.Op) and inner.op.name == "relax.reshape":
            inner = inner.args[0]
            inner = self.lookup_binding(inner) if isinstance(inner, relax.Var) else inner
        return isinstance(inner, relax.Call) and isinstance(inner.op, tvm.ir.Op) \
            and inner.op.name == "relax.shape_to_tensor"

    def _nonzero_of_compare(self, call: relax.Call) -> relax.Call:
        (mask,) = call.args[1].fields
        compare = self.lookup_binding(mask) if isinstance(mask, relax.Var) else None
        if not (isinstance(compare, relax.Call) and isinstance(compare.op, tvm.ir.Op)
                and compare.op.name.removeprefix("relax.") in count_kernels.COMPARISONS):
            return call
        x, bound = compare.args
        threshold = self._scalar_constant(bound)
        dtype = str(x.ty.dtype) if isinstance(x.ty, relax.TensorType) else ""
        if threshold is None or not dtype.startswith("float") or x.ty.ndim != 1:
            return call
        data, column = x, -1
        gather = self.lookup_binding(x) if isinstance(x, relax.Var) else None
        if isinstance(gather, relax.Call) and isinstance(gather.op, tvm.ir.Op) and gather.op.name == "relax.take" \
                and gather.args[0].ty.ndim == 2 and int(gather.attrs.axis) in (1, -1):
            index = self.known(gather.args[1])
            width = gather.args[0].ty.shape.values[1] if gather.args[0].ty.shape is not None else None
            if index is not None and not index.shape and isinstance(width, tirx.IntImm) \
                    and _int(index.values[0]) is not None and 0 <= _int(index.values[0]) < int(width.value):
                data, column = gather.args[0], _int(index.values[0])
        kernel = kernel_form(count_kernels.nonzero_of_compare, self._gpu)(
            compare.op.name.removeprefix("relax."), threshold, column, dtype)
        gv = self.builder_.add_func(kernel, "shapefn_nonzero_of_compare")
        return relax.Call(call.op, [gv, relax.Tuple([data]), *call.args[2:]], call.attrs, call.ty_args)

    def _shape_func(self, call: relax.Call) -> relax.Expr:
        if call.args[1].value == "relax.nonzero":
            shape = getattr(call.args[_SHAPE_FUNC_INPUTS].ty, "shape", None)
            if isinstance(shape, relax.ShapeExpr):
                dims = shape.values
                numel = functools.reduce(lambda a, b: a * b, dims) if dims else tirx.IntImm("int64", 1)
                return relax.ShapeExpr([len(dims), numel])
        args, changed = list(call.args), False
        for i, a in enumerate(args[_SHAPE_FUNC_INPUTS:], start=_SHAPE_FUNC_INPUTS):
            ty = getattr(a, "ty", None)
            if not isinstance(ty, relax.TensorType) or str(ty.dtype) != "int64":
                continue
            known = self.known(a)
            if known is None or len(known.shape) > 1:
                continue
            values = _int64(known.values)
            args[i], changed = relax.ShapeExpr(values) if known.shape else values[0], True
        return relax.Call(call.op, args, call.attrs, call.ty_args) if changed else call


def _broadcast(a: _Known | None, b: _Known | None, out) -> list | None:
    if a is None or b is None:
        return None
    n = int(np.prod(out, dtype=np.int64))
    if len(a.values) == n and len(b.values) == n and (a.shape == b.shape or n == 1):
        return list(zip(a.values, b.values))
    if len(a.values) == 1 and len(b.values) == n:
        return [(a.values[0], y) for y in b.values]
    if len(b.values) == 1 and len(a.values) == n:
        return [(x, b.values[0]) for x in a.values]
    return None


def _broadcast3(c, a, b, out) -> list | None:
    ca = _broadcast(c, a, out)
    cb = _broadcast(c, b, out)
    if ca is None or cb is None or len(ca) != len(cb):
        return None
    return [(x, t, y) for (x, t), (_, y) in zip(ca, cb)]


@relax.expr_functor.mutator
class _GatherPerUser(relax.PyExprMutator):
    """In each dataflow block, a ``take``/``strided_slice`` used by several
    bindings, all operations that fuse with it, is emitted again before
    each user after the first (see the module's docstring)."""

    def visit_dataflow_block_(self, block: relax.DataflowBlock) -> relax.BindingBlock:
        gathers = {b.var: b.value for b in block.bindings
                   if isinstance(b, relax.VarBinding) and isinstance(b.value, relax.Call)
                   and isinstance(b.value.op, tvm.ir.Op)
                   and b.value.op.name in ("relax.take", "relax.strided_slice")}
        users: dict = {var: [] for var in gathers}
        for b in block.bindings:
            for var in relax.analysis.free_vars(b.value) if isinstance(b, relax.VarBinding) else ():
                if var in users:
                    users[var].append(b.value)
        copied = {var for var, uses in users.items()
                  if len(uses) > 1 and all(isinstance(u, relax.Call) and isinstance(u.op, tvm.ir.Op)
                                           and u.op.name in _GATHER_USERS for u in uses)}
        if not copied:
            return super().visit_dataflow_block_(block)
        order = {var: i for i, var in enumerate(gathers)}
        seen: set = set()
        bindings = []
        for b in block.bindings:
            value = b.value if isinstance(b, relax.VarBinding) else None
            if value is not None:
                remap = {}
                # (in the order the gathers are defined: free_vars' order
                # differs from one process to the next, and with it fusion)
                for var in sorted((v for v in relax.analysis.free_vars(value) if v in copied), key=order.get):
                    if var in seen:
                        copy = relax.DataflowVar(var.name, var.ty) if isinstance(var, relax.DataflowVar) \
                            else relax.Var(var.name, var.ty)
                        gather = gathers[var]
                        bindings.append(relax.VarBinding(copy, relax.Call(gather.op, gather.args, gather.attrs,
                                                                          gather.ty_args)))
                        remap[var] = copy
                    seen.add(var)
                if remap:
                    b = relax.VarBinding(b.var, _Substitute(remap).visit_expr(value))
            bindings.append(b)
        return super().visit_dataflow_block_(relax.DataflowBlock(bindings))


@relax.expr_functor.mutator
class _Substitute(relax.PyExprMutator):
    def __init__(self, remap: dict):
        super().__init__()
        self._remap = remap

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self._remap.get(var, var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self._remap.get(var, var)
