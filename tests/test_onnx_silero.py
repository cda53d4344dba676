"""An ONNX model from PyPI through TVM's importer and shapefn.compile, at two
batch sizes from one compilation per device, against onnxruntime; on opencl
with the counters of the same calls on sim."""
import os
import pathlib
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tvm.relax.frontend.onnx import from_onnx

import shapefn
from conftest import DEVICES, assert_parallel_on_gpus, device_independent

SILERO_VERSION = "6.2.3"
MODEL = "silero_vad/data/silero_vad_op18_ifless.onnx"


def silero_model() -> pathlib.Path:
    """The ONNX file the silero-vad package bundles. The wheel is fetched with
    pip (the package itself would pull in torch) and cached."""
    cache = pathlib.Path(os.environ.get("SHAPEFN_TEST_DATA", pathlib.Path.home() / ".cache" / "shapefn-test-data"))
    target = cache / f"silero-vad-{SILERO_VERSION}" / pathlib.Path(MODEL).name
    if not target.exists():
        wheels = cache / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        f"silero-vad=={SILERO_VERSION}", "-d", str(wheels)], check=True, timeout=600)
        (wheel,) = wheels.glob(f"silero_vad-{SILERO_VERSION}-*.whl")
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf:
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(zf.read(MODEL))
            tmp.replace(target)
    return target


@pytest.fixture(scope="module")
def silero():
    """``(compiled(device), session)``: the model compiled for ``device``
    (once per device) and an onnxruntime session of it."""
    path = silero_model()
    mod = from_onnx(onnx.load(path), keep_params_in_input=False)
    compiled = {}

    def exe(device):
        if device not in compiled:
            compiled[device] = shapefn.compile(mod, device)
        return compiled[device]

    return exe, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_chunks(exe, device, batch):
    """Three chunks of audio from seed ``batch``, the state fed back: each
    call's outputs (numpy) and counters, and the chunks' inputs."""
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
    rng = np.random.default_rng(batch)
    state = np.zeros((2, batch, 128), np.float32)
    sr = np.array(16000, np.int64)
    calls = []
    for _ in range(3):  # a few chunks, feeding the state back
        chunk = (rng.standard_normal((batch, 512)) * 0.1).astype(np.float32)
        vm.reset_counters()
        prob, state_n = vm(chunk, sr, state)
        calls.append(((chunk, sr, state), (prob.numpy(), state_n.numpy()), vm.counters))
        state = state_n.numpy()
    return calls


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_silero_vad_matches_onnxruntime(silero, device, batch):
    exe, session = silero
    calls = run_chunks(exe(device), device, batch)
    for (chunk, sr, state), (prob, state_n), counters in calls:
        want_prob, want_state = session.run(None, {"input": chunk, "sr": sr, "state": state})
        np.testing.assert_allclose(prob, want_prob, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(state_n, want_state, rtol=1e-4, atol=1e-5)
        # The model's only data-dependent value is the branch on the sample rate.
        assert counters["d2h_bytes"] == 1
    if device != "sim":
        on_sim = run_chunks(exe("sim"), "sim", batch)
        for i, ((*_, counters), (*_, want)) in enumerate(zip(calls, on_sim)):
            assert device_independent(counters) == device_independent(want), f"call {i}"


def test_gpu_builds_have_no_serial_kernel():
    assert_parallel_on_gpus(from_onnx(onnx.load(silero_model()), keep_params_in_input=False))
