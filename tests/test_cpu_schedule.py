"""The CPU matmul schedule: applied only where its rule matches, and bit for
bit the unscheduled kernel's results (each output still sums in k order)."""
import numpy as np
import pytest
import tvm
from tvm import relax, tirx

from shapefn.compiler import cpu_schedule
from shapefn.compiler.legalize import legalize_map


def legalized(build_body, params):
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(build_body(*params)))
    mod = relax.transform.LegalizeOps(customize_legalize_map=legalize_map())(bb.get())
    (func,) = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    return func


def compiled(func):
    return tvm.tirx.build(tvm.IRModule({"kernel": func.with_attr("global_symbol", "kernel")}), "llvm")["kernel"]


def has_parallel_loop(func) -> bool:
    return "T.parallel(" in func.script()


@pytest.mark.parametrize("batch, rows, depth, cols", [((), 1, 40, 64), ((), 7, 33, 96), ((3,), 5, 16, 8),
                                                      ((), 0, 12, 32)])
def test_matmul_is_scheduled_and_bitwise_unchanged(rng, batch, rows, depth, cols):
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([*batch, n, depth], "float32"))
    w = relax.Var("w", relax.TensorType([*batch, depth, cols], "float32"))
    func = legalized(relax.op.matmul, [x, w])
    scheduled = cpu_schedule.schedule(func)
    assert has_parallel_loop(scheduled) and not has_parallel_loop(func)
    a = rng.standard_normal((*batch, rows, depth)).astype(np.float32)
    b = rng.standard_normal((*batch, depth, cols)).astype(np.float32)
    outs = []
    for kernel in (compiled(func), compiled(scheduled)):
        out = tvm.runtime.empty((*batch, rows, cols), "float32")
        kernel(tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        outs.append(out.numpy())
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_allclose(outs[1], a @ b, rtol=1e-4, atol=1e-4)


def test_kernels_outside_the_rule_are_left_alone():
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    odd = relax.Var("w", relax.TensorType([8, 6], "float32"))  # 6 columns: no vector width divides them
    for func in (legalized(relax.op.matmul, [x, odd]),
                 legalized(lambda v: relax.op.sum(v, axis=[1]), [x]),  # one spatial iterator
                 legalized(relax.op.nn.relu, [x])):  # no reduction
        assert cpu_schedule.schedule(func).same_as(func)
