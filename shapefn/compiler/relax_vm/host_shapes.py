"""Shape arithmetic on the host in TVM's VM.

Models compute shapes with tensors: ONNX's ``Shape -> Gather -> Concat ->
Reshape`` chains, slice bounds from a feature map's size. TVM's default
pipeline runs those small integer kernels on the target device, so every
shape function or ``tensor_to_shape`` that reads one waits for the device
and copies it back. This pass places them as shapefn's compiler places
them (``compiler/passes/placement.py``): a kernel whose outputs are small (integer
or float, at most ``SMALL_ELEMENTS`` elements, sizes known) and whose
tensor inputs are all on the host or small constants runs on the host, on
TVM's virtual device for the host target. Its outputs never cross; where
a device kernel, a returned value or anything else but a shape read
(``tensor_to_shape``, shapefn's shape functions, an ``If``'s condition)
uses one, it is copied to the device by ``shapefn.upload``, which does not
wait for the device (``R.to_vdevice`` would, after every copy).

TVM's VM places every constant on its first device, so a small constant a
host kernel reads is written on the host by a kernel of its own.

Runs after TVM's fusion (kernels are ``call_tir`` of their final PrimFuncs)
and before GPU scheduling; the host kernels get shapefn's CPU schedule.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx

from ..passes.placement import is_integer_tensor, is_small_tensor, is_tensor_const
from ..schedules.target_schedule import host_form, schedule
from ..shape_calls import SHAPE_FUNC
from .read_counts import READ_COUNTS

__all__ = ["PlaceShapeArithmeticOnHost", "StorageInScope", "StorageOnItsDevice", "HOST_SUFFIX"]

HOST_SUFFIX = "_host"
# (csrc/relax/builtins.cc) A host tensor copied into a device tensor without
# waiting; TVM's ``R.to_vdevice`` waits for the device after every copy.
UPLOAD = "shapefn.upload"
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CALL_PURE_PACKED = tvm.ir.Op.get("relax.call_pure_packed")
_TENSOR_TO_SHAPE = tvm.ir.Op.get("relax.tensor_to_shape")
# Builtins that read a host tensor where it is (no copy, no wait).
_READ_ON_HOST = (SHAPE_FUNC, "shapefn.shape_func_per_op", READ_COUNTS)


@tvm.transform.module_pass(opt_level=0, name="shapefn.PlaceShapeArithmeticOnHost")
class PlaceShapeArithmeticOnHost:
    """Small kernels computed from shapes run on the host (see the module's
    docstring). A module that already declares virtual devices is left as
    it is."""

    def __init__(self, target: tvm.target.Target):
        self.target = target
        self.host_target = target.host if target.host is not None else tvm.target.Target("llvm")

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        if "vdevice" in mod.global_infos:
            return mod
        device = relax.VDevice(self.target, 0, "global")
        host = relax.VDevice(self.host_target, 0, "global")
        placed = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
        # The device first: allocations without a virtual device take index 0.
        placed.update_global_info("vdevice", [device, host])
        place = _Place(placed, device, placed.global_infos["vdevice"][1], self.target, self.host_target)
        for gv, func in placed.functions.items():
            if isinstance(func, relax.Function):
                place.copies = {}
                place.builder_.update_func(gv, place.visit_expr(func))
        return place.builder_.get() if place.placed else mod


def _key(obj) -> int:
    return obj.__chandle__()


def _fits_host(ty) -> bool:
    """Outputs the host computes when their inputs are there: integers, or
    tensors of a few elements (placement's rule)."""
    fields = ty.fields if isinstance(ty, relax.TupleType) else [ty]
    return bool(fields) and all(isinstance(t, relax.TensorType) and (is_integer_tensor(t) or is_small_tensor(t))
                                for t in fields)


def _on(ty, vdevice):
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_on(t, vdevice) for t in ty.fields])
    return relax.TensorType(ty.shape, ty.dtype, vdevice=vdevice)


