"""Readback scheduling alone (compiler/passes/readback_order.py): readbacks that are
ready together form one group (one sync), after all other ready work; no
dependency is broken."""
from __future__ import annotations

from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from shapefn.compiler.passes import readback_order


@I.ir_module
class Phases:
    @T.prim_func
    def count(x: T.handle, c: T.handle):
        n = T.int64()
        X = T.match_buffer(x, (n,), "float32")
        C = T.match_buffer(c, (1,), "int64")
        C[0] = n

    @R.function(pure=False)
    def main(x: R.Tensor(("n",), "float32"), a: R.Tensor((1,), "int64"), b: R.Tensor((1,), "int64")):
        m, k, j = T.int64(), T.int64(), T.int64()
        cls = Phases
        sa = R.tensor_to_shape(a)                 # ready at once
        ca = R.builtin.alloc_tensor(R.shape([1]), R.dtype("int64"), R.prim_value(0), R.str("global"))
        cls.count(x, ca)
        sb = R.tensor_to_shape(b)                 # ready at once: batched with sa
        sc = R.tensor_to_shape(ca)                # ready once the kernel ran, which runs first: batched too
        R.memory.kill_tensor(a)                   # after its reader sa
        sm = R.match_cast(sa, R.Shape([m]))
        t = R.builtin.alloc_tensor(R.shape([m]), R.dtype("float32"), R.prim_value(0), R.str("global"))
        ct = R.builtin.alloc_tensor(R.shape([1]), R.dtype("int64"), R.prim_value(0), R.str("global"))
        cls.count(t, ct)
        st = R.tensor_to_shape(ct)                # needs m, read back in the first group: a second phase
        sk = R.match_cast(sb, R.Shape([k]))
        sj = R.match_cast(st, R.Shape([j]))
        return R.shape([m, k, j])


def names(groups) -> list[list[str]]:
    return [[b.var.name for b in group] for group in groups]


def bindings():
    (block,) = Phases["main"].body.blocks
    return list(block.bindings)


def test_ready_readbacks_wait_together_after_other_work():
    groups = names(readback_order.order_bindings(bindings()))
    readbacks = [g for g in groups if g[0].startswith("s") and g[0] not in ("sm", "sk", "sj")]
    assert readbacks == [["sa", "sb", "sc"], ["st"]]  # two syncs: st depends on sa's value
    # Everything not waiting on a readback runs before the first one: the
    # first kernel (its binding is named "_"), the allocation it writes and
    # the allocation of the second kernel's count (no size to wait for).
    first = groups.index(["sa", "sb", "sc"])
    assert groups[:first] == [["ca"], ["_"], ["ct"]]
    assert sorted(n for g in groups for n in g) == sorted(b.var.name for b in bindings())


def test_no_dependency_broken():
    order = [b.var.name for group in readback_order.order_bindings(bindings()) for b in group]
    kernels = [i for i, n in enumerate(order) if n == "_"]
    assert len(kernels) == 3  # the two kernels and the kill
    assert order.index("ca") < kernels[0] < order.index("sc")      # alloc, write, read back
    assert order.index("sa") < order.index("sm") < order.index("t") < order.index("st")
    assert order.index("sb") < order.index("sk") and order.index("st") < order.index("sj")
    # The kill of a (a "_" binding too) comes after its reader sa.
    assert max(kernels) > order.index("sa")


def test_is_readback():
    b = bindings()
    assert [b.var.name for b in b if readback_order.is_readback(b)] == ["sa", "sb", "sc", "st"]


def test_single_binding_is_one_group():
    (first,) = bindings()[:1]
    assert names(readback_order.order_bindings([first])) == [["sa"]]


@I.ir_module
class Branches:
    @R.function(pure=False)
    def main(flag: R.Prim("bool"), a: R.Tensor((1,), "int64"), b: R.Tensor((1,), "int64")):
        if flag:
            sa = R.tensor_to_shape(a)
            sb = R.tensor_to_shape(b)
            out = R.tuple(sa, sb)
        else:
            sa2 = R.tensor_to_shape(a)
            out = R.tuple(sa2, sa2)
        return out


def test_module_pass_schedules_every_block_including_branches():
    result = readback_order.order_module(Branches)
    if_binding = Branches["main"].body.blocks[0].bindings[0]
    (then_block,) = if_binding.value.true_branch.blocks
    (else_block,) = if_binding.value.false_branch.blocks
    assert names(result[then_block]) == [["sa", "sb"]]
    assert names(result[else_block]) == [["sa2"]]
    assert len(result.groups) == 3  # main's block and each arm's
