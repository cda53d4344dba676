"""A loop that reads, in every iteration, one row of a small tensor
computed on the device before it, to size its work: Mask R-CNN's
paste-masks ``Loop`` as torchvision exports it, small and hand-made. Each
detection's mask is resized to its box (sizes from the box row) and padded
into an image-sized canvas (pads from the box row and the image size),
and the canvases are summed.

The boxes (an int64 [N, 4] tensor the device computes from the input) are
read back whole, once, before the loop, in the readback group of their
phase; every iteration takes its box from that host copy: one sync per
inference whatever N, and only the boxes' bytes cross to the host. The
masks feed a device kernel as data and stay on the device."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import shapefn
from conftest import DEVICES, device_independent
from shapefn.compiler.compile import lower, lower_dynamic_ops
from shapefn.compiler.passes import host_params, placement

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MASK = 6


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), f"{name}_value"))


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def paste_loop_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [
            const("b0", [0]), const("b1", [1]), const("b2", [2]), const("b3", [3]), const("b4", [4]),
            const("lead", [1, 1]), const("axes01", [0, 1]),
            node("Gather", ["boxes", "i"], ["box"], axis=0),  # the loop reads one box per iteration
            node("Slice", ["box", "b0", "b1"], ["x0"]), node("Slice", ["box", "b1", "b2"], ["y0"]),
            node("Slice", ["box", "b2", "b3"], ["x1"]), node("Slice", ["box", "b3", "b4"], ["y1"]),
            node("Sub", ["x1", "x0"], ["w0"]), node("Add", ["w0", "b1"], ["w"]),
            node("Sub", ["y1", "y0"], ["h0"]), node("Add", ["h0", "b1"], ["h"]),
            node("Gather", ["masks", "i"], ["mask"], axis=0), node("Unsqueeze", ["mask", "b0"], ["mask4"]),
            node("Concat", ["lead", "h", "w"], ["size"], axis=0),
            node("Resize", ["mask4", "", "", "size"], ["resized"], mode="linear"),
            node("Sub", ["last_row", "y1"], ["below"]), node("Sub", ["last_col", "x1"], ["right"]),
            node("Concat", ["b0", "b0", "y0", "x0", "b0", "b0", "below", "right"], ["pads"], axis=0),
            node("Pad", ["resized", "pads"], ["padded"]),
            node("Squeeze", ["padded", "axes01"], ["pasted"]),
            node("Add", ["canvas", "pasted"], ["canvas_out"]),
            node("Identity", ["cond"], ["cond_out"]),
        ],
        "paste_one_mask",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("canvas", F, ["H", "W"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("canvas_out", F, ["H", "W"])])
    graph = helper.make_graph(
        [
            const("s0", [0]), const("s1", [1]), const("s2", [2]), const("s3", [3]), const("s4", [4]),
            const("go", np.array(True)),
            node("Shape", ["image"], ["image_shape"]),
            node("Slice", ["image_shape", "s2", "s3"], ["height"]),
            node("Slice", ["image_shape", "s3", "s4"], ["width"]),
            node("Sub", ["height", "s1"], ["last_row"]), node("Sub", ["width", "s1"], ["last_col"]),
            node("Slice", ["image_shape", "s2", "s4"], ["canvas_shape"]),
            node("ConstantOfShape", ["canvas_shape"], ["canvas0"],
                 value=numpy_helper.from_array(np.zeros(1, np.float32))),
            # Pixel boxes, computed on the device.
            node("Floor", ["raw_boxes"], ["floored"]), node("Cast", ["floored"], ["boxes"], to=I64),
            node("Shape", ["raw_boxes"], ["boxes_shape"]), node("Slice", ["boxes_shape", "s0", "s1"], ["n1"]),
            node("Squeeze", ["n1", "s0"], ["n"]),
            node("Loop", ["n", "go", "canvas0"], ["canvas"], body=body),
        ],
        "paste_masks",
        [helper.make_tensor_value_info("image", F, [1, 3, "H", "W"]),
         helper.make_tensor_value_info("raw_boxes", F, ["N", 4]),
         helper.make_tensor_value_info("masks", F, ["N", 1, MASK, MASK])],
        [helper.make_tensor_value_info("canvas", F, ["H", "W"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def feeds(n, height, width, seed):
    """Boxes inside the image, at least one pixel wide and high."""
    rng = np.random.default_rng(seed)
    x0, y0 = rng.uniform(0, width / 2, n), rng.uniform(0, height / 2, n)
    x1, y1 = x0 + rng.uniform(1, width / 2 - 1, n), y0 + rng.uniform(1, height / 2 - 1, n)
    return [rng.standard_normal((1, 3, height, width)).astype(np.float32),
            np.stack([x0, y0, x1, y1], 1).astype(np.float32),
            rng.standard_normal((n, 1, MASK, MASK)).astype(np.float32)]


@pytest.mark.parametrize("device", DEVICES)
def test_loop_reads_its_boxes_back_once(device):
    model = paste_loop_model()
    exe = shapefn.compile(shapefn.from_onnx(model), device)
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, height, width in [(3, 20, 24), (9, 30, 18), (1, 16, 16)]:
        args = feeds(n, height, width, seed=n)
        (want,) = session.run(None, dict(zip(["image", "raw_boxes", "masks"], args)))
        vm.reset_counters()
        got = vm(*args).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        counters = device_independent(vm.counters)
        # One sync and one copy to the host: the boxes, whole (N x 4 int64).
        assert (counters["syncs"], counters["d2h_copies"], counters["d2h_bytes"]) == (1, 1, n * 4 * 8), counters


def test_only_small_tensors_that_compute_sizes_become_host_parameters():
    """Of the loop's captured tensors, the boxes and the image's last row
    and column (int64, read for sizes and pads) are host parameters; the
    masks (data for the resize kernel) and the carried canvas are not."""
    lowered = lower(lower_dynamic_ops(shapefn.from_onnx(paste_loop_model()), False))
    (loop,) = [gv for gv, f in lowered.functions.items() if gv.name_hint != "main" and isinstance(f, relax.Function)]
    tensors = {i: p for i, p in enumerate(lowered[loop].params) if isinstance(p.ty, relax.TensorType)}
    plan = host_params.plan(lowered, placement.ON_DEVICE)
    chosen = sorted((str(tensors[i].ty.dtype), tensors[i].ty.ndim) for i in plan[loop.name_hint])
    assert chosen == [("int64", 1), ("int64", 1), ("int64", 2)]
    assert sorted((str(p.ty.dtype), p.ty.ndim) for i, p in tensors.items() if i not in plan[loop.name_hint]) \
        == [("float32", 2), ("float32", 4)]
    assert host_params.plan(lowered, placement.ALL_ON_HOST) == {}
