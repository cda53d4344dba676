#!/usr/bin/env python3
"""Export a CRNN-style text recognizer as a weight-free ONNX graph (this
folder's ``crnn_op17.graph.onnx``).

Needs torch and onnxscript (not part of shapefn's test install; use a
separate venv, as for ``export_transformers.py``):

    python -m venv /work/venv-torch
    /work/venv-torch/bin/pip install torch transformers onnx onnxscript numpy
    /work/venv-torch/bin/python tests/data/export_crnn.py [--out tests/data]

The model is the usual shape of an OCR line recognizer (CRNN: a
convolution stack, a bidirectional LSTM over the columns, a CTC head),
small: grayscale line images ``images`` ``[batch, 1, 32, width]``; four
3x3 convolution blocks (batch norm, ReLU) pooling the height to 2 and the
width by 4, a (2, 1) convolution folding the height, so each column of
the feature map (``width / 4`` of them) is one time step of 64 features;
two bidirectional LSTM layers of 48 hidden units; a linear layer to 37
classes (CTC's blank, 10 digits, 26 letters) and ``log_softmax``. Output
``log_probs`` ``[width / 4, batch, 37]``, time first, as
``torch.nn.CTCLoss`` takes it.

It is exported by torch.onnx's TorchScript exporter (``dynamo=False``, the
export most published recognizers were made with: one ONNX ``LSTM`` per
layer over a time axis known only at run time) at opset 17, the batch and
the width dynamic, under ``torch.manual_seed(0)`` in ``.eval()``; the
initial states are zeros sized from the batch (otherwise the exporter
writes zeros of the batch it traced, and other batches fail).
``strip.py`` removes the data of float weights of more than 64 elements;
``materialize.py`` refills them (seed 0 in tests).
"""
import argparse
import pathlib
import sys

import onnx
import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from strip import strip_model  # noqa: E402

CLASSES, HIDDEN, FEATURES = 37, 48, 64


def _block(cin: int, cout: int, pool) -> list:
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool)]


class CRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(*_block(1, 16, (2, 2)), *_block(16, 32, (2, 2)), *_block(32, 48, (2, 1)),
                                 *_block(48, FEATURES, (2, 1)), nn.Conv2d(FEATURES, FEATURES, (2, 1)), nn.ReLU())
        self.rnn = nn.LSTM(FEATURES, HIDDEN, num_layers=2, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, images):
        columns = self.cnn(images).squeeze(2).permute(2, 0, 1)  # [width / 4, batch, features]
        # (initial states sized from the batch: without them the exporter
        # writes zeros of the traced batch size)
        zeros = columns.new_zeros(4, columns.shape[1], HIDDEN)
        states, _ = self.rnn(columns, (zeros, zeros))
        return self.head(states).log_softmax(2)


def export() -> onnx.ModelProto:
    torch.manual_seed(0)
    model = CRNN().eval()
    path = HERE / "_crnn_export.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(2, 1, 32, 100),), str(path), dynamo=False, opset_version=17,
                          input_names=["images"], output_names=["log_probs"],
                          dynamic_axes={"images": {0: "batch", 3: "width"}, "log_probs": {0: "steps", 1: "batch"}})
    proto = onnx.load(str(path))
    path.unlink()
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
    proto = export()
    stripped = strip_model(proto, min_elements=64)
    path = options.out / "crnn_op17.graph.onnx"
    onnx.save(proto, path)
    print(f"{path}: {len(proto.graph.node)} nodes, {stripped} weights stripped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
