"""Evaluates at compile time the kernels whose inputs are all constants.

TVM's ``FoldConstant`` does the same, but compiles each kernel it folds on
the spot, one at a time and uncached: SSD-lite has hundreds of kernels of
weight arithmetic, a large part of its lowering time (docs/bench/compiler.md).
Here they are compiled together
through the kernel cache (in parallel, and not at all on a second compile),
then run in program order. TVM's pass still runs afterwards, for what it
folds without compiling (shapes of constants) and to drop the bindings left
unused. Same conditions as TVM's: a ``call_tir`` of a PrimFunc with one
tensor output of static shape and only constant arguments; folding on the
host ("llvm") whatever the device.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from ..machine_code import kernel_cache
from ..schedules import target_schedule
from . import index_checks
from .placement import is_tensor_const, key

_CALL_TIR = "relax.call_tir"


def fold_constant_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    foldable, values = _foldable_bindings(mod)
    if not foldable:
        return mod
    callees = {call.args[0].name_hint: mod[call.args[0]] for _, call in foldable}
    host = target_schedule.host_target()
    try:
        scheduled = target_schedule.schedule(callees, host)
        checked = {gv.name_hint for gv, f in scheduled.module.functions.items() if index_checks.checks_of(f)}
        for gv, func in list(scheduled.module.functions.items()):
            scheduled.module[gv] = index_checks.materialize(func, gv.name_hint)
        library, _ = kernel_cache.build(scheduled.module, host, scheduled.version)
    except Exception:  # noqa: BLE001 - like TVM's pass: what does not build is left unfolded
        return mod
    folded = {}
    for var, call in foldable:
        if not all(key(a) in values for a in call.args[1].fields if isinstance(a, relax.Var)):
            continue  # (computed from a binding left unfolded)
        args = [values[key(a)] if isinstance(a, relax.Var) else a.value for a in call.args[1].fields]
        out_type = call.ty_args[0]
        out = tvm.runtime.empty([int(d) for d in out_type.shape.values], str(out_type.dtype), tvm.cpu())
        name = call.args[0].name_hint
        if name in checked:
            record = tvm.runtime.tensor(np.zeros(index_checks.RECORD_WORDS, np.int64), tvm.cpu())
            library[name](*args, out, record, 0)
            if record.numpy()[0] != 0:
                continue  # an index out of range: left to run, where it raises naming its node
        else:
            library[name](*args, out)
        values[key(var)] = folded[key(var)] = out
    return _Substitution(mod, folded).run()


def _foldable_bindings(mod: tvm.IRModule) -> tuple[list[tuple[relax.Var, relax.Call]], dict[int, object]]:
    """The ``call_tir`` bindings computable from constants, in program order
    (arguments may be constants, variables bound to them, or earlier ones),
    and the values of the variables bound to constants."""
    foldable, constants = [], {}
    constant_vars: set[int] = set()

    def visit(seq: relax.SeqExpr) -> None:
        for block in seq.blocks:
            for binding in block.bindings:
                if not isinstance(binding, relax.VarBinding):
                    continue
                value = binding.value
                if is_tensor_const(value):
                    constants[key(binding.var)] = value.value
                    constant_vars.add(key(binding.var))
                elif _is_foldable_call(mod, value, constant_vars):
                    constant_vars.add(key(binding.var))
                    foldable.append((binding.var, value))
                elif isinstance(value, relax.If):
                    # (A Loop's body is in a branch. Left to TVM's pass, a GPU
                    # form there stays unfolded: TVM compiles what it folds for
                    # the CPU, and a kernel of GPU threads does not build.)
                    for branch in (value.true_branch, value.false_branch):
                        if isinstance(branch, relax.SeqExpr):
                            visit(branch)

    for func in mod.functions.values():
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
            visit(func.body)
    return foldable, constants


def _is_foldable_call(mod: tvm.IRModule, value, constant_vars: set[int]) -> bool:
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == _CALL_TIR):
        return False
    if len(value.args) != 2 or not isinstance(value.args[1], relax.Tuple) or len(value.ty_args) != 1:
        return False  # size arguments (tir_vars) or a tuple of outputs
    callee, out_type = value.args[0], value.ty_args[0]
    if not isinstance(mod[callee], tirx.PrimFunc) or not isinstance(out_type, relax.TensorType) \
            or out_type.shape is None or not all(isinstance(d, tirx.IntImm) for d in out_type.shape.values):
        return False
    return all(is_tensor_const(a) or (isinstance(a, relax.Var) and key(a) in constant_vars)
               for a in value.args[1].fields)


@relax.expr_functor.mutator
class _Substitution(relax.PyExprMutator):
    """Binds each folded variable to its value as a constant."""

    def __init__(self, mod: tvm.IRModule, values: dict[int, object]):
        super().__init__(mod)
        self._mod = mod
        self._values = values

    def run(self) -> tvm.IRModule:
        for gv, func in self._mod.functions.items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self._values.get(key(binding.var))
        if value is None:
            super().visit_var_binding_(binding)
            return
        self.builder_.emit_normalized(relax.VarBinding(binding.var, relax.const(value)))


def fold_constant_transposes(mod: tvm.IRModule) -> tvm.IRModule:
    """``permute_dims`` of a constant as the permuted constant, before
    legalization: a matmul by a transposed weight (ONNX Gemm's ``transB``)
    then sees a constant it can pack (``legalize.legalize_matmul``)."""
    values = {}
    for func in mod.functions.values():
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
            for block in func.body.blocks:
                for binding in block.bindings:
                    value = binding.value
                    if (isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.permute_dims"
                            and is_tensor_const(value.args[0])):
                        axes = None if value.attrs.axes is None else [int(a) for a in value.attrs.axes]
                        values[key(binding.var)] = np.ascontiguousarray(
                            np.transpose(value.args[0].value.numpy(), axes))
    return _Substitution(mod, values).run() if values else mod
