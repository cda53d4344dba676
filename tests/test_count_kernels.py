"""Count-sized kernels (nonzero, unique, NMS): results compacted at the front
of upper-bound buffers plus a count, checked against numpy and onnxruntime
at several shapes from one compile, including empty results."""
import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import helper

from shapefn.compiler.hand_built import build
from shapefn.compiler.kernels import count as count_kernels


def run_onnx(op, inputs, num_outputs=1, opset=13, **attrs):
    """Runs one ONNX node with onnxruntime; ``inputs`` is a list of
    ``(name, array)``."""
    node = helper.make_node(op, [n for n, _ in inputs], [f"y{i}" for i in range(num_outputs)],
                            **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in inputs],
        [helper.make_empty_tensor_value_info(f"y{i}") for i in range(num_outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(inputs))


def call(func, *arrays):
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    func(*tensors)
    return [t.numpy() for t in tensors]


# --------------------------------------------------------------------------- nonzero
@pytest.fixture(scope="module")
def nonzero_lib():
    return build({"1d": count_kernels.nonzero(1, "float32"),
                  "3d": count_kernels.nonzero(3, "int32"),
                  "2d_bool": count_kernels.nonzero(2, "bool")})


def compact_nonzero(func, data, upper=None):
    """Runs a nonzero kernel; returns the exact [ndim, count] result read from
    the front of the output, as the VM views it."""
    upper = data.size if upper is None else upper
    _, out, count = call(func, data, np.full((data.ndim, upper), -1, "int64"),
                         np.zeros(1, "int64"))
    count = int(count[0])
    return out.reshape(-1)[:data.ndim * count].reshape(data.ndim, count)


@pytest.mark.parametrize("name, shape", [
    ("1d", (17,)), ("1d", (1,)), ("1d", (0,)),
    ("3d", (2, 3, 4)), ("3d", (1, 5, 1)), ("3d", (3, 0, 2)),
    ("2d_bool", (6, 7)),
])
def test_nonzero_matches_numpy(nonzero_lib, rng, name, shape):
    dtype = {"1d": "float32", "3d": "int32", "2d_bool": "bool"}[name]
    sparse = (rng.random(shape) < 0.3) * rng.integers(1, 5, shape)
    for data in [sparse.astype(dtype), np.zeros(shape, dtype), np.ones(shape, dtype)]:
        got = compact_nonzero(nonzero_lib[name], data)
        np.testing.assert_array_equal(got, np.array(np.nonzero(data)).reshape(data.ndim, -1))
    ort_ref = run_onnx("NonZero", [("x", sparse.astype("float32"))])[0]
    np.testing.assert_array_equal(compact_nonzero(nonzero_lib[name], sparse.astype(dtype)), ort_ref)


def test_nonzero_larger_upper_bound_keeps_the_result_at_the_front(nonzero_lib):
    data = np.array([[0, 3, 0], [2, 0, 1]], "int32")[None]
    got = compact_nonzero(nonzero_lib["3d"], data, upper=50)
    np.testing.assert_array_equal(got, np.array(np.nonzero(data)))


def test_nonzero_rejects_an_output_smaller_than_the_data(nonzero_lib):
    data = np.ones(5, "float32")
    with pytest.raises(Exception, match="smaller than data"):
        call(nonzero_lib["1d"], data, np.zeros((1, 4), "int64"), np.zeros(1, "int64"))


# --------------------------------------------------------------------------- unique
@pytest.fixture(scope="module")
def unique_lib():
    return build({"float32": count_kernels.unique("float32"),
                  "int64_2d": count_kernels.unique("int64", ndim=2)})


def run_unique(func, data):
    numel = data.size
    _, values, first, inverse, counts, count = call(
        func, data, np.zeros(numel, data.dtype), np.zeros(numel, "int64"),
        np.zeros(numel, "int64"), np.zeros(numel, "int64"), np.zeros(1, "int64"))
    u = int(count[0])
    return values[:u], first[:u], inverse, counts[:u]


@pytest.mark.parametrize("name, data", [
    ("float32", np.array([2.5, -1, -1, 3, 2.5, 0, 7, -1], "float32")),
    ("float32", np.array([4.0], "float32")),
    ("float32", np.full(9, 1.5, "float32")),
    ("float32", np.arange(12, 0, -1).astype("float32")),
    ("int64_2d", np.random.default_rng(3).integers(-4, 5, (6, 7))),
    ("int64_2d", np.array([[5, 5], [5, 5]], "int64")),
])
def test_unique_matches_onnxruntime(unique_lib, name, data):
    got = run_unique(unique_lib[name], data)
    ref = run_onnx("Unique", [("x", data.reshape(-1))], 4, opset=11, sorted=1)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)


def test_unique_of_an_empty_tensor_counts_nothing(unique_lib):
    values, first, inverse, counts = run_unique(unique_lib["int64_2d"], np.zeros((0, 3), "int64"))
    assert values.size == first.size == inverse.size == counts.size == 0


