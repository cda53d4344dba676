"""torchvision's detection family as torchvision exports it: RetinaNet, FCOS,
Keypoint R-CNN and Mask R-CNN (ResNet-50 FPN) and SSD300 (VGG16), the
weight-free graphs of tests/data (made by tests/data/export_torchvision.py:
random weights, dynamic H and W, opsets 11 and 17) materialized with seed 0.
Each model's opset-17 graph and Mask R-CNN's opset-11 one are compiled
once for a strict sim and run at 256x320 and 320x256 against onnxruntime:
detections match as sets (test_models.py's criterion), keypoints and masks
on the matched detections within tolerances; an inference waits on the
device an exact number of times. GPU schedules are checked without a build
(``assert_parallel_on_gpus``) for the models whose kernels include the
others'. None runs on OpenCL, for CI's time (a compile for OpenCL and
PoCL's build of the programs take 1.3-2.5 minutes a graph): Faster R-CNN
does (test_models.py), and these models' parts that it lacks do too: a mask
head with its Loop (test_onnx_mask_head.py), Loops (test_onnx_loop.py)."""
import pathlib

import numpy as np
import onnxruntime as ort
import pytest

import shapefn
from conftest import assert_parallel_on_gpus
from shapefn.bench.models import materialize
from shapefn.frontend import from_onnx

pytestmark = pytest.mark.model

DATA = pathlib.Path(__file__).parent / "data"
SIZES = [(256, 320), (320, 256)]
MODELS = ["retinanet_resnet50_fpn", "fcos_resnet50_fpn", "ssd300_vgg16", "keypointrcnn_resnet50_fpn",
          "maskrcnn_resnet50_fpn"]
# export_torchvision.py's file names: <model>.graph.onnx is opset 11, <model>_op17.graph.onnx opset 17.
# Every model at opset 17; at opset 11 (where Split, Squeeze, Unsqueeze and
# the reductions take attributes, not inputs) Mask R-CNN, the one with every
# kind of node the others have.
GRAPHS = [model + "_op17" for model in MODELS] + ["maskrcnn_resnet50_fpn"]
# GPU schedules: SSD300's (SSD-lite's too), Keypoint R-CNN's and Mask
# R-CNN's kernels include every kind RetinaNet's and FCOS's have.
GPU_GRAPHS = ["ssd300_vgg16_op17", "keypointrcnn_resnet50_fpn_op17", "maskrcnn_resnet50_fpn_op17"]
# Host waits per inference (the same at both sizes).
SYNCS = {
    "retinanet_resnet50_fpn_op17": 2, "fcos_resnet50_fpn_op17": 2, "ssd300_vgg16_op17": 2,
    "keypointrcnn_resnet50_fpn_op17": 8,
    "maskrcnn_resnet50_fpn": 9, "maskrcnn_resnet50_fpn_op17": 9,
}
# Per-detection outputs beyond boxes, scores and labels, compared on matched
# detections: keypoints are pixel coordinates (and a visibility of 1) read at
# a heatmap's maximum, masks probabilities pasted at the input's size.
TOLERANCES = {"keypoints": dict(rtol=1e-3, atol=1e-2), "keypoints_scores": dict(rtol=1e-3, atol=1e-4),
              "masks": dict(rtol=1e-3, atol=1e-4)}


def matched_pairs(got: dict, want: dict) -> list[tuple[int, int]]:
    """(reference index, shapefn index) of each reference detection that has
    an equal-label detection with box and score within 1e-3 relative (each
    matched at most once; test_models.match_detections' criterion)."""
    used = np.zeros(len(got["boxes"]), bool)
    pairs = []
    for i, (box, score, label) in enumerate(zip(want["boxes"], want["scores"], want["labels"])):
        candidates = np.flatnonzero(
            ~used & (got["labels"] == label) & np.isclose(got["scores"], score, rtol=1e-3, atol=1e-6)
            & np.all(np.isclose(got["boxes"], box, rtol=1e-3, atol=1e-3), axis=1))
        if len(candidates):
            used[candidates[0]] = True
            pairs.append((i, candidates[0]))
    return pairs


class Compiled:
    """One graph at a time (the tests run graph by graph; a ResNet-50's
    pools are large): its onnxruntime session and its VM on a strict sim."""

    def __init__(self):
        self.name = None

    def _load(self, name):
        if name != self.name:
            self.name, self._vm = name, None
            self.proto = materialize(DATA, name)
            self.session = ort.InferenceSession(self.proto.SerializeToString(), providers=["CPUExecutionProvider"])
            self.outputs = [o.name for o in self.proto.graph.output]

    def run(self, name, x):
        """shapefn's outputs by name and the inference's counters."""
        self._load(name)
        if self._vm is None:
            self._vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(self.proto), "sim"), shapefn.sim(strict=True))
        self._vm.reset_counters()
        got = dict(zip(self.outputs, (t.numpy() for t in self._vm(x))))
        return got, self._vm.counters

    def reference(self, name, x):
        self._load(name)
        return dict(zip(self.outputs, self.session.run(None, {"image": x})))


@pytest.fixture(scope="module")
def compiled():
    return Compiled()


def image(size):
    return np.random.default_rng(1).uniform(0, 1, (3, *size)).astype(np.float32)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", GRAPHS)  # (graph by graph: Compiled holds one at a time)
def test_detections_match_onnxruntime(compiled, name, size):
    x = image(size)
    got, counters = compiled.run(name, x)
    want = compiled.reference(name, x)
    assert len(want["boxes"]) > 0
    assert {k: (v.dtype, v.shape[1:]) for k, v in got.items()} == {k: (v.dtype, v.shape[1:]) for k, v in want.items()}
    assert len(got["boxes"]) == len(want["boxes"])
    pairs = matched_pairs(got, want)
    assert len(pairs) == len(want["boxes"])
    wi, gi = (np.array(p, int) for p in zip(*pairs))
    for output, tolerance in TOLERANCES.items():
        if output in want:
            np.testing.assert_allclose(got[output][gi], want[output][wi], **tolerance, err_msg=output)
    assert counters["syncs"] == SYNCS[name]
    # Back to the host: counts, sizes and loops' small host parameters, never
    # a feature map (one mask alone is 320 KB).
    assert counters["d2h_bytes"] <= 1024


@pytest.mark.parametrize("name", GPU_GRAPHS)
def test_gpu_builds_have_no_serial_kernel(name):
    """The family's kinds of kernels scheduled for a GPU: every device kernel
    parallel."""
    assert_parallel_on_gpus(from_onnx(materialize(DATA, name)))
