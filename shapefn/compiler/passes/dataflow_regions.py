"""Dataflow blocks for the regions of a function that have no control flow.

TVM's ``FuseOps`` fuses only inside dataflow blocks, and TVM's ONNX importer
makes none for a graph with an ``If``: a detection model ran one kernel per
operator. ``ConvertToDataflow`` groups the pure bindings between control
flow into dataflow blocks. ``FuseOps`` reads the graph of a function's own
bindings only, not those inside an ``If``'s branches, so the blocks it would
find there stay ordinary binding blocks.
"""
from __future__ import annotations

import tvm
from tvm import relax


def dataflow_regions(mod: tvm.IRModule) -> tvm.IRModule:
    mod = relax.transform.ConvertToDataflow(min_size=1)(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = _OrdinaryBranches().visit_expr(func)
    return mod


@relax.expr_functor.mutator
class _OrdinaryBranches(relax.PyExprMutator):
    """Each ``If``'s branches with ordinary binding blocks in place of
    dataflow blocks (and ordinary variables for dataflow ones)."""

    def visit_if_(self, op: relax.If) -> relax.Expr:
        return relax.If(op.cond, _ordinary(op.true_branch), _ordinary(op.false_branch), op.span)


def _ordinary(branch: relax.Expr) -> relax.Expr:
    if not isinstance(branch, relax.SeqExpr) or \
            not any(isinstance(block, relax.DataflowBlock) for block in branch.blocks):
        return branch
    free = relax.analysis.free_vars(branch)
    wrapped = relax.Function(free, branch, ret_ty=branch.ty, is_pure=False)
    return relax.transform.ToNonDataflow()(tvm.IRModule({"branch": wrapped}))["branch"].body
