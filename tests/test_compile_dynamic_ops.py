"""Each data-dependent op through shapefn.compile, at several shapes and
values from one compilation per device (zero-size results included), on a
strict sim and on a real OpenCL device. References: TVM's Relax VM where
Relax expresses the op, else numpy or onnxruntime. Counters show what
crossed: values a shape function reads, counts of count-sized ops — never
data; they are the same on both devices."""

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax

import shapefn
from conftest import DEVICES, opencl, relax_main, run_on_devices, sym
from shapefn.compiler import ops


@pytest.fixture
def on(device):
    """The VM's device for ``device``: a strict sim (host reads of device
    memory fault there), else the device itself."""
    return shapefn.sim(strict=True) if device == "sim" else device


class Compiled:
    """A module (``mod``) and its executable for each device it was asked
    for, compiled once: ``compiled(device)``."""

    def __init__(self, mod):
        self.mod = mod
        self._executables = {}

    def __call__(self, device):
        if device not in self._executables:
            self._executables[device] = shapefn.compile(self.mod, device)
        return self._executables[device]


def run(mod, *args, device, on):
    vm = shapefn.VirtualMachine(shapefn.compile(mod, device), on)
    return vm, vm(*args)


def relax_vm(mod):
    return relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())


# -- ops whose shape comes from a tensor value (tensor_to_shape) -------------

@pytest.fixture(scope="module")
def reshape_vm():
    mod = relax_main([("x", [sym("n"), 6], "float32"), ("s", [3], "int64")],
                lambda bb, x, s: relax.op.reshape(x, bb.emit(relax.op.tensor_to_shape(s))))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, target", [(2, [3, -1, 2]), (4, [0, 3, -1]), (0, [0, 5, 2]), (3, [1, 1, 18])])
def test_reshape_to_a_runtime_shape(reshape_vm, device, on, n, target):
    vm = shapefn.VirtualMachine(reshape_vm(device), on)
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    s = np.array(target, np.int64)
    # ONNX rules: -1 inferred, 0 copies the input dimension.
    want = x.reshape([x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)])
    np.testing.assert_array_equal(vm(x, s).numpy(), want)
    assert vm.counters["d2h_bytes"] == s.nbytes  # the target shape only


@pytest.fixture(scope="module")
def broadcast_exe():
    mod = relax_main([("x", [sym("a"), sym("b")], "float32"), ("s", [3], "int64")],
                lambda bb, x, s: relax.op.broadcast_to(x, bb.emit(relax.op.tensor_to_shape(s))))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, target", [((1, 3), [2, 4, 3]), ((4, 1), [2, 4, 5]), ((1, 1), [0, 2, 2]),
                                           ((3, 2), [1, 3, 2])])
def test_broadcast_to_a_runtime_shape(broadcast_exe, device, on, shape, target):
    vm = shapefn.VirtualMachine(broadcast_exe(device), on)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(vm(x, np.array(target, np.int64)).numpy(), np.broadcast_to(x, target))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target", [[2, 3], [0, 4], [1, 1]])
def test_full_zeros_ones_of_a_runtime_shape(device, on, target):
    mod = relax_main([("v", [], "float32"), ("s", [2], "int64")], lambda bb, v, s: relax.Tuple([
        relax.op.full(bb.emit(relax.op.tensor_to_shape(s)), v),
        relax.op.zeros(bb.emit(relax.op.tensor_to_shape(s)), "int32"),
        relax.op.ones(bb.emit(relax.op.tensor_to_shape(s)), "float32")]))
    vm, (full, zeros, ones) = run(mod, np.array(2.5, np.float32), np.array(target, np.int64),
                                   device=device, on=on)
    np.testing.assert_array_equal(full.numpy(), np.full(target, 2.5, np.float32))
    np.testing.assert_array_equal(zeros.numpy(), np.zeros(target, np.int32))
    np.testing.assert_array_equal(ones.numpy(), np.ones(target, np.float32))


# -- Relax's own data-dependent ops, against TVM's Relax VM --------------------

