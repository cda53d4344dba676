"""One sync per phase in TVM's VM: the counts count-sized kernels write,
read back together.

Lowering reads each count where its op is (``R.tensor_to_shape`` of an int64
``[1]`` tensor, which TVM's VM runs as a copy and a full sync each). Within
each block this pass moves every binding that does not depend on a count
still to be read ahead of those that do, then reads all the counts that
became readable in one ``shapefn.read_counts`` call: SSD-lite's 90
per-class score filters each launch their kernel, and the 90 counts cross
in one sync. The dependent bindings follow in their order, and so on, phase
after phase. Bindings with side effects keep their order among themselves.
"""
from __future__ import annotations

import tvm
from tvm import relax, tirx

READ_COUNTS = "shapefn.read_counts"
_TENSOR_TO_SHAPE = tvm.ir.Op.get("relax.tensor_to_shape")
_TYPES_WITH_SIZES = (relax.TensorType, relax.ShapeType, relax.TupleType, tvm.ir.PrimType)


@tvm.transform.module_pass(opt_level=0, name="shapefn.ReadCountsTogether")
class ReadCountsTogether:
    """Batches the count reads of each phase (see the module's docstring)."""

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        rewrite = _Rewrite(mod)
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                rewrite.builder_.update_func(gv, rewrite.visit_expr(func))
        return rewrite.builder_.get()


@relax.expr_functor.mutator
class _Rewrite(relax.PyExprMutator):
    def visit_seq_expr_(self, op: relax.SeqExpr) -> relax.Expr:
        blocks = [_schedule(block) for block in op.blocks]
        return super().visit_seq_expr_(relax.SeqExpr(blocks, op.body))


def _is_count_read(binding) -> bool:
    value = binding.value
    if not (isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call) and value.op == _TENSOR_TO_SHAPE):
        return False
    ty = value.args[0].ty
    return (isinstance(ty, relax.TensorType) and str(ty.dtype) == "int64" and ty.shape is not None
            and len(ty.shape) == 1 and isinstance(ty.shape[0], tirx.IntImm) and ty.shape[0].value == 1)


def _tir_vars(expr) -> set:
    found = set()

    def visit(e):
        ty = getattr(e, "ty", None)
        if isinstance(ty, _TYPES_WITH_SIZES):
            found.update(relax.analysis.tir_vars_in_type(ty))

    relax.analysis.post_order_visit(expr, visit)
    return found


def _uses_and_defs(binding, known_tir: set) -> tuple[set, set]:
    """What ``binding`` reads (relax and TIR variables) and what it defines."""
    uses = set(relax.analysis.free_vars(binding.value)) | _tir_vars(binding.value)
    defs = {binding.var}
    if isinstance(binding, relax.MatchCast):
        for var in relax.analysis.tir_vars_in_type(binding.ty):
            (uses if var in known_tir else defs).add(var)
    else:
        uses |= set(relax.analysis.tir_vars_in_type(binding.var.ty))
    return uses, defs


def _schedule(block: relax.BindingBlock) -> relax.BindingBlock:
    bindings = list(block.bindings)
    if sum(map(_is_count_read, bindings)) < 2:
        return block
    dataflow = isinstance(block, relax.DataflowBlock)
    known_tir: set = set()
    info = []
    for b in bindings:
        uses, defs = _uses_and_defs(b, known_tir)
        known_tir |= {d for d in defs if isinstance(d, tirx.Var)}
        impure = not dataflow and relax.analysis.contains_impure_call(b.value)
        info.append((b, uses, defs, impure))

    out: list = []
    waiting = info
    while waiting:
        later, reads, blocked_defs, impure_blocked = [], [], set(), False
        for b, uses, defs, impure in waiting:
            blocked = bool(uses & blocked_defs) or (impure and impure_blocked)
            if not blocked and _is_count_read(b):
                reads.append(b)
                blocked_defs |= defs
            elif blocked:
                later.append((b, uses, defs, impure))
                blocked_defs |= defs
                impure_blocked |= impure
            else:
                out.append(b)
        out.extend(_read_together(reads, dataflow))
        if len(later) == len(waiting):
            raise RuntimeError("shapefn.ReadCountsTogether: bindings wait on one another")  # a cycle: a bug
        waiting = later
    cls = relax.DataflowBlock if dataflow else relax.BindingBlock
    return cls(out)


def _read_together(reads: list, dataflow: bool) -> list:
    if len(reads) < 2:
        return reads
    ty = relax.TupleType([relax.ShapeType(ndim=1)] * len(reads))
    var = (relax.DataflowVar if dataflow else relax.Var)("counts", ty)
    call = relax.op.call_pure_packed(READ_COUNTS, *[r.value.args[0] for r in reads], ty_args=ty)
    out = [relax.VarBinding(var, call)]
    out += [relax.VarBinding(r.var, relax.TupleGetItem(var, i)) for i, r in enumerate(reads)]
    return out
