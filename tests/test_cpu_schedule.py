"""The CPU schedule for reductions (matmul, convolution): applied only where
its rule matches, and bit for bit the unscheduled kernel's results (each
output still sums its products in the same order)."""
import functools

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

from shapefn.compiler.compile import lower
from shapefn.compiler.kernels import cpu_conv
from shapefn.compiler.passes.legalize import legalize_map
from shapefn.compiler.schedules import cpu_schedule, target_schedule

# What users get: the default optimization level (conftest.default_host_opt_level).
pytestmark = pytest.mark.usefixtures("default_host_opt_level")


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


@pytest.mark.parametrize("batch, rows, depth, cols", [((), 1, 40, 64), ((), 7, 33, 96), ((3,), 5, 48, 8),
                                                      ((), 0, 32, 32)])
def test_matmul_is_scheduled_and_bitwise_unchanged(rng, batch, rows, depth, cols):
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([*batch, n, depth], "float32"))
    w = relax.Var("w", relax.TensorType([*batch, depth, cols], "float32"))
    func = legalized(relax.op.matmul, [x, w])
    scheduled = cpu_schedule.schedule(func)
    assert has_parallel_loop(scheduled) and not has_parallel_loop(func)
    assert cpu_schedule.schedule(scheduled).same_as(scheduled)  # a scheduled kernel is left as it is
    a = rng.standard_normal((*batch, rows, depth)).astype(np.float32)
    b = rng.standard_normal((*batch, depth, cols)).astype(np.float32)
    outs = []
    for kernel in (compiled(func), compiled(scheduled)):
        out = tvm.runtime.empty((*batch, rows, cols), "float32")
        kernel(tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        outs.append(out.numpy())
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_allclose(outs[1], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups, channels_in, channels_out, size, kernel, scheduled", [
    (1, 40, 24, 20, 1, True),    # pointwise
    (1, 8, 12, 9, 3, True),      # 3x3, odd size
    (8, 8, 8, 12, 3, True),      # depthwise: cpu_depthwise's kernel
    (4, 8, 8, 12, 3, False),     # two channels per group: 18 products per output, left alone
])
def test_convolution_with_runtime_sizes_is_bitwise_unchanged(rng, groups, channels_in, channels_out, size, kernel,
                                                             scheduled):
    h, w = tirx.Var("h", "int64"), tirx.Var("w", "int64")
    weight = rng.standard_normal((channels_out, channels_in // groups, kernel, kernel)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, channels_in, h, w], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=kernel // 2, groups=groups))
            z = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(1.0)))))  # fused epilogue
        bb.emit_func_output(z)
    (func,) = [f for f in lower(bb.get()).functions.values() if isinstance(f, tirx.PrimFunc)]
    result = cpu_schedule.schedule(func)
    assert has_parallel_loop(result) == scheduled
    data = rng.standard_normal((1, channels_in, size, size + 3)).astype(np.float32)
    # One group: cpu_conv's kernel, which takes the weight packed (as legalization packed it); grouped: OIHW.
    lanes = cpu_conv.lanes(target_schedule.host_cpu_features(target_schedule.host_target()))
    weight_arg = cpu_conv.pack_weight(weight, lanes) if groups == 1 else weight
    outs = []
    for kernel_fn in (compiled(func), compiled(result)):
        out = tvm.runtime.empty((1, channels_out, size, size + 3), "float32")
        params = [tvm.runtime.tensor(data)] + [tvm.runtime.tensor(weight_arg)] * (len(func.params) - 2) + [out]
        kernel_fn(*params)
        outs.append(out.numpy())
    np.testing.assert_array_equal(outs[1], outs[0])
    pad = kernel // 2
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = np.zeros_like(outs[0])
    per_group = channels_in // groups
    for o in range(channels_out):
        g = o // (channels_out // groups)
        for dy in range(kernel):
            for dx in range(kernel):
                patch = padded[0, g * per_group:(g + 1) * per_group, dy:dy + size, dx:dx + size + 3]
                want[0, o] += np.tensordot(weight[o, :, dy, dx], patch, axes=1)
    np.testing.assert_allclose(outs[0], np.maximum(want + 1, 0), rtol=1e-4, atol=1e-4)


def test_kernels_outside_the_rule_are_left_alone():
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    func = legalized(relax.op.nn.relu, [x])  # no reduction
    assert cpu_schedule.schedule(func).same_as(func)
    func = legalized(lambda v: relax.op.sum(v, axis=[1]), [x])  # one spatial iterator: not tiled
    assert not has_parallel_loop(cpu_schedule.schedule(func))


@pytest.mark.parametrize("op, reference", [(relax.op.sum, np.sum), (relax.op.prod, np.prod),
                                           (relax.op.max, functools.partial(np.max, initial=np.iinfo(np.int64).min))])
@pytest.mark.parametrize("axis", [[0], [1], None])
@pytest.mark.parametrize("rows, cols", [(3, 0), (0, 5)])
def test_reductions_over_nothing_give_their_initial_value(op, reference, axis, rows, cols):
    """TVM writes a reduction's initial value in the first iteration of its
    loops, so over an empty axis the output was left unwritten (ReduceSum of
    an empty int64 tensor gave what the memory held: found by fuzzing)."""
    n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
    x = relax.Var("x", relax.TensorType([n, m], "int64"))
    kernel = compiled(cpu_schedule.schedule(legalized(lambda v: op(v, axis=axis), [x])))
    data = np.zeros((rows, cols), np.int64)
    want = reference(data, axis=None if axis is None else axis[0])
    out = tvm.runtime.tensor(np.full(np.shape(want), 12345, np.int64))  # (what the memory held)
    kernel(tvm.runtime.tensor(data), out)
    np.testing.assert_array_equal(out.numpy(), want)
