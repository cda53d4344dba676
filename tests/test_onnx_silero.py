"""An ONNX model from PyPI through TVM's importer and shapefn.compile, at two
batch sizes from one compilation, against onnxruntime."""
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
    path = silero_model()
    exe = shapefn.compile(from_onnx(onnx.load(path), keep_params_in_input=False), "sim")
    return exe, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("batch", [1, 2])
def test_silero_vad_matches_onnxruntime(silero, batch):
    exe, session = silero
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True))
    rng = np.random.default_rng(batch)
    state = np.zeros((2, batch, 128), np.float32)
    sr = np.array(16000, np.int64)
    for _ in range(3):  # a few chunks, feeding the state back
        chunk = (rng.standard_normal((batch, 512)) * 0.1).astype(np.float32)
        prob, state_n = vm(chunk, sr, state)
        want_prob, want_state = session.run(None, {"input": chunk, "sr": sr, "state": state})
        np.testing.assert_allclose(prob.numpy(), want_prob, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(state_n.numpy(), want_state, rtol=1e-4, atol=1e-5)
        state = state_n.numpy()
    # The model's only data-dependent value is the branch on the sample rate.
    assert vm.counters["d2h_bytes"] == 3
