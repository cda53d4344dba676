"""shapefn's ONNX converters for the loss operators TVM's importer lacks:
``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` (which is the
first on ``log_softmax`` of its scores), as ONNX's reference computes them."""
from __future__ import annotations

from tvm import relax

from ..registry import converter
from ..values import absent, as_tensor, ndim_of, str_attr

_REDUCTIONS = ("none", "sum", "mean")


def _negative_log_likelihood(bb: relax.BlockBuilder, x, target, weight, attrs):
    """``-x[n, target[n, d], d]`` weighted by ``weight[target]``, 0 where the
    target is ``ignore_index``; reduced by ``reduction``: ``mean`` divides
    by the sum of the weights taken, ignored targets' 0 (the operator's
    definition, and onnxruntime's; ONNX's reference implementation divides
    by the element count where there are no weights and ``ignore_index``
    is -1)."""
    reduction = str_attr(attrs.get("reduction"), "mean")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(_REDUCTIONS)}, not {reduction!r}")
    if ndim_of(x) < 2:
        raise ValueError(f"the input must have a class axis (rank 2 or more), not rank {ndim_of(x)}")
    dtype = str(x.ty.dtype)
    target = bb.normalize(relax.op.astype(target, "int64"))
    ignore = attrs.get("ignore_index")
    kept = None
    if ignore is not None:
        kept = bb.normalize(relax.op.not_equal(target, relax.const(ignore, "int64")))
        target = bb.normalize(relax.op.where(kept, target, relax.const(0, "int64")))  # (gathered, then zeroed)
    picked = bb.normalize(relax.op.gather_elements(x, relax.op.expand_dims(target, 1), axis=1))
    picked = bb.normalize(relax.op.squeeze(picked, axis=[1]))
    zero = relax.const(0, dtype)
    if weight is not None:
        weights = bb.normalize(relax.op.take(weight, target, axis=0))
    elif ignore is not None:
        weights = bb.normalize(relax.op.ones_like(picked))
    else:
        weights = None
    if kept is not None:
        if weights is not None:
            weights = bb.normalize(relax.op.where(kept, weights, zero))
        picked = bb.normalize(relax.op.where(kept, picked, zero))
    loss = bb.normalize(relax.op.negative(picked))
    if weights is not None:
        loss = bb.normalize(relax.op.multiply(loss, weights))
    if reduction == "none":
        return loss
    total = bb.normalize(relax.op.sum(loss))
    if reduction == "sum":
        return total
    if weights is not None:
        return relax.op.divide(total, relax.op.sum(weights))
    return relax.op.mean(loss)


def _weight(importer, inputs):
    return None if len(inputs) < 3 or absent(importer, inputs[2]) else as_tensor(importer.bb, inputs[2])


@converter("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(importer, inputs, attrs, opset):
    bb = importer.bb
    return _negative_log_likelihood(bb, as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1]), _weight(importer, inputs),
                                    attrs)


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(importer, inputs, attrs, opset):
    """The loss and the log-probabilities (the optional second output)."""
    bb = importer.bb
    log_prob = bb.normalize(relax.op.nn.log_softmax(as_tensor(bb, inputs[0]), axis=1))
    loss = _negative_log_likelihood(bb, log_prob, as_tensor(bb, inputs[1]), _weight(importer, inputs), attrs)
    return relax.Tuple([bb.normalize(loss), log_prob])
