"""torchvision's SSD-lite and Faster R-CNN (weight-free graphs from
tests/data, materialized with a fixed seed), each compiled once for a strict
sim and run at 320x320 and 256x384, against onnxruntime. Detections are
matched as sets (random weights can tie scores)."""
import pathlib

import numpy as np
import onnxruntime as ort
import pytest

import shapefn
from shapefn.bench.models import materialize
from shapefn.frontend import from_onnx

DATA = pathlib.Path(__file__).parent / "data"
SIZES = [(320, 320), (256, 384)]
# Host waits per inference: one per phase whose sizes depend on device data
# computed after the previous phase's sizes were known (see the README).
SYNCS = {"ssdlite320_mobilenet_v3_large": 2, "fasterrcnn_mobilenet_v3_large_320_fpn": 7}


def match_detections(got: dict, want: dict) -> int:
    """How many reference detections have no equal-label detection with box
    and score within 1e-3 relative (each matched at most once)."""
    assert len(got["boxes"]) == len(want["boxes"])
    used = np.zeros(len(got["boxes"]), bool)
    unmatched = 0
    for box, score, label in zip(want["boxes"], want["scores"], want["labels"]):
        candidates = np.flatnonzero(
            ~used & (got["labels"] == label) & np.isclose(got["scores"], score, rtol=1e-3, atol=1e-6)
            & np.all(np.isclose(got["boxes"], box, rtol=1e-3, atol=1e-3), axis=1))
        if len(candidates) == 0:
            unmatched += 1
            continue
        used[candidates[0]] = True
    return unmatched


@pytest.fixture(scope="module", params=["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"])
def model(request):
    proto = materialize(DATA, request.param)
    exe = shapefn.compile(from_onnx(proto), "sim")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in proto.graph.output]
    return request.param, exe, session, names


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_detections_match_onnxruntime(model, size):
    name, exe, session, names = model
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True))
    image = np.random.default_rng(1).uniform(0, 1, (3, *size)).astype(np.float32)
    got = dict(zip(names, (t.numpy() for t in vm(image))))
    want = dict(zip(names, session.run(None, {"image": image})))
    assert len(want["boxes"]) > 0
    assert got["labels"].dtype == want["labels"].dtype
    assert match_detections(got, want) == 0
    # Only counts and shape values cross (8 bytes each), never a feature map;
    # independent counts share a sync.
    assert vm.counters["d2h_bytes"] == 8 * vm.counters["d2h_copies"]
    assert vm.counters["syncs"] == SYNCS[name]