# --------------------------------------------------------------------------- NMS
@pytest.fixture(scope="module")
def nms_lib():
    return build({"corners": count_kernels.non_max_suppression(0),
                  "centers": count_kernels.non_max_suppression(1)})


def random_boxes(rng, batches, boxes, center_point_box):
    """Overlapping boxes; corner boxes list their corners in either order."""
    if center_point_box:
        centers = rng.uniform(0, 4, (batches, boxes, 2))
        sizes = rng.uniform(0.5, 3, (batches, boxes, 2))
        return np.concatenate([centers, sizes], axis=2).astype("float32")
    a = rng.uniform(0, 4, (batches, boxes, 2))
    b = a + rng.uniform(-3, 3, (batches, boxes, 2))
    return np.concatenate([a, b], axis=2).astype("float32")


def run_nms(func, boxes, scores, max_out, iou, score_threshold, upper=None):
    b, c, n = scores.shape
    upper = b * c * n if upper is None else upper
    *_, selected, count = call(
        func, boxes, scores, np.array([max_out], "int64"), np.array([iou], "float32"),
        np.array([score_threshold], "float32"), np.full((upper, 3), -1, "int64"),
        np.zeros(1, "int64"))
    return selected[:int(count[0])]


def ort_nms(boxes, scores, max_out, iou, score_threshold, center_point_box):
    return run_onnx("NonMaxSuppression", [
        ("boxes", boxes), ("scores", scores), ("max_out", np.array([max_out], "int64")),
        ("iou", np.array([iou], "float32")), ("score", np.array([score_threshold], "float32")),
    ], center_point_box=center_point_box)[0]


@pytest.mark.parametrize("name, center_point_box", [("corners", 0), ("centers", 1)])
@pytest.mark.parametrize("batches, classes, boxes", [(1, 1, 6), (2, 3, 25), (1, 2, 1), (1, 2, 700)])
def test_nms_matches_onnxruntime(nms_lib, rng, name, center_point_box, batches, classes, boxes):
    box_data = random_boxes(rng, batches, boxes, center_point_box)
    # Scores on a coarse grid so that ties (broken by box index) occur.
    scores = (rng.integers(0, 10, (batches, classes, boxes)) / 10).astype("float32")
    for max_out, iou, score_threshold in [(100, 0.5, 0.0), (100, 0.2, 0.0), (3, 0.3, 0.25),
                                          (1, 0.0, 0.5), (0, 0.5, 0.0), (100, 1.0, 0.95),
                                          (5, 0.5, 2.0)]:
        got = run_nms(nms_lib[name], box_data, scores, max_out, iou, score_threshold)
        ref = ort_nms(box_data, scores, max_out, iou, score_threshold, center_point_box)
        np.testing.assert_array_equal(got, ref.reshape(-1, 3),
                                      err_msg=f"{max_out=} {iou=} {score_threshold=}")


def test_nms_stops_at_the_upper_bound(nms_lib, rng):
    box_data = random_boxes(rng, 2, 10, 0)
    scores = rng.random((2, 2, 10)).astype("float32")
    ref = ort_nms(box_data, scores, 10, 0.5, 0.0, 0)
    assert len(ref) > 4
    got = run_nms(nms_lib["corners"], box_data, scores, 10, 0.5, 0.0, upper=4)
    np.testing.assert_array_equal(got, ref[:4])


def batched_boxes(rng, classes, per_class):
    """torchvision's batched NMS input: each class's corner boxes offset by
    class * (largest coordinate + 1), so classes never overlap."""
    xy = rng.uniform(0, 300, (classes, per_class, 2))
    boxes = np.concatenate([xy, np.minimum(xy + rng.uniform(5, 120, (classes, per_class, 2)), 320)], axis=-1)
    boxes += np.arange(classes)[:, None, None] * 321.0
    return boxes.reshape(1, -1, 4).astype("float32")


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_nms_of_boxes_far_apart_and_of_non_finite_boxes_matches_onnxruntime(nms_lib, rng, center_point_box):
    """Candidates are compared only with the kept boxes near them along x
    (a grid of cells): boxes spread far apart, NaN and infinite coordinates
    (one cell then holds all) give onnxruntime's selection."""
    name = ["corners", "centers"][center_point_box]
    spread = batched_boxes(rng, 12, 40)
    odd = random_boxes(rng, 1, 60, center_point_box)
    odd[0, 3, 1], odd[0, 7, 0], odd[0, 9] = np.nan, np.inf, [-np.inf, 0, np.inf, 2]
    for box_data in (spread, odd):
        scores = rng.uniform(0, 1, (1, 2, box_data.shape[1])).astype("float32")
        for iou in (0.0, 0.3, 0.7):
            got = run_nms(nms_lib[name], box_data, scores, 10_000, iou, -1.0)
            ref = ort_nms(box_data, scores, 10_000, iou, -1.0, center_point_box)
            assert len(ref) > 0
            np.testing.assert_array_equal(got, ref.reshape(-1, 3), err_msg=f"{iou=}")
