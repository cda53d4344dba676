"""A CRNN-style text recognizer (convolutions, two bidirectional LSTM layers
over the image's columns, a CTC head) exported by torch.onnx with the batch
and the width dynamic (``data/export_crnn.py``; a weight-free graph
refilled with seed-0 weights): its LSTMs run over a sequence length known
only at run time (the width / 4), as loops. On a strict sim and on opencl
against onnxruntime at two widths (and batches), and nothing but sizes
crosses to the host."""
import pathlib

import numpy as np
import pytest

from conftest import DEVICES, run_on_devices
from shapefn.bench.models import materialize
from shapefn.frontend import from_onnx

pytestmark = pytest.mark.model  # (a compile per model: not under the sanitizer)

DATA = pathlib.Path(__file__).parent / "data"
# (batch, width): 25 and 80 time steps.
CALLS = [(1, 100), (3, 320)]


@pytest.mark.parametrize("device", DEVICES)
def test_recognizer_matches_onnxruntime_at_two_widths(device):
    import onnxruntime as ort

    model = materialize(DATA, "crnn_op17")
    mod = from_onnx(model)
    loops = [gv.name_hint for gv in mod.functions if gv.name_hint.endswith(("_direction0", "_direction1"))]
    assert len(loops) == 4, loops  # (2 layers, 2 directions: loops)
    rng = np.random.default_rng(3)
    calls = [[rng.uniform(-1, 1, (batch, 1, 32, width)).astype(np.float32)] for batch, width in CALLS]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for (got, counters), (x,) in zip(run_on_devices(mod, calls, devices=(device,))[device], calls):
        (want,) = session.run(None, {"images": x})
        assert got.shape == want.shape == (x.shape[3] // 4, x.shape[0], 37)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        # (no tensor of data crosses to the host: at most sizes, 8 bytes each)
        assert counters["d2h_bytes"] <= 8 * counters["d2h_copies"], counters