@relax.expr_functor.mutator
class _Place(relax.PyExprMutator):
    def __init__(self, mod, device, host, target, host_target):
        super().__init__(mod)
        self.mod, self.device, self.host = mod, device, host
        self.target, self.host_target = target, host_target
        self.on_host: set[int] = set()  # vars (after rewriting) holding host tensors
        self.host_kernels: dict[str, relax.GlobalVar] = {}
        self.const_kernels: dict[tuple, relax.GlobalVar] = {}
        self.reads_on_host = False  # visiting what may read a host tensor where it is
        self.copies: dict[int, relax.Var] = {}  # host var -> its device copy, in this block
        self.remap: dict[int, relax.Var] = {}  # old var -> the var this pass bound in its place
        self.in_dataflow = False
        self.placed = False

    # -- blocks: copies are reused within the block that made them
    def visit_binding_block_(self, block):
        saved, self.copies = self.copies, {}
        try:
            return super().visit_binding_block_(block)
        finally:
            self.copies = saved

    def visit_dataflow_block_(self, block):
        saved, self.copies, self.in_dataflow = self.copies, {}, True
        try:
            return super().visit_dataflow_block_(block)
        finally:
            self.copies, self.in_dataflow = saved, False

    # -- uses of host tensors
    def visit_var_(self, var):
        return self._use(super().visit_var_(var))

    def visit_dataflow_var_(self, var):
        return self._use(super().visit_dataflow_var_(var))

    def _use(self, var):
        if _key(var) not in self.on_host or self.reads_on_host:
            return var
        if _key(var) not in self.copies:
            ty = var.ty
            upload = relax.call_dps_packed(UPLOAD, [var], relax.TensorType(ty.shape, ty.dtype, vdevice=self.device))
            self.copies[_key(var)] = self.builder_.emit(upload, var.name + "_dev")
        return self.copies[_key(var)]

    def visit_if_(self, op):
        self.reads_on_host = True  # (the condition: TVM's VM reads it on the host)
        cond = self.visit_expr(op.cond)
        self.reads_on_host = False
        return relax.If(cond, self.visit_with_new_scope(op.true_branch), self.visit_with_new_scope(op.false_branch),
                        op.span)

    # -- bindings
    def visit_var_binding_(self, binding):
        value = binding.value
        if self._runs_on_host(value):
            self._emit_on_host(binding)
            return
        if isinstance(value, (relax.Var, relax.TupleGetItem)):
            source = value if isinstance(value, relax.Var) else value.tuple_value
            if isinstance(source, relax.Var) and _key(self._current(source)) in self.on_host:
                self.reads_on_host = True
                new_value = self.visit_expr(value)
                self.reads_on_host = False
                var = self._define(binding.var, new_value)
                self.on_host.add(_key(var))
                return
        if self._reads_on_host(value):
            # (TVM's VM puts constants on the device: a small one read for a
            # shape is written on the host instead)
            args = [self._host_constant(a) if is_tensor_const(a) and is_small_tensor(a.ty) else a for a in value.args]
            binding = relax.VarBinding(binding.var, relax.Call(value.op, args, value.attrs, value.ty_args, value.span))
            self.reads_on_host = True
        try:
            super().visit_var_binding_(binding)
        finally:
            self.reads_on_host = False

    def _current(self, var: relax.Var) -> relax.Var:
        """What ``var`` is after this pass's rewriting so far."""
        return self.remap.get(_key(var), var)

    def _define(self, old: relax.Var, value: relax.Expr) -> relax.Var:
        """Binds ``value`` in place of ``old``'s binding."""
        if self.in_dataflow and not isinstance(old, relax.DataflowVar):
            var = self.builder_.emit_output(value, old.name)
        else:
            var = self.builder_.emit(value, old.name)
        self.set_var_remap(old, var)
        self.remap[_key(old)] = var
        return var

    def _reads_on_host(self, value) -> bool:
        if not isinstance(value, relax.Call):
            return False
        if value.op == _TENSOR_TO_SHAPE:
            return True
        return (value.op == _CALL_PURE_PACKED and isinstance(value.args[0], relax.ExternFunc)
                and value.args[0].global_symbol in _READ_ON_HOST)

    def _runs_on_host(self, value) -> bool:
        if not (isinstance(value, relax.Call) and value.op == _CALL_TIR and _fits_host(value.ty_args[0])):
            return False
        callee = value.args[0]
        func = self.mod[callee]
        if not isinstance(func, tirx.PrimFunc) or host_form(func) is None:
            return False
        for arg in value.args[1].fields:
            if not isinstance(arg.ty, relax.TensorType):
                continue
            if is_tensor_const(arg):
                if not is_small_tensor(arg.ty):
                    return False
                continue
            if not isinstance(arg, relax.Var):
                return False
            if _key(self._current(arg)) not in self.on_host:
                return False
        return True

    def _emit_on_host(self, binding):
        call = binding.value
        args = []
        for arg in call.args[1].fields:
            if is_tensor_const(arg):
                args.append(self._host_constant(arg))
            elif isinstance(arg, relax.Var):
                args.append(self._current(arg))
            else:
                args.append(self.visit_expr(arg))
        out_ty = _on(call.ty_args[0], self.host)
        new = relax.Call(_CALL_TIR, [self._host_kernel(call.args[0]), relax.Tuple(args), *call.args[2:]],
                         call.attrs, [out_ty])
        var = self._define(binding.var, new)
        self.on_host.add(_key(var))
        self.placed = True

    def _host_kernel(self, callee: relax.GlobalVar) -> relax.GlobalVar:
        name = callee.name_hint
        if name not in self.host_kernels:
            host_name = name + HOST_SUFFIX
            func = schedule({host_name: self.mod[callee]}, self.target, host=[host_name]).module[host_name]
            self.host_kernels[name] = self.builder_.add_func(func.with_attr("tirx.is_scheduled", True), host_name)
        return self.host_kernels[name]

    def _host_constant(self, const) -> relax.Var:
        value = const.value.numpy()
        kernel_key = (str(value.dtype), value.shape, value.tobytes())
        if kernel_key not in self.const_kernels:
            name = f"shapefn_host_constant{len(self.const_kernels)}"
            func = _constant_kernel(value).with_attr("global_symbol", name).with_attr(
                "target", self.host_target).with_attr("tirx.is_scheduled", True)
            self.const_kernels[kernel_key] = self.builder_.add_func(func, name)
        ty = relax.TensorType(list(value.shape), str(value.dtype), vdevice=self.host)
        var = self.builder_.emit(relax.Call(_CALL_TIR, [self.const_kernels[kernel_key], relax.Tuple([])], None, [ty]),
                                 "host_constant")
        self.on_host.add(_key(var))
        return var


