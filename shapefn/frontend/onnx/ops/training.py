"""shapefn's ONNX converters for the optimizers of ONNX's
``ai.onnx.preview.training`` domain: Adagrad, Adam and Momentum (standard
and Nesterov), each updating one or several tensors in one node (inputs
``R, T, X..., G..., [V...], [H...]``, outputs grouped the same way),
registered in that domain."""
from __future__ import annotations

import onnx
from tvm import relax

from ..registry import converter
from ..values import as_tensor, str_attr

_DOMAIN = "ai.onnx.preview.training"


def _attrs(op_type: str, attrs: dict) -> dict:
    """The node's attributes over the schema's defaults."""
    schema = onnx.defs.get_schema(op_type, 1, _DOMAIN)
    defaults = {name: onnx.helper.get_attribute_value(a.default_value)
                for name, a in schema.attributes.items() if a.default_value.name}
    return defaults | {k: v for k, v in attrs.items() if k != "tvm_custom"}


def _groups(bb, inputs, count: int):
    """``R`` and ``T`` as tensors, and the tensors updated, one tuple
    ``(x, g, ...)`` each: the inputs after R and T are ``count`` groups."""
    rate, step = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    tensors = [as_tensor(bb, v) for v in inputs[2:]]
    if len(tensors) % count:
        raise ValueError(f"expected {count} groups of inputs after R and T, got {len(tensors)} inputs")
    n = len(tensors) // count
    return rate, step, [tuple(tensors[k * n + i] for k in range(count)) for i in range(n)]


def _scalar(value: float, like) -> relax.Constant:
    return relax.const(float(value), str(like.ty.dtype))


def _regularized(bb, x, g, norm_coefficient: float):
    return bb.emit(relax.op.add(relax.op.multiply(_scalar(norm_coefficient, x), x), g))


@converter("Adagrad", domain=_DOMAIN)
def adagrad(importer, inputs, attrs, opset):
    bb = importer.bb
    a = _attrs("Adagrad", attrs)
    rate, step, groups = _groups(bb, inputs, 3)
    decayed = relax.op.add(_scalar(1, rate), relax.op.multiply(relax.op.astype(step, str(rate.ty.dtype)),
                                                               _scalar(a["decay_factor"], rate)))
    rate = bb.emit(relax.op.divide(rate, decayed))
    xs, hs = [], []
    for x, g, h in groups:
        g = _regularized(bb, x, g, a["norm_coefficient"])
        h_new = bb.emit(relax.op.add(h, relax.op.multiply(g, g)))
        scale = relax.op.add(relax.op.sqrt(h_new), _scalar(a["epsilon"], h))
        xs.append(bb.emit(relax.op.subtract(x, relax.op.divide(relax.op.multiply(rate, g), scale))))
        hs.append(h_new)
    return relax.Tuple(xs + hs)


@converter("Adam", domain=_DOMAIN)
def adam(importer, inputs, attrs, opset):
    bb = importer.bb
    a = _attrs("Adam", attrs)
    rate, step, groups = _groups(bb, inputs, 4)
    alpha, beta = _scalar(a["alpha"], rate), _scalar(a["beta"], rate)
    one = _scalar(1, rate)
    t = bb.emit(relax.op.astype(step, str(rate.ty.dtype)))
    # Bias-corrected from the first step on (T > 0); at T = 0 the rate as given.
    corrected = relax.op.divide(relax.op.multiply(rate, relax.op.sqrt(relax.op.subtract(one, relax.op.power(beta, t)))),
                                relax.op.subtract(one, relax.op.power(alpha, t)))
    rate = bb.emit(relax.op.where(relax.op.greater(step, relax.const(0, str(step.ty.dtype))), corrected, rate))
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        g = _regularized(bb, x, g, a["norm_coefficient"])
        v_new = bb.emit(relax.op.add(relax.op.multiply(_scalar(a["alpha"], v), v),
                                     relax.op.multiply(_scalar(1 - a["alpha"], g), g)))
        h_new = bb.emit(relax.op.add(relax.op.multiply(_scalar(a["beta"], h), h),
                                     relax.op.multiply(_scalar(1 - a["beta"], g), relax.op.multiply(g, g))))
        scale = relax.op.add(relax.op.sqrt(h_new), _scalar(a["epsilon"], h))
        x_new = relax.op.subtract(x, relax.op.multiply(rate, relax.op.divide(v_new, scale)))
        xs.append(bb.emit(relax.op.multiply(_scalar(1 - a["norm_coefficient_post"], x), x_new)))
        vs.append(v_new)
        hs.append(h_new)
    return relax.Tuple(xs + vs + hs)


@converter("Momentum", domain=_DOMAIN)
def momentum(importer, inputs, attrs, opset):
    bb = importer.bb
    a = _attrs("Momentum", attrs)
    mode = str_attr(a.get("mode"), "standard")
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum's mode must be 'standard' or 'nesterov', got {mode!r}")
    rate, step, groups = _groups(bb, inputs, 3)
    xs, vs = [], []
    for x, g, v in groups:
        g = _regularized(bb, x, g, a["norm_coefficient"])
        # The gradient's coefficient is 1 at the first step (T = 0).
        beta = relax.op.where(relax.op.greater(step, relax.const(0, str(step.ty.dtype))),
                              _scalar(a["beta"], g), _scalar(1, g))
        v_new = bb.emit(relax.op.add(relax.op.multiply(_scalar(a["alpha"], v), v), relax.op.multiply(beta, g)))
        direction = v_new if mode == "standard" else relax.op.add(g, relax.op.multiply(_scalar(a["alpha"], v),
                                                                                          v_new))
        xs.append(bb.emit(relax.op.subtract(x, relax.op.multiply(rate, direction))))
        vs.append(v_new)
    return relax.Tuple(xs + vs)