@pytest.fixture(scope="module")
def slice_exe():
    return Compiled(relax_main([("x", [sym("n"), sym("m")], "float32"), ("b", [2], "int64"), ("e", [2], "int64"),
                           ("s", [2], "int64")],
                          lambda bb, x, b, e, s: relax.op.dynamic_strided_slice(x, b, e, s)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, begin, end, strides", [
    ((5, 6), [1, 0], [4, 6], [1, 2]),
    ((4, 3), [-1, 2], [-5, -4], [-1, -1]),
    ((3, 3), [2, 0], [2, 3], [1, 1]),      # empty
    ((6, 2), [0, 0], [100, 100], [3, 1]),  # clipped
])
def test_dynamic_strided_slice(slice_exe, device, on, shape, begin, end, strides):
    vm = shapefn.VirtualMachine(slice_exe(device), on)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    args = [np.array(v, np.int64) for v in (begin, end, strides)]
    got = vm(x, *args).numpy()
    want = relax_vm(slice_exe.mod)["main"](*[tvm.runtime.tensor(a) for a in (x, *args)]).numpy()
    np.testing.assert_array_equal(got, want)
    # begin, end and strides arrive on the device: a kernel there computes
    # the two extents, and those alone cross (2 x 8 bytes) — never x.
    assert vm.counters["d2h_bytes"] == 16


@pytest.fixture(scope="module")
def nonzero_exe():
    mod = relax_main([("x", [sym("n"), sym("m")], "float32")], lambda bb, x: relax.op.nonzero(x))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x", [np.array([[0, 1.5, 0], [2, 0, 3]], np.float32), np.zeros((2, 2), np.float32),
                               np.ones((1, 4), np.float32), np.zeros((0, 3), np.float32)])
def test_nonzero_reads_back_only_its_count(nonzero_exe, device, on, x):
    vm = shapefn.VirtualMachine(nonzero_exe(device), on)
    got = vm(x).numpy()
    np.testing.assert_array_equal(got, np.stack(np.nonzero(x)))
    if x.size:
        np.testing.assert_array_equal(got, relax_vm(nonzero_exe.mod)["main"](tvm.runtime.tensor(x)).numpy())
    assert vm.counters["d2h_bytes"] == 8 and vm.counters["syncs"] == 1


@pytest.fixture(scope="module")
def unique_exe():
    mod = relax_main([("x", [sym("n")], "float32")], lambda bb, x: relax.op.unique(
        x, sorted=True, return_index=True, return_inverse=True, return_counts=True))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x", [np.array([3, 1, 3, 2, 1, 1], np.float32), np.array([5], np.float32),
                               np.array([], np.float32), np.array([2, 2, 2], np.float32)])
def test_unique_reads_back_only_its_count(unique_exe, device, on, x):
    vm = shapefn.VirtualMachine(unique_exe(device), on)
    values, index, inverse, counts = vm(x)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, w in zip((values, index, inverse, counts), want):
        np.testing.assert_array_equal(got.numpy(), w)
    assert vm.counters["d2h_bytes"] == 8


def onnx_nms_reference(boxes, scores, max_out, iou, score_threshold):
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["y"])], "nms",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("m", TensorProto.INT64, None),
         helper.make_tensor_value_info("i", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"b": boxes, "s": scores, "m": max_out, "i": iou, "t": score_threshold})[0]


@pytest.fixture(scope="module")
def nms_exe():
    def body(bb, boxes, scores, max_out, iou, threshold):
        result = bb.emit(relax.op.vision.all_class_non_max_suppression(
            boxes, scores, max_out, iou, threshold, output_format="onnx"))
        return bb.emit(relax.TupleGetItem(result, 0))

    mod = relax_main([("boxes", [1, sym("n"), 4], "float32"), ("scores", [1, sym("c"), sym("n")], "float32"),
                 ("max_out", [1], "int64"), ("iou", [1], "float32"), ("threshold", [1], "float32")], body)
    return Compiled(mod)


def nms_inputs(n, c, max_out, threshold):
    rng = np.random.default_rng(n)
    corners = rng.uniform(0, 10, (1, n, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(1, 5, (1, n, 2)).astype(np.float32)], axis=2)
    scores = rng.uniform(0, 1, (1, c, n)).astype(np.float32)
    return (boxes, scores, np.array([max_out], np.int64), np.array([0.5], np.float32),
            np.array([threshold], np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n, c, max_out, threshold", [(12, 2, 3, 0.2), (7, 3, 10, 0.0), (5, 1, 0, 0.0),
                                                      (6, 2, 4, 2.0)])
