"""Transformers with sequence lengths known only at run time: a BERT-style
encoder and a GPT-2-style decoder with past keys/values, exported by
torch.onnx from ``transformers``' own classes (``data/export_transformers.py``;
weight-free graphs refilled with seed-0 weights), each at opset 23, where
attention is ONNX's ``Attention`` operator, and at an opset before it
(MatMul/Softmax). On a strict sim against onnxruntime at three (batch,
length) pairs, length 1 included; the decoder also runs a 16-step
generation loop whose cache never leaves the device, on sim and (at opset
23, for CI's time) on opencl."""
import pathlib

import numpy as np
import pytest

import shapefn
from conftest import opencl
from shapefn.bench.models import materialize
from shapefn.frontend import from_onnx

pytestmark = pytest.mark.model  # (a compile per model: not under the sanitizer)
# Whole models: the bodies variant of onnx_check (conftest) would compile
# each twice more for what the converter tests' variants cover.
ONNX_CHECK_BODIES = False

DATA = pathlib.Path(__file__).parent / "data"
HEADS, HEAD_SIZE, LAYERS, VOCAB = 4, 16, 2, 1000
rng = np.random.default_rng(11)


def encoder_feeds(batch: int, length: int) -> list:
    mask = np.ones((batch, length), np.int64)
    mask[0, length // 2 + 1:] = 0  # (padding at the end of the first sequence)
    return [rng.integers(0, VOCAB, (batch, length)), mask]


def decoder_feeds(batch: int, length: int, past: int) -> list:
    cache = [rng.standard_normal((batch, HEADS, past, HEAD_SIZE)).astype(np.float32) for _ in range(2 * LAYERS)]
    return [rng.integers(0, VOCAB, (batch, length)), np.ones((batch, past + length), np.int64), *cache]


@pytest.mark.parametrize("name", ["bert_tiny_op17", "bert_tiny_op23"])
def test_encoder_matches_onnxruntime(onnx_check, name):
    onnx_check(materialize(DATA, name), [encoder_feeds(b, n) for b, n in [(2, 7), (1, 1), (3, 16)]], atol=1e-5)


@pytest.mark.parametrize("name", [
    "gpt2_tiny_op23",
    "gpt2_tiny_op18",
])
def test_decoder_step_matches_onnxruntime(onnx_check, name):
    """(batch, new tokens, past tokens): a prompt with no past, a step of one
    token, a few tokens after a past."""
    onnx_check(materialize(DATA, name), [decoder_feeds(b, n, p) for b, n, p in [(3, 4, 0), (1, 1, 7), (2, 3, 5)]],
               atol=1e-5)


@pytest.mark.parametrize("name, device", [("gpt2_tiny_op23", "sim"), pytest.param("gpt2_tiny_op23", "opencl",
                                                                                  marks=opencl),
                                          ("gpt2_tiny_op18", "sim")])
def test_generation_loop_keeps_the_cache_on_the_device(device, name):
    """16 greedy steps from a 3-token prompt, the present keys/values of each
    step fed back as the next step's past without leaving the device: the VM
    copies nothing to the host (shapes are the tensors' metadata), and the
    only copies are the logits the caller reads. The tokens match a loop
    run by onnxruntime with the same weights."""
    import onnxruntime as ort

    model = materialize(DATA, name)
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(model), device),
                                shapefn.sim(strict=True) if device == "sim" else device)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input]
    prompt = rng.integers(0, VOCAB, (1, 3))
    empty = np.zeros((1, HEADS, 0, HEAD_SIZE), np.float32)

    ours, theirs = [], []
    ids, cache, reference_cache = prompt, [empty] * (2 * LAYERS), [empty] * (2 * LAYERS)
    total = 0
    for _ in range(16):
        total += ids.shape[1]
        mask = np.ones((1, total), np.int64)
        vm.reset_counters()
        logits, *cache = vm(ids, mask, *cache)
        assert vm.counters["d2h_bytes"] == 0 and vm.counters["syncs"] == 0
        token = int(np.argmax(logits.numpy()[0, -1]))
        want, *reference_cache = session.run(None, dict(zip(names, [ids, mask, *reference_cache])))
        ours.append(token)
        theirs.append(int(np.argmax(want[0, -1])))
        ids = np.array([[token]], np.int64)
    assert ours == theirs
    assert cache[0].shape == (1, HEADS, 3 + 15, HEAD_SIZE)
