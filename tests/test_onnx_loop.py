"""ONNX ``Loop`` imported by shapefn.from_onnx as a recursive Relax function,
compiled for a strict sim and for a real OpenCL device and compared with
onnxruntime: counted and while-style loops, scan outputs, bodies reading the
enclosing graph's values, trip counts computed at run time, a mask-pasting
loop, nested loops, and a 10,000-iteration loop (the self tail call is a
jump, so the VM's call depth does not grow), a loop carrying a sequence
(unrolled), a decoder step feeding ArgMax -> OneHot back. ONNX ``Scan`` too, which
shapefn imports as the Loop it is (``frontend/onnx/scan.py``)."""
import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import shapefn
from conftest import DEVICES
from shapefn.frontend import from_onnx

# onnx_check runs these on every device: loops read their host parameters back from the device.
ONNX_CHECK_DEVICES = DEVICES

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def info(name, elem_type, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def body_graph(nodes, carried, outputs, inits=(), names=("i", "cond_in", "cond_out")):
    """A Loop body: inputs (i, cond_in, *carried), outputs (cond_out, *outputs)."""
    iteration, cond_in, cond_out = names
    return helper.make_graph(
        nodes, "body", [info(iteration, I64, []), info(cond_in, B, []), *[info(*c) for c in carried]],
        [info(cond_out, B, []), *[info(*o) for o in outputs]],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])


