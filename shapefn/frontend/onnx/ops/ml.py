"""shapefn's ONNX converters for operators of the ``ai.onnx.ml`` domain
(classical machine learning) that are tensor arithmetic: Binarizer and
ArrayFeatureExtractor, registered in that domain: nodes of it with other
operators are refused."""
from __future__ import annotations

import numpy as np
from tvm import relax

from ..registry import converter
from ..values import as_tensor, ndim_of


@converter("Binarizer", domain="ai.onnx.ml")
def binarizer(importer, inputs, attrs, opset):
    """1 where the input exceeds ``threshold``, else 0, in the input's type."""
    x = as_tensor(importer.bb, inputs[0])
    dtype = str(x.ty.dtype)
    threshold = relax.const(np.array(attrs.get("threshold", 0.0), dtype), dtype)
    return relax.op.astype(relax.op.greater(x, threshold), dtype)


@converter("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(importer, inputs, attrs, opset):
    """The listed entries of the last axis (every index, flattened); a
    vector's as a one-row matrix, as onnxruntime gives them. An index out
    of range reads the nearest entry (no read leaves the tensor)."""
    bb = importer.bb
    x, indices = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1], "int64")
    flat = bb.normalize(relax.op.reshape(indices, [-1]))
    picked = bb.normalize(relax.op.take(x, flat, axis=ndim_of(x) - 1, mode="clip"))
    return relax.op.expand_dims(picked, 0) if ndim_of(x) == 1 else picked