def test_non_max_suppression_reads_back_only_values_and_count(nms_exe, device, on, n, c, max_out, threshold):
    args = nms_inputs(n, c, max_out, threshold)
    vm = shapefn.VirtualMachine(nms_exe(device), on)
    np.testing.assert_array_equal(vm(*args).numpy(), onnx_nms_reference(*args))
    # max_output_boxes_per_class (its value bounds the output) and the count.
    assert vm.counters["d2h_bytes"] == 8 + 8


# -- ops through shapefn.compiler.ops (runtime values Relax cannot express) -----------

@pytest.fixture(scope="module")
def topk_exe():
    mod = relax_main([("x", [sym("n"), sym("m")], "float32"), ("k", [1], "int64")],
                lambda bb, x, k: relax.Tuple(list(ops.topk(bb, x, k, axis=1))))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, k", [((3, 7), 2), ((2, 5), 5), ((4, 3), 0)])
def test_topk_with_a_runtime_k(topk_exe, device, on, shape, k):
    vm = shapefn.VirtualMachine(topk_exe(device), on)
    x = np.random.default_rng(k).permutation(np.prod(shape)).astype(np.float32).reshape(shape)
    values, indices = vm(x, np.array([k], np.int64))
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, axis=1))
    assert vm.counters["d2h_bytes"] == 8  # k only


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, repeats", [((2, 3), [2, 1]), ((3,), [2, 2]), ((2, 2), [0, 3])])
def test_tile_with_runtime_repeats(device, on, shape, repeats):
    mod = relax_main([("x", [sym("a")] + [sym("b")] * (len(shape) - 1), "float32"), ("r", [2], "int64")],
                lambda bb, x, r: ops.tile(bb, x, r))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    vm, got = run(mod, x, np.array(repeats, np.int64), device=device, on=on)
    np.testing.assert_array_equal(got.numpy(), np.tile(x, repeats))


@pytest.fixture(scope="module")
def arange_exe():
    mod = relax_main([("start", [], "int64"), ("stop", [], "int64"), ("step", [], "int64")],
                lambda bb, a, b, c: ops.arange(bb, a, b, c))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("start, stop, step", [(0, 10, 3), (5, -4, -2), (3, 3, 1), (7, 2, 1)])
def test_arange_with_runtime_bounds(arange_exe, device, on, start, stop, step):
    vm = shapefn.VirtualMachine(arange_exe(device), on)
    got = vm(*(np.array(v, np.int64) for v in (start, stop, step))).numpy()
    np.testing.assert_array_equal(got, np.arange(start, stop, step))


@pytest.fixture(scope="module")
def resize_exe():
    mod = relax_main([("x", [1, 2, sym("h"), sym("w")], "float32"), ("size", [2], "int64")],
                lambda bb, x, s: ops.resize2d(bb, x, s, method="linear", coordinate_transformation_mode="half_pixel"))
    return Compiled(mod)


def onnx_resize_reference(x, sizes):
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                          coordinate_transformation_mode="half_pixel")], "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "sizes": sizes})[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, size", [((4, 5), (8, 3)), ((3, 3), (3, 7)), ((6, 2), (1, 1))])
def test_resize_to_a_runtime_size(resize_exe, device, on, shape, size):
    vm = shapefn.VirtualMachine(resize_exe(device), on)
    x = np.random.default_rng(1).standard_normal((1, 2, *shape)).astype(np.float32)
    got = vm(x, np.array(size, np.int64)).numpy()
    np.testing.assert_allclose(got, onnx_resize_reference(x, np.array([1, 2, *size], np.int64)), rtol=1e-5,
                               atol=1e-6)
    assert vm.counters["d2h_bytes"] == 16


@pytest.fixture(scope="module")
def pad_exe():
    mod = relax_main([("x", [sym("a"), sym("b")], "float32"), ("pads", [4], "int64"), ("v", [], "float32")],
                lambda bb, x, p, v: ops.pad(bb, x, p, v))
    return Compiled(mod)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pads", [[1, 0, 2, 3], [0, -1, 0, 1], [0, 0, 0, 0], [-2, 0, 0, 0]])
def test_pad_with_runtime_pads(pad_exe, device, on, pads):
    vm = shapefn.VirtualMachine(pad_exe(device), on)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b0, b1, e0, e1 = pads
    want = np.pad(x, [(max(b0, 0), max(e0, 0)), (max(b1, 0), max(e1, 0))], constant_values=9.0)
    want = want[max(-b0, 0):want.shape[0] - max(-e0, 0), max(-b1, 0):want.shape[1] - max(-e1, 0)]
    np.testing.assert_array_equal(vm(x, np.array(pads, np.int64), np.array(9.0, np.float32)).numpy(), want)
    assert vm.counters["d2h_bytes"] == 32  # the pads only


