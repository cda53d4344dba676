#!/usr/bin/env python3
"""Export a BERT-style encoder and a GPT-2-style decoder with past keys/values
as weight-free ONNX graphs (this folder's ``*_tiny_op*.graph.onnx``).

Needs torch, transformers and onnxscript (not part of shapefn's test install;
use a separate venv):

    python -m venv /work/venv-torch
    /work/venv-torch/bin/pip install torch==2.14.1 transformers onnx onnxscript numpy
    /work/venv-torch/bin/python tests/data/export_transformers.py [--out tests/data]

Both models are ``transformers``' own classes built from small configurations
(hidden size 64, 2 layers, 4 heads, a vocabulary of 1,000), randomly
initialised under ``torch.manual_seed(0)``, in ``.eval()``, exported by
``torch.onnx.export(dynamo=True)``:

* ``bert_tiny``: ``BertModel`` without the pooler; inputs ``input_ids`` and
  ``attention_mask`` int64 ``[batch, sequence]``; output
  ``last_hidden_state``.
* ``gpt2_tiny``: ``GPT2LMHeadModel`` taking one generation step: inputs
  ``input_ids`` ``[batch, sequence]``, ``attention_mask`` ``[batch, total]``
  (total = past + sequence) and each layer's past keys and values
  ``[batch, 4, past, 16]``; outputs ``logits`` and the present keys and
  values (past + sequence long).

Opsets: 23, where the exporter writes ONNX's ``Attention`` operator, and
the opset before it without one: 17 for BERT; 18 for GPT-2, because torch
2.14's exporter writes opset-18 ``Split`` attributes (``num_outputs``) into
its opset-17 GPT-2 graph, which onnx.checker and onnxruntime refuse.

The exporter names sizes ``s0``, ``s1``...; they are renamed after the
inputs (``batch``, ``sequence``, ``past``, ``total``), the outputs' sizes
and the inferred value shapes are dropped (ONNX's shape inference
recomputes them), and ``strip.py`` removes the data of float weights of
more than 64 elements; ``materialize.py`` refills them (seed 0 in tests).
"""
import argparse
import pathlib
import sys

import onnx
import torch
from transformers import BertConfig, BertModel, DynamicCache, GPT2Config, GPT2LMHeadModel

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from strip import strip_model  # noqa: E402

LAYERS, HEADS, HIDDEN, VOCAB = 2, 4, 64, 1000
DYNAMIC = torch.export.Dim.DYNAMIC


class GPT2Step(torch.nn.Module):
    """One generation step of ``GPT2LMHeadModel`` with its cache as tensors."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, attention_mask, past_key_0, past_value_0, past_key_1, past_value_1):
        cache = DynamicCache(config=self.lm.config)
        for layer, (key, value) in enumerate([(past_key_0, past_value_0), (past_key_1, past_value_1)]):
            cache.update(key, value, layer)
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def bert():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=2 * HIDDEN, max_position_embeddings=128)
    model = BertModel(config, add_pooling_layer=False).eval()
    args = (torch.randint(0, VOCAB, (2, 7)), torch.ones(2, 7, dtype=torch.int64))
    names = ["input_ids", "attention_mask"]
    sizes = {"input_ids": ("batch", "sequence"), "attention_mask": ("batch", "sequence")}
    return model, args, names, ["last_hidden_state"], sizes


def gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=128)
    model = GPT2Step(GPT2LMHeadModel(config).eval())
    past = [torch.randn(2, HEADS, 5, HIDDEN // HEADS) for _ in range(2 * LAYERS)]
    args = (torch.randint(0, VOCAB, (2, 3)), torch.ones(2, 8, dtype=torch.int64), *past)
    cache = [f"{kind}_{kv}_{i}" for i in range(LAYERS) for kind in ("past",) for kv in ("key", "value")]
    names = ["input_ids", "attention_mask", *cache]
    outputs = ["logits"] + [f"present_{kv}_{i}" for i in range(LAYERS) for kv in ("key", "value")]
    sizes = {"input_ids": ("batch", "sequence"), "attention_mask": ("batch", "total")}
    sizes.update({name: ("batch", None, "past", None) for name in cache})
    return model, args, names, outputs, sizes


def export(build, opset: int) -> onnx.ModelProto:
    model, args, names, outputs, sizes = build()
    dynamic = {name: {axis: DYNAMIC for axis, size in enumerate(sizes[name]) if size} for name in names}
    with torch.no_grad():
        program = torch.onnx.export(model, args, dynamo=True, opset_version=opset, input_names=names,
                                    output_names=outputs, dynamic_shapes=dynamic)
    proto = program.model_proto
    for value in proto.graph.input:
        for dim, size in zip(value.type.tensor_type.shape.dim, sizes[value.name]):
            if size:
                dim.dim_param = size
    for value in proto.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            dim.Clear()
    del proto.graph.value_info[:]
    onnx.checker.check_model(proto)
    return proto


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE)
    options = parser.parse_args(argv)
    for name, build, opsets in [("bert_tiny", bert, (17, 23)), ("gpt2_tiny", gpt2, (18, 23))]:
        for opset in opsets:
            proto = export(build, opset)
            stripped = strip_model(proto, min_elements=64)
            path = options.out / f"{name}_op{opset}.graph.onnx"
            onnx.save(proto, path)
            print(f"{path}: {len(proto.graph.node)} nodes, {stripped} weights stripped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