def model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(
        nodes, "g", [info(*i) for i in inputs], [info(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def counted():
    """``for i < 4: x = x * 0.5 + i; n = n + 1`` (M a constant, no condition)."""
    rng = np.random.default_rng(0)  # the same feeds on every device
    body = body_graph(
        [node("Cast", ["i"], ["fi"], to=F), node("Mul", ["x_in", "half"], ["h"]), node("Add", ["h", "fi"], ["x_out"]),
         node("Add", ["n_in", "one"], ["n_out"]), node("Identity", ["cond_in"], ["cond_out"])],
        [("x_in", F), ("n_in", I64)], [("x_out", F), ("n_out", I64)], {"half": np.float32(0.5), "one": np.int64(1)})
    m = model([node("Loop", ["M", "", "x", "n0"], ["xf", "nf"], body=body)], [("x", F, ["N", 3])],
              [("xf", F), ("nf", I64)], {"M": np.int64(4), "n0": np.int64(0)})
    return m, [[rng.standard_normal((n, 3)).astype(np.float32)] for n in (5, 1)]


def while_style():
    """``while sum(x) < limit: x = x * 2`` — no M; the condition comes from
    the graph first, then from the body."""
    body = body_graph(
        [node("Mul", ["x_in", "two"], ["x_out"]), node("ReduceSum", ["x_out"], ["s"], keepdims=0),
         node("Less", ["s", "limit"], ["cond_out"])],
        [("x_in", F)], [("x_out", F)], {"two": np.float32(2)})
    m = model([node("ReduceSum", ["x"], ["s0"], keepdims=0), node("Less", ["s0", "limit"], ["c0"]),
               node("Loop", ["", "c0", "x"], ["xf"], body=body)],
              [("x", F, ["N"]), ("limit", F, [])], [("xf", F)])
    return m, [[np.array([0.5, 1.0, 0.25], np.float32), np.array(100, np.float32)],
               [np.array([1.0, 2.0], np.float32), np.array(2, np.float32)]]  # condition false at once: no iteration


def scans():
    """Scan outputs of per-iteration shapes [N] and [2]; M an input."""
    rng = np.random.default_rng(0)  # the same feeds on every device
    body = body_graph(
        [node("Cast", ["i"], ["fi"], to=F), node("Mul", ["x_in", "fi"], ["xs"]),
         node("Add", ["x_in", "one"], ["x_out"]), node("ReduceMax", ["x_out"], ["mx"], keepdims=1),
         node("ReduceMin", ["x_out"], ["mn"], keepdims=1),
         node("Concat", ["mx", "mn"], ["mm"], axis=0), node("Identity", ["cond_in"], ["cond_out"])],
        [("x_in", F)], [("x_out", F), ("xs", F, ["N"]), ("mm", F, [2])], {"one": np.float32(1)})
    m = model([node("Loop", ["M", "", "x"], ["xf", "scan_x", "scan_mm"], body=body)],
              [("M", I64, []), ("x", F, ["N"])], [("xf", F), ("scan_x", F), ("scan_mm", F)])
    return m, [[np.array(3), rng.standard_normal(4).astype(np.float32)],
               [np.array(6), rng.standard_normal(2).astype(np.float32)],
               [np.array(0), rng.standard_normal(3).astype(np.float32)]]  # no iteration: empty scans


def outer_scope():
    """The body reads a graph input (w), a tensor computed outside (b), a
    shape value TVM keeps as a shape (Shape(x), a reshape target) and a size
    it keeps as a scalar (Gather(Shape(x), 0))."""
    rng = np.random.default_rng(0)  # the same feeds on every device
    body = body_graph(
        [node("MatMul", ["h_in", "w"], ["hw"]), node("Add", ["hw", "b"], ["hb"]), node("Relu", ["hb"], ["r"]),
         node("Cast", ["rows"], ["rows_f"], to=F), node("Div", ["r", "rows_f"], ["rs"]),
         node("Reshape", ["rs", "xshape"], ["h_out"]), node("Identity", ["cond_in"], ["cond_out"])],
        [("h_in", F)], [("h_out", F)])
    m = model([node("Shape", ["x"], ["xshape"]), node("Gather", ["xshape", "zero"], ["rows"], axis=0),
               node("ReduceMean", ["x"], ["b"], axes=[0], keepdims=0),
               node("Loop", ["M", "", "x"], ["hf"], body=body)],
              [("x", F, ["N", 4]), ("w", F, [4, 4])], [("hf", F)], {"M": np.int64(3), "zero": np.int64(0)})
    w = rng.standard_normal((4, 4)).astype(np.float32)
    return m, [[rng.standard_normal((n, 4)).astype(np.float32), w] for n in (3, 6)]


def data_dependent_trip_count():
    """M = the number of positive elements of x, computed on the device; the
    carried ``acc`` grows by one element per iteration (Concat)."""
    rng = np.random.default_rng(0)  # the same feeds on every device
    body = body_graph(
        [node("Unsqueeze", ["i", "axis0"], ["i1"]), node("Concat", ["acc_in", "i1"], ["acc_out"], axis=0),
         node("Gather", ["x", "i"], ["xi"], axis=0), node("Add", ["s_in", "xi"], ["s_out"]),
         node("Identity", ["cond_in"], ["cond_out"])],
        [("acc_in", I64), ("s_in", F)], [("acc_out", I64), ("s_out", F)], {"axis0": np.array([0], np.int64)})
    m = model([node("Greater", ["x", "zero"], ["pos"]), node("Cast", ["pos"], ["posi"], to=I64),
               node("ReduceSum", ["posi"], ["M"], keepdims=0),
               node("Loop", ["M", "", "acc0", "s0"], ["acc", "s"], body=body)],
              [("x", F, ["N"])], [("acc", I64), ("s", F)],
              {"zero": np.float32(0), "acc0": np.zeros(0, np.int64), "s0": np.float32(0)})
    return m, [[rng.standard_normal(n).astype(np.float32)] for n in (9, 4)]


def long_loop():
    """10,000 (and 12,345) iterations: ``x = x + 1; s = s + i`` — a
    recursion this deep would exceed the VM's call-depth limit of 512."""
    body = body_graph(
        [node("Add", ["x_in", "onef"], ["x_out"]), node("Add", ["s_in", "i"], ["s_out"]),
         node("Identity", ["cond_in"], ["cond_out"])],
        [("x_in", F), ("s_in", I64)], [("x_out", F), ("s_out", I64)], {"onef": np.float32(1)})
    m = model([node("Loop", ["M", "", "x", "s0"], ["xf", "sf"], body=body)],
              [("M", I64, []), ("x", F, ["N"])], [("xf", F), ("sf", I64)], {"s0": np.int64(0)})
    return m, [[np.array(10_000), np.zeros(3, np.float32)], [np.array(12_345), np.ones(1, np.float32)]]


def paste_masks():
    """torchvision's ``_onnx_paste_masks_in_image_loop`` in small: for each
    detection (M from ``Shape(masks)``), its 28x28 mask resized to its box's
    runtime size and padded into the image, appended to a growing result."""
    rng = np.random.default_rng(0)  # the same feeds on every device
    body = body_graph(
        [node("Gather", ["masks", "i"], ["mask"], axis=0), node("Unsqueeze", ["mask", "axes01"], ["mask4"]),
         node("Gather", ["boxes", "i"], ["box"], axis=0),
         node("Slice", ["box", "zero1", "two1"], ["x0y0"]), node("Slice", ["box", "two1", "four1"], ["x1y1"]),
         node("Sub", ["x1y1", "x0y0"], ["wh"]), node("Slice", ["wh", "one1", "two1"], ["h"]),
         node("Slice", ["wh", "zero1", "one1"], ["w"]), node("Concat", ["one_one", "h", "w"], ["size"], axis=0),
         node("Resize", ["mask4", "", "", "size"], ["resized"], mode="linear",
              coordinate_transformation_mode="pytorch_half_pixel"),
         node("Squeeze", ["resized", "axes01"], ["pasted"]),
         node("Slice", ["x0y0", "one1", "two1"], ["y0"]), node("Slice", ["x0y0", "zero1", "one1"], ["x0"]),
         node("Slice", ["x1y1", "one1", "two1"], ["y1"]), node("Slice", ["x1y1", "zero1", "one1"], ["x1"]),
         node("Sub", ["im_h", "y1"], ["pad_y1"]), node("Sub", ["im_w", "x1"], ["pad_x1"]),
         node("Concat", ["y0", "x0", "pad_y1", "pad_x1"], ["pads"], axis=0),
         node("Pad", ["pasted", "pads"], ["im_mask"]), node("Unsqueeze", ["im_mask", "zero1"], ["im_mask3"]),
         node("Concat", ["res_in", "im_mask3"], ["res_out"], axis=0), node("Identity", ["cond_in"], ["cond_out"])],
        [("res_in", F)], [("res_out", F)],
        {"axes01": np.array([0, 1], np.int64), "zero1": np.array([0], np.int64), "one1": np.array([1], np.int64),
         "two1": np.array([2], np.int64), "four1": np.array([4], np.int64), "one_one": np.array([1, 1], np.int64)})
    m = model([node("Shape", ["masks"], ["ms"]), node("Gather", ["ms", "zero"], ["n"], axis=0),
               node("Shape", ["image"], ["image_shape"]), node("Slice", ["image_shape", "two1", "three1"], ["im_h"]),
               node("Slice", ["image_shape", "three1", "four1"], ["im_w"]),
               node("Concat", ["zero1", "im_h", "im_w"], ["empty_shape"], axis=0),
               node("ConstantOfShape", ["empty_shape"], ["res0"],
                    value=numpy_helper.from_array(np.zeros(1, np.float32))),
               node("Loop", ["n", "", "res0"], ["res"], body=body)],
              [("masks", F, ["N", 28, 28]), ("boxes", I64, ["N", 4]), ("image", F, [1, 3, "H", "W"])], [("res", F)],
              {"zero": np.int64(0), "zero1": np.array([0], np.int64), "two1": np.array([2], np.int64),
               "three1": np.array([3], np.int64), "four1": np.array([4], np.int64)})

    def feed(n, height, width):
        corners = np.sort(rng.integers(0, [width, height], (2, n, 2)), axis=0)
        corners[1] += 1  # at least one pixel wide
        boxes = np.concatenate([corners[0], np.minimum(corners[1], [width, height])], axis=1).astype(np.int64)
        return [rng.uniform(0, 1, (n, 28, 28)).astype(np.float32), boxes, np.zeros((1, 3, height, width), np.float32)]

    return m, [feed(3, 20, 30), feed(2, 9, 7)]


def nested():
    """A loop in a loop: the inner one runs the outer's iteration number of
    times, adding a graph input to the outer's carried value."""
    rng = np.random.default_rng(0)  # the same feeds on every device
    inner = body_graph([node("Add", ["t_in", "x"], ["t_out"]), node("Identity", ["c_in"], ["c_out"])],
                       [("t_in", F)], [("t_out", F)], names=("j", "c_in", "c_out"))
    outer = body_graph([node("Loop", ["i", "", "acc_in"], ["acc_out"], body=inner),
                        node("Identity", ["acc_out"], ["acc_scan"]), node("Identity", ["cond_in"], ["cond_out"])],
                       [("acc_in", F)], [("acc_out", F), ("acc_scan", F)])
    m = model([node("Loop", ["M", "", "x"], ["res", "scan"], body=outer)], [("M", I64, []), ("x", F, ["N"])],
              [("res", F), ("scan", F)])
    return m, [[np.array(4), rng.standard_normal(3).astype(np.float32)],
               [np.array(2), rng.standard_normal(5).astype(np.float32)]]


def sequence_carried(trips=3):
    """A loop carrying a sequence (unrolled: the tuple grows each
    iteration), ``seq += [x * (i + 1)]``, with a scan output beside it."""
    seq = helper.make_tensor_sequence_value_info
    body = helper.make_graph(
        [node("Add", ["i", "one"], ["i1"]), node("Cast", ["i1"], ["f"], to=F), node("Mul", ["x", "f"], ["y"]),
         node("SequenceInsert", ["seq_in", "y"], ["seq_out"]), node("Identity", ["cond_in"], ["cond_out"])],
        "body", [info("i", I64, []), info("cond_in", B, []), seq("seq_in", F, None)],
        [info("cond_out", B, []), seq("seq_out", F, None), info("y", F, None)],
        [numpy_helper.from_array(np.int64(1), "one")])
    m = model([node("SequenceEmpty", [], ["empty"], dtype=F),
               node("Loop", ["M", "", "empty"], ["seq", "ys"], body=body),
               node("ConcatFromSequence", ["seq"], ["joined"], axis=0)],
              [("x", F, ["N", 2])], [("joined", F), ("ys", F)], {"M": np.int64(trips)})
    return m, [[np.arange(2 * n, dtype=np.float32).reshape(n, 2)] for n in (3, 1)]


def decoder_step():
    """An autoregressive step fed back through the loop (a table-structure
    decoder's): ArgMax of the carried state, shifted, then OneHot with a
    1-element constant depth and constant values; and a Split by constant
    sizes with an empty part (tf2onnx's) inside the body."""
    body = body_graph(
        [node("ArgMax", ["s_in"], ["am"], axis=1, keepdims=0), node("Add", ["am", "one"], ["am1"]),
         node("Mod", ["am1", "ten"], ["next"]), node("OneHot", ["next", "depth", "values"], ["s_out"], axis=-1),
         node("Split", ["s_out", "sizes"], ["head", "none", "tail"], axis=1),
         node("Concat", ["tail", "none", "head"], ["rolled"], axis=1), node("Identity", ["cond_in"], ["cond_out"])],
        [("s_in", F, ["N", 10])], [("s_out", F, ["N", 10]), ("rolled", F, ["N", 10])],
        {"depth": np.array([10], np.int64), "values": np.array([0, 1], np.float32), "one": np.int64(1),
         "ten": np.int64(10), "sizes": np.array([3, 0, 7], np.int64)})
    m = model([node("Loop", ["trip", "", "x"], ["y", "rolls"], body=body)],
              [("x", F, ["N", 10]), ("trip", I64, [])], [("y", F), ("rolls", F)])
    rng = np.random.default_rng(5)
    return m, [[rng.standard_normal((2, 10)).astype(np.float32), np.array(4, np.int64)],
               [rng.standard_normal((1, 10)).astype(np.float32), np.array(1, np.int64)]]


CASES = {f.__name__: f for f in (counted, while_style, scans, outer_scope, data_dependent_trip_count, long_loop,
                                 paste_masks, nested, sequence_carried, decoder_step)}


def scan_model(in_reverse, out_reverse, out_axis):
    """A running sum and product over the rows of x [T, 3] read along axis 1
    of xt [3, T] (scan input axes 0 and 1), carrying (sum, count); the
    partial sums are the scan output, stacked along ``out_axis``."""
    body = helper.make_graph(
        [node("Add", ["sum_in", "row"], ["sum_out"]), node("Mul", ["row", "column"], ["both"]),
         node("Add", ["count_in", "one"], ["count_out"]), node("Identity", ["sum_out"], ["partial"]),
         node("Identity", ["both"], ["product"])],
        "scan_body", [info("sum_in", F, [3]), info("count_in", I64, []), info("row", F, [3]), info("column", F, [3])],
        [info("sum_out", F, [3]), info("count_out", I64, []), info("partial", F, [3]), info("product", F, [3])],
        [numpy_helper.from_array(np.int64(1), "one")])
    scan = node("Scan", ["sum0", "count0", "x", "xt"], ["sum", "count", "partials", "products"], body=body,
                num_scan_inputs=2, scan_input_axes=[0, 1], scan_input_directions=[in_reverse, 0],
                scan_output_axes=[out_axis, 0], scan_output_directions=[out_reverse, 0])
    m = model([scan], [("sum0", F, [3]), ("count0", I64, []), ("x", F, ["T", 3]), ("xt", F, [3, "T"])],
              [("sum", F, None), ("count", I64, None), ("partials", F, None), ("products", F, None)])
    m.opset_import[0].version = 16
    rng = np.random.default_rng(3)

    def feed(t):
        x = rng.standard_normal((t, 3)).astype(np.float32)
        return [np.zeros(3, np.float32), np.array(0, np.int64), x, rng.standard_normal((3, t)).astype(np.float32)]

    return m, [feed(4), feed(1)]


@pytest.mark.parametrize("in_reverse, out_reverse, out_axis", [(0, 0, 0), (1, 0, 1), (0, 1, -1), (1, 1, 0)])
def test_scan_matches_onnxruntime(onnx_check, in_reverse, out_reverse, out_axis):
    onnx_check(*scan_model(in_reverse, out_reverse, out_axis), atol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_loop_matches_onnxruntime(onnx_check, case):
    """On sim and on OpenCL (onnx_check's devices), with the same counters."""
    onnx_check(*CASES[case]())


@pytest.mark.parametrize("device", DEVICES)
def test_long_loop_runs_in_one_frame(device):
    """The tail call is a jump: 10,000 iterations run within the default call
    depth limit (512)."""
    m, feeds = long_loop()
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), device),
                                shapefn.sim(strict=True) if device == "sim" else device)
    x, s = vm(*feeds[0])
    np.testing.assert_array_equal(x.numpy(), np.full(3, 10_000, np.float32))
    assert int(s.numpy()) == sum(range(10_000))
    # The trip count (a graph input, on the device) is read once; the loop
    # test runs on the host in registers.
    assert (vm.counters["d2h_bytes"], vm.counters["syncs"]) == (8, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_counted_loop_matches_tvm_relax_vm(device):
    """The imported Relax module runs the same on TVM's own Relax VM."""
    m, feeds = counted()
    mod = from_onnx(m)
    reference = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    vm = shapefn.VirtualMachine(shapefn.compile(mod, device), device)
    for (x,) in feeds:
        want = reference["main"](tvm.runtime.tensor(x))
        got = vm(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def test_a_loop_carrying_a_sequence_needs_its_trip_count_at_import():
    m, _ = sequence_carried()
    m.graph.initializer.pop()  # (M becomes a graph input)
    m.graph.input.append(info("M", I64, []))
    with pytest.raises(ValueError, match="carries a sequence: it is unrolled, which needs its trip count"):
        from_onnx(m)


def test_malformed_loops_raise_naming_the_problem():
    carried_missing = body_graph([node("Identity", ["cond_in"], ["cond_out"])], [], [("x_out", F)])
    carried_missing.node.append(node("Identity", ["x"], ["x_out"]))
    m = model([node("Loop", ["M", "", "x"], ["xf"], body=carried_missing)], [("x", F, ["N"])], [("xf", F)],
              {"M": np.int64(2)})
    with pytest.raises(ValueError, match=r"\(op_type:Loop\): .*Graph has 2 inputs but 3 were provided"):
        from_onnx(m)
    reads_undefined = body_graph(
        [node("Add", ["x_in", "nowhere"], ["x_out"]), node("Identity", ["cond_in"], ["cond_out"])],
        [("x_in", F)], [("x_out", F)])
    m = model([node("Loop", ["M", "", "x"], ["xf"], body=reads_undefined)], [("x", F, ["N"])], [("xf", F)],
              {"M": np.int64(2)})
    with pytest.raises(ValueError, match="'nowhere'"):  # onnx.checker's InvalidOnnxModel
        from_onnx(m)