def _constant_kernel(value: np.ndarray) -> tirx.PrimFunc:
    """A kernel writing ``value`` (a small array) into its one output."""
    dtype = str(value.dtype)
    flat = [tirx.const(v.item(), dtype) for v in value.reshape(-1)]

    def element(*index):
        if not flat:  # (an empty constant: no element is ever written)
            return tirx.const(0, dtype)
        position = tirx.const(0, "int64")
        for i, extent in zip(index, value.shape):
            position = position * extent + i
        chosen = flat[-1]
        for k in range(len(flat) - 2, -1, -1):
            chosen = tirx.Select(position == k, flat[k], chosen)
        return chosen

    return te.create_prim_func([te.compute(value.shape, element, name="out")])


_ALLOC_STORAGE = tvm.ir.Op.get("relax.memory.alloc_storage")
_ALLOC_TENSOR = tvm.ir.Op.get("relax.memory.alloc_tensor")


@tvm.transform.module_pass(opt_level=0, name="shapefn.StorageOnItsDevice")
def StorageOnItsDevice(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - a pass
    """Runs after TVM's ``StaticPlanBlockMemory``, which pools storage by
    scope and type but not by device: a device tensor may be placed in a
    host tensor's storage of the same size (and the reverse). Such a tensor
    gets storage of its own, of that size, on its device."""
    return _mended(mod, _OwnStorage(mod))


def _mended(mod: tvm.IRModule, fix) -> tvm.IRModule:
    """``mod`` with every Relax function through ``fix`` (a mutator that
    sets ``fixed`` when it changes something); ``mod`` itself if nothing was."""
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            fix.builder_.update_func(gv, fix.visit_expr(func))
    return fix.builder_.get() if fix.fixed else mod


@relax.expr_functor.mutator
class _OwnStorage(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.fixed = False

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op != _ALLOC_TENSOR or not isinstance(call.args[0], relax.Var):
            return call
        storage = self.lookup_binding(call.args[0])
        if not (isinstance(storage, relax.Call) and storage.op == _ALLOC_STORAGE):
            return call
        size, device, scope, dtype = storage.args
        if _index(device) == _index(call.args[4]):
            return call
        own = self.builder_.emit(relax.Call(_ALLOC_STORAGE, [size, call.args[4], scope, dtype], storage.attrs,
                                            storage.ty_args), "storage")
        self.fixed = True
        return relax.Call(call.op, [own, *call.args[1:]], call.attrs, call.ty_args, call.span)


def _index(expr) -> int:
    value = expr.value if hasattr(expr, "value") else expr
    return int(value.value if hasattr(value, "value") else value)


@tvm.transform.module_pass(opt_level=0, name="shapefn.StorageInScope")
def StorageInScope(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - a pass
    """Runs after TVM's ``StaticPlanBlockMemory``, which may allocate a
    storage inside an ``If``'s branch (where a symbolic size is first
    needed) and place a tensor after the ``If`` in it, where the branch's
    storage does not exist (TVM's VM then crashes). Such a tensor gets
    storage of its own, of that size, where it is allocated."""
    return _mended(mod, _ScopedStorage(mod))


@relax.expr_functor.mutator
class _ScopedStorage(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.scopes: list[set[int]] = [set()]  # vars bound in each enclosing scope
        self.fixed = False

    def visit_function_(self, func):
        self.scopes = [set()]
        return super().visit_function_(func)

    def visit_if_(self, op):
        cond = self.visit_expr(op.cond)
        branches = []
        for branch in (op.true_branch, op.false_branch):
            self.scopes.append(set())
            branches.append(self.visit_with_new_scope(branch))
            self.scopes.pop()
        return relax.If(cond, *branches, op.span)

    def visit_var_binding_(self, binding):
        super().visit_var_binding_(binding)
        self.scopes[-1].add(_key(binding.var))  # (this pass binds no var anew)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op != _ALLOC_TENSOR or not isinstance(call.args[0], relax.Var):
            return call
        if any(_key(call.args[0]) in scope for scope in self.scopes):
            return call
        storage = self.lookup_binding(call.args[0])
        if not (isinstance(storage, relax.Call) and storage.op == _ALLOC_STORAGE):
            return call
        own = self.builder_.emit(relax.Call(_ALLOC_STORAGE, storage.args, storage.attrs, storage.ty_args), "storage")
        self.fixed = True
        return relax.Call(call.op, [own, *call.args[1:]], call.attrs, call.ty_args, call.span)