def per_class_nonzero(classes):
    """Per-class filtering as in SSD-lite: ``main(scores: f32[n, classes])``
    returns, per class, the rows whose score exceeds 0.5."""
    def body(bb, scores):
        picked = []
        for c in range(classes):
            column = bb.emit(relax.op.take(scores, relax.const(c, "int64"), axis=1))
            keep = bb.emit(relax.op.nonzero(bb.emit(relax.op.greater(column, relax.const(0.5, "float32")))))
            picked.append(keep)
        return relax.Tuple(picked)

    return relax_main([("scores", [sym("n"), classes], "float32")], body)


@pytest.mark.parametrize("device", DEVICES)
def test_independent_counts_are_read_back_in_one_sync(device, on):
    """Per-class filtering as in SSD-lite: the counts of independent nonzero
    ops wait on the device together, once."""
    classes = 5
    scores = np.random.default_rng(0).uniform(0, 1, (40, classes)).astype(np.float32)
    vm, got = run(per_class_nonzero(classes), scores, device=device, on=on)
    for c, g in enumerate(got):
        np.testing.assert_array_equal(g.numpy(), np.stack(np.nonzero(scores[:, c] > 0.5)))
    assert vm.counters["syncs"] == 1 and vm.counters["d2h_bytes"] == 8 * classes


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_data_dependent_ops_are_computed_once(device, on):
    mod = relax_main([("x", [sym("n")], "float32")],
                lambda bb, x: relax.Tuple([bb.emit(relax.op.nonzero(x)), bb.emit(relax.op.nonzero(x))]))
    x = np.array([0, 1, 0, 2], np.float32)
    vm, (a, b) = run(mod, x, device=device, on=on)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert vm.counters["d2h_copies"] == 1


def i64(*values):
    return np.array(values, np.int64)


MAIN_PROGRAMS = {  # a Compiled fixture or per_class_nonzero: argument lists
    "reshape_vm": [[np.zeros((2, 6), np.float32), i64(3, -1, 2)], [np.zeros((0, 6), np.float32), i64(0, 5, 2)]],
    "slice_exe": [[np.ones((5, 6), np.float32), i64(1, 0), i64(4, 6), i64(1, 2)],
                     [np.ones((3, 3), np.float32), i64(2, 0), i64(2, 3), i64(1, 1)]],
    "nonzero_exe": [[np.array([[0, 1.5, 0], [2, 0, 3]], np.float32)], [np.zeros((0, 3), np.float32)]],
    "unique_exe": [[np.array([3, 1, 3, 2, 1, 1], np.float32)], [np.array([], np.float32)]],
    "nms_exe": [list(nms_inputs(12, 2, 3, 0.2)), list(nms_inputs(5, 1, 0, 0.0))],
    "topk_exe": [[np.arange(21, dtype=np.float32).reshape(3, 7), i64(2)],
                 [np.zeros((4, 3), np.float32), i64(0)]],
    "pad_exe": [[np.ones((2, 3), np.float32), i64(1, 0, 2, 3), np.array(9.0, np.float32)]],
    "per_class_nonzero": [[np.random.default_rng(0).uniform(0, 1, (40, 5)).astype(np.float32)]],
}


@opencl
@pytest.mark.parametrize("program", MAIN_PROGRAMS)
def test_main_programs_count_the_same_on_sim_and_opencl(request, program):
    """Same results, and the same copies, syncs and calls on both devices
    (the tests above check each device's results against references)."""
    mod = per_class_nonzero(5) if program == "per_class_nonzero" else request.getfixturevalue(program).mod
    results = run_on_devices(mod, MAIN_PROGRAMS[program])  # asserts the counters equal
    for (sim_out, _), (opencl_out, _) in zip(results["sim"], results["opencl"], strict=True):
        for a, b in zip(*(out if isinstance(out, tuple) else (out,) for out in (sim_out, opencl_out)), strict=True):
            assert (b.dtype, b.shape) == (a.dtype, a.shape)
            if np.issubdtype(a.dtype, np.floating):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(b, a)
