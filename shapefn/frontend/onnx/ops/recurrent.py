"""shapefn's ONNX converters for the recurrent operators ``RNN``, ``GRU`` and
``LSTM`` (every opset), which TVM's importer lacks. Over a sequence length
known at import of at most ``UNROLL_AT_MOST`` steps the time steps are
unrolled; over a longer one, or one known only at run time, each direction
is a loop (``loop.recursive_loop``: one step's kernels per iteration, the
VM's registers counting the steps, no copy to the host). Either way the
input projection of every step is one matrix product and only the
recurrence is sequential. Semantics are ONNX's, and onnxruntime's where
ONNX leaves them open: ``sequence_lens`` stops a batch entry's state at its
length (Y is 0 after it, and a reverse direction starts at the entry's last
step), a length outside ``[0, steps]`` is an error (an ``IndexError`` the
kernel that reads it reports, docs/guarantees.md); an entry of length 0 has
final states 0; ``clip`` bounds every activation's input;
``activation_alpha``/``beta`` go to the activations that take them, in
order. Anything else is refused with ``UnsupportedOnnxOp``."""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ....compiler.passes import index_checks
from ....runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp
from ..loop import function_name, recursive_loop
from ..registry import converter
from ..values import absent, as_tensor, const_value, str_attr

# The longest sequence known at import whose steps are unrolled; longer
# ones, and those known only at run time, run as a loop.
UNROLL_AT_MOST = 64
# Weight blocks per direction (the rows of W and R are the gates' blocks).
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# The activations of one direction, by default.
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# Whether each activation ONNX lists takes alpha and beta.
_TAKES = {"relu": (False, False), "tanh": (False, False), "sigmoid": (False, False), "softsign": (False, False),
          "softplus": (False, False), "affine": (True, True), "leakyrelu": (True, False),
          "thresholdedrelu": (True, False), "scaledtanh": (True, True), "hardsigmoid": (True, True),
          "elu": (True, False)}
# Defaults of the ONNX operators of the same names (ONNX's rule, which
# onnxruntime's LSTM and GRU follow). Affine, ScaledTanh and ThresholdedRelu
# have none that ONNX and onnxruntime agree on: they need the attributes.
_DEFAULTS = {"leakyrelu": (0.01, None), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None)}


def _described(op: str, attrs) -> str:
    name = attrs["tvm_custom"]["name"]
    return f"ONNX node '{name}' ({op})" if name else f"ONNX {op} node"


def _refusal(op: str, attrs, why: str) -> UnsupportedOnnxOp:
    name = attrs["tvm_custom"]["name"]
    return UnsupportedOnnxOp(f"{_described(op, attrs)} cannot be imported: {why}",
                             {op: [repr(name) if name else "(unnamed)"]})


def _check_shapes(op, attrs, tensors: dict, expected: dict) -> None:
    """Sizes of the weights and states the node implies, where static: the
    steps slice the gates' blocks, which would not notice other sizes."""
    for label, tensor in tensors.items():
        shape = getattr(tensor.ty, "shape", None) if tensor is not None else None
        if shape is None:
            continue
        want = expected[label]
        got = [int(v) if isinstance(v, tvm.tirx.IntImm) else None for v in shape.values]
        if len(got) != len(want) or any(g is not None and w is not None and g != w for g, w in zip(got, want)):
            raise InvalidOnnxModel(f"{_described(op, attrs)}: {label} has shape {_shown(got)}; the node implies "
                                   f"{_shown(want)}")


def _shown(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _activations(op: str, attrs, directions: int) -> list[list[tuple]]:
    """Per direction, its activations as ``(name, alpha, beta)``."""
    per_direction = len(_DEFAULT_ACTIVATIONS[op])
    names = [str_attr(n, "") for n in attrs.get("activations", [])] or \
        list(_DEFAULT_ACTIVATIONS[op]) * directions
    unknown = [n for n in names if n.lower() not in _TAKES]
    if unknown:
        raise _refusal(op, attrs, f"activation {unknown[0]!r} is not one of ONNX's ({', '.join(sorted(_TAKES))})")
    keys = [n.lower() for n in names]
    params = [_parameters(op, attrs, keys, which) for which in (0, 1)]
    entries = list(zip(keys, *params))
    if op == "RNN" and directions == 1 and len(entries) == 2:
        entries = entries[:1]  # (the schema's default lists two; onnxruntime runs the first)
    if len(entries) != per_direction * directions:
        raise _refusal(op, attrs, f"it lists {len(entries)} activations; {op} with {directions} direction(s) "
                                  f"takes {per_direction * directions}")
    return [entries[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


def _parameters(op: str, attrs, keys: list[str], which: int) -> list:
    """The alphas (``which`` 0) or betas (1) of activations ``keys``. ONNX
    says only that the values "are consumed in the order of activation
    functions": onnxruntime's LSTM and GRU give them in order to those that
    take one, ONNX's reference implementation and onnxruntime's RNN by
    position. Where both readings apply and differ, the node is refused."""
    label = ("activation_alpha", "activation_beta")[which]
    values = [float(v) for v in attrs.get(label, [])]
    takers = [i for i, k in enumerate(keys) if _TAKES[k][which]]
    in_order = {i: values[n] if n < len(values) else None for n, i in enumerate(takers)}
    if len(values) == len(keys) and any(in_order[i] != values[i] for i in takers):
        raise _refusal(op, attrs, f"{label} {values} means different values read in order of the activations "
                                  f"taking one or by position ({keys})")
    result = [None] * len(keys)
    for i in takers:
        value = in_order[i]
        if value is None:
            value = _DEFAULTS.get(keys[i], (None, None))[which]
        if value is None:
            raise _refusal(op, attrs, f"activation {keys[i]!r} needs its {label} (it has no agreed default)")
        result[i] = value
    return result


def _activate(bb, x, activation):
    key, alpha, beta = activation
    dtype = str(x.ty.dtype)

    def c(v):
        return relax.const(v, dtype)

    if key == "sigmoid":
        return bb.emit(relax.op.sigmoid(x))
    if key == "tanh":
        return bb.emit(relax.op.tanh(x))
    if key == "relu":
        return bb.emit(relax.op.nn.relu(x))
    if key == "affine":
        return bb.emit(relax.op.add(relax.op.multiply(x, c(alpha)), c(beta)))
    if key == "leakyrelu":
        return bb.emit(relax.op.where(relax.op.greater_equal(x, c(0.0)), x, relax.op.multiply(x, c(alpha))))
    if key == "thresholdedrelu":
        return bb.emit(relax.op.where(relax.op.greater(x, c(alpha)), x, c(0.0)))
    if key == "scaledtanh":
        return bb.emit(relax.op.multiply(relax.op.tanh(relax.op.multiply(x, c(beta))), c(alpha)))
    if key == "hardsigmoid":
        linear = relax.op.add(relax.op.multiply(x, c(alpha)), c(beta))
        return bb.emit(relax.op.minimum(relax.op.maximum(linear, c(0.0)), c(1.0)))
    if key == "elu":
        negative = relax.op.multiply(relax.op.subtract(relax.op.exp(x), c(1.0)), c(alpha))
        return bb.emit(relax.op.where(relax.op.greater_equal(x, c(0.0)), x, negative))
    if key == "softsign":
        return bb.emit(relax.op.divide(x, relax.op.add(relax.op.abs(x), c(1.0))))
    assert key == "softplus"
    return bb.emit(relax.op.log(relax.op.add(relax.op.exp(x), c(1.0))))


class _Cell:
    """What every step of one node needs: the builder, sizes, ``clip``."""

    def __init__(self, bb, op, hidden, dtype, clip, name):
        self.bb, self.op, self.hidden, self.dtype, self.clip, self.name = bb, op, hidden, dtype, clip, name

    def emit(self, expr):
        return self.bb.emit(expr)

    def const(self, value):
        return relax.const(value, self.dtype)

    def cols(self, x, first, count=1):
        """Gate blocks ``first`` .. ``first + count - 1`` of the last axis."""
        h = self.hidden
        return self.emit(relax.op.strided_slice(x, axes=[x.ty.ndim - 1], begin=[first * h], end=[(first + count) * h]))

    def rows(self, x, first, count=1):
        h = self.hidden
        return self.emit(relax.op.strided_slice(x, axes=[0], begin=[first * h], end=[(first + count) * h]))

    def act(self, x, activation):
        """``activation`` of ``x`` clipped to ``clip`` (ONNX clips every activation's input)."""
        if self.clip is not None:
            x = self.emit(relax.op.minimum(relax.op.maximum(x, self.const(-self.clip)), self.const(self.clip)))
        return _activate(self.bb, x, activation)

    def matmul(self, a, b):
        return self.emit(relax.op.matmul(a, b))

    def add(self, a, b):
        return self.emit(relax.op.add(a, b))

    def mul(self, a, b):
        return self.emit(relax.op.multiply(a, b))


def _rnn_step(cell, x, state, weights, activations):
    (h,) = state
    pre = cell.add(x, cell.matmul(h, weights["RT"]))
    return (cell.act(pre, activations[0]),)


def _gru_step(cell, x, state, weights, activations):
    (h,) = state
    f, g = activations
    rt = weights["RT"]
    if weights["linear_before_reset"]:
        hr = cell.matmul(h, rt)  # (one product for the three blocks: r applies after it)
        zr = cell.add(cell.cols(x, 0, 2), cell.cols(hr, 0, 2))
        z, r = cell.act(cell.cols(zr, 0), f), cell.act(cell.cols(zr, 1), f)
        recurrent = cell.add(cell.cols(hr, 2), weights["Rbh"])
        candidate = cell.act(cell.add(cell.cols(x, 2), cell.mul(r, recurrent)), g)
    else:
        zr = cell.add(cell.cols(x, 0, 2), cell.matmul(h, cell.cols(rt, 0, 2)))
        z, r = cell.act(cell.cols(zr, 0), f), cell.act(cell.cols(zr, 1), f)
        candidate = cell.act(cell.add(cell.cols(x, 2), cell.matmul(cell.mul(r, h), cell.cols(rt, 2))), g)
    # (1 - z) * candidate + z * h, in one operation fewer
    return (cell.add(candidate, cell.mul(z, cell.emit(relax.op.subtract(h, candidate)))),)


def _lstm_step(cell, x, state, weights, activations):
    h, c = state
    f, g, hact = activations
    gates = cell.add(x, cell.matmul(h, weights["RT"]))
    peepholes = weights["P"]

    def peep(block, index, cell_state):
        pre = cell.cols(gates, block)
        if peepholes is not None:
            pre = cell.add(pre, cell.mul(peepholes[index], cell_state))
        return pre

    # ONNX's order of the blocks: i, o, f, c; of the peepholes: i, o, f.
    i = cell.act(peep(0, 0, c), f)
    if weights["input_forget"]:
        forget = cell.emit(relax.op.subtract(cell.const(1.0), i))
    else:
        forget = cell.act(peep(2, 2, c), f)
    c_new = cell.add(cell.mul(forget, c), cell.mul(i, cell.act(cell.cols(gates, 3), g)))
    o = cell.act(peep(1, 1, c_new), f)
    # (h's input is the cell state, which onnxruntime does not clip)
    return cell.mul(o, _activate(cell.bb, c_new, hact)), c_new


_STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}


def _direction(cell, d, xs, weights, initial, activations, lengths, reverse):
    """Direction ``d`` over ``xs`` (``[steps, batch, input]``): its outputs
    ``[steps, batch, hidden]`` in time order and its final states.
    ``lengths`` are the validated ``sequence_lens`` (int64) or None."""
    bb, op = cell.bb, cell.op
    w = _pick(bb, weights["W"], d)
    r = _pick(bb, weights["R"], d)
    step_weights = {"RT": bb.emit(relax.op.permute_dims(r)), "P": None,
                    "linear_before_reset": weights["linear_before_reset"], "input_forget": weights["input_forget"]}
    # Input projections and biases of every step at once: only the
    # recurrence is sequential.
    projected = cell.matmul(xs, bb.emit(relax.op.permute_dims(w)))
    if weights["B"] is not None:
        b = _pick(bb, weights["B"], d)
        gates = _GATES[op]
        wb, rb = cell.rows(b, 0, gates), cell.rows(b, gates, gates)
        if op == "GRU" and weights["linear_before_reset"]:
            # Rbh is added inside the reset gate's product.
            step_weights["Rbh"] = cell.rows(rb, 2)
            rb = bb.emit(relax.op.concat([cell.rows(rb, 0, 2), relax.op.zeros_like(step_weights["Rbh"])], 0))
        projected = cell.add(projected, cell.add(wb, rb))
    elif op == "GRU" and weights["linear_before_reset"]:
        step_weights["Rbh"] = cell.const(0.0)
    if op == "LSTM" and weights["P"] is not None:
        p = _pick(bb, weights["P"], d)
        step_weights["P"] = [cell.rows(p, k) for k in range(3)]
    state = [_pick(bb, s, d) for s in initial]
    length = xs.ty.shape.values[0]
    if isinstance(length, tvm.tirx.IntImm) and int(length) <= UNROLL_AT_MOST:
        return _unrolled(cell, projected, step_weights, state, activations, lengths, reverse, int(length))
    return _looped(cell, d, projected, step_weights, state, activations, lengths, reverse)


def _step(cell, x, state, weights, activations, mask):
    """One time step: the next states and this step's output (an entry
    past its length, where ``mask`` is false, keeps its state and outputs 0)."""
    bb = cell.bb
    new = _STEPS[cell.op](cell, x, state, weights, activations)
    if mask is None:
        return list(new), new[0]
    state = [bb.emit(relax.op.where(mask, n, s)) for n, s in zip(new, state)]
    return state, bb.emit(relax.op.where(mask, new[0], cell.const(0.0)))


def _mask(bb, t, lengths):
    """``[batch, 1]`` bools: step ``t`` lies within each entry's length."""
    if lengths is None:
        return None
    return bb.emit(relax.op.expand_dims(relax.op.less(t, lengths), 1))


def _unrolled(cell, projected, weights, state, activations, lengths, reverse, steps):
    bb = cell.bb
    outputs = [None] * steps
    for t in reversed(range(steps)) if reverse else range(steps):
        x = bb.emit(relax.op.squeeze(relax.op.strided_slice(projected, axes=[0], begin=[t], end=[t + 1]), [0]))
        state, outputs[t] = _step(cell, x, state, weights, activations,
                                  _mask(bb, relax.const(t, "int64"), lengths))
    return bb.emit(relax.op.stack(outputs, axis=0)), state


def _looped(cell, d, projected, weights, state, activations, lengths, reverse):
    """The steps of one direction as a loop function (``recursive_loop``):
    an iteration per step, its states carried, its outputs stacked (then
    flipped to time order for a reverse direction)."""
    bb = cell.bb
    dtype = cell.dtype
    steps, batch = projected.ty.shape.values[:2]
    captured = {"projected": projected, "RT": weights["RT"]}
    if isinstance(weights.get("Rbh"), relax.Var):  # (else a constant, used in place)
        captured["Rbh"] = weights["Rbh"]
    for k, peephole in enumerate(weights["P"] or []):
        captured[f"P{k}"] = peephole
    if lengths is not None:
        captured["lengths"] = lengths
    sizes = _SharedSizes()
    carried_params = [relax.Var(f"state{k}", relax.TensorType(sizes.of(s), dtype)) for k, s in enumerate(state)]
    captured_params = {name: relax.Var(name, relax.TensorType(sizes.of(value), str(value.ty.dtype)))
                       for name, value in captured.items()}
    i = tvm.tirx.Var("i", "int64")
    inner_steps = captured_params["projected"].ty.shape.values[0]

    def iteration():
        t = inner_steps - 1 - i if reverse else i
        x = bb.emit(relax.op.squeeze(relax.op.strided_slice(captured_params["projected"], axes=[0], begin=[t],
                                                            end=[t + 1], assume_inbound=True), [0]))
        inner = dict(weights, RT=captured_params["RT"], Rbh=captured_params.get("Rbh", weights.get("Rbh")),
                     P=[captured_params[f"P{k}"] for k in range(3)] if weights["P"] else None)
        mask = None
        if lengths is not None:
            now = bb.emit(relax.op.reshape(bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([t]))), []))
            mask = _mask(bb, now, captured_params["lengths"])
        new, output = _step(cell, x, carried_params, inner, activations, mask)
        return [i + 1], new, [output]

    bb.begin_scope([i] + carried_params + list(captured_params.values()))
    try:
        gv, _ = recursive_loop(bb, f"{cell.name}_direction{d}", f"{cell.name}:{d}", [i], carried_params,
                               list(captured_params.values()), iteration, tvm.tirx.LT(i, inner_steps),
                               outline=True)
    finally:
        bb.end_scope()
    hidden = cell.hidden
    empty = bb.emit(relax.op.zeros(relax.ShapeExpr([0, batch, hidden]), dtype))
    result = bb.emit(relax.Call(gv, [tvm.tirx.IntImm("int64", 0)] + state + [empty] + list(captured.values())))
    finals = [bb.match_cast(bb.emit(relax.TupleGetItem(result, k)), relax.TensorType([batch, hidden], dtype))
              for k in range(len(state))]
    ys = bb.match_cast(bb.emit(relax.TupleGetItem(result, len(state))),
                       relax.TensorType([steps, batch, hidden], dtype))
    if reverse:
        ys = bb.emit(relax.op.flip(ys, axis=0))
    return ys, finals


class _SharedSizes:
    """The sizes of a loop function's parameters: literal sizes kept, each
    symbolic size of the caller one variable of the function's (so the
    batch of the states and of the inputs is the same variable there)."""

    def __init__(self):
        self.outer, self.inner = [], []

    def of(self, value) -> list:
        dims = []
        for d in value.ty.shape.values:
            if isinstance(d, tvm.tirx.IntImm):
                dims.append(d)
                continue
            for outer, inner in zip(self.outer, self.inner):
                if tvm_ffi.structural_equal(outer, d):
                    dims.append(inner)
                    break
            else:
                self.outer.append(d)
                self.inner.append(tvm.tirx.Var(f"n{len(self.inner)}", "int64"))
                dims.append(self.inner[-1])
        return dims


def _pick(bb, x, d):
    """Direction ``d`` of a per-direction tensor (its first axis)."""
    return bb.emit(relax.op.squeeze(relax.op.strided_slice(x, axes=[0], begin=[d], end=[d + 1]), [0]))


def _recurrent(op: str, importer, inputs, attrs, opset):
    bb = importer.bb
    inputs = list(inputs) + [None] * (8 - len(inputs))
    x = as_tensor(bb, inputs[0])
    direction = str_attr(attrs.get("direction"), "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise _refusal(op, attrs, f"direction {direction!r} is not forward, reverse or bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise _refusal(op, attrs, f"layout {layout} is not 0 or 1")
    dtype = str(x.ty.dtype)
    if dtype not in ("float16", "float32", "float64") or x.ty.ndim != 3 or x.ty.shape is None:
        raise _refusal(op, attrs, f"X must be a float tensor of rank 3, not {x.ty}")
    sizes = list(x.ty.shape.values)
    length = sizes[layout]
    hidden = _hidden_size(op, attrs, inputs[2])
    clip = attrs.get("clip")
    if clip is not None and not float(clip) > 0:
        raise _refusal(op, attrs, f"clip must be positive, not {clip}")
    linear_before_reset = bool(attrs.get("linear_before_reset", 0)) if op == "GRU" else False
    input_forget = bool(attrs.get("input_forget", 0)) if op == "LSTM" else False
    activations = _activations(op, attrs, directions)
    if isinstance(length, tvm.tirx.IntImm) and int(length) == 0:
        raise _refusal(op, attrs, f"{op} over an empty sequence is not supported")

    def optional(i):
        return None if absent(importer, inputs[i]) else as_tensor(bb, inputs[i], dtype if i != 4 else None)

    weights = {"W": as_tensor(bb, inputs[1], dtype), "R": as_tensor(bb, inputs[2], dtype), "B": optional(3),
               "P": optional(7) if op == "LSTM" else None, "linear_before_reset": linear_before_reset,
               "input_forget": input_forget}
    lengths = optional(4)
    states = [optional(5)] + ([optional(6)] if op == "LSTM" else [])
    gates, inputs_size = _GATES[op], int(sizes[2]) if isinstance(sizes[2], tvm.tirx.IntImm) else None
    state_shape = [directions, None, hidden] if layout == 0 else [None, directions, hidden]
    tensors = {name: weights[name] for name in ("W", "R", "B", "P")}
    tensors.update(sequence_lens=lengths, initial_h=states[0], initial_c=states[1] if op == "LSTM" else None)
    _check_shapes(op, attrs, tensors,
                  {"W": [directions, gates * hidden, inputs_size], "R": [directions, gates * hidden, hidden],
                   "B": [directions, 2 * gates * hidden], "P": [directions, 3 * hidden], "sequence_lens": [None],
                   "initial_h": state_shape, "initial_c": state_shape})
    if layout == 1:
        x = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
    batch = x.ty.shape.values[1]
    initial = []
    for state in states:
        if state is None:
            state = bb.emit(relax.op.zeros(relax.ShapeExpr([directions, batch, hidden]), dtype))
        elif layout == 1:
            state = bb.emit(relax.op.permute_dims(state, [1, 0, 2]))
        initial.append(state)
    lengths = _validated(importer, bb, lengths, length)
    cell = _Cell(bb, op, hidden, dtype, None if clip is None else float(clip), _node_name(attrs, op))
    ys, finals = [], []
    for d in range(directions):
        y, state = _direction(cell, d, x, weights, initial, activations[d], lengths, direction == "reverse" or d == 1)
        ys.append(y)
        finals.append(state)
    y = bb.emit(relax.op.stack(ys, axis=1))  # [steps, directions, batch, hidden]
    results = [y]
    for k in range(len(initial)):
        final = bb.emit(relax.op.stack([f[k] for f in finals], axis=0))
        if lengths is not None:
            # onnxruntime's final states of an empty sequence are 0 (not the initial ones).
            started = bb.emit(relax.op.expand_dims(relax.op.greater(lengths, relax.const(0, "int64")), 1))
            final = bb.emit(relax.op.where(started, final, relax.const(0, dtype)))
        results.append(final)
    if layout == 1:
        results = [bb.emit(relax.op.permute_dims(results[0], [2, 0, 1, 3]))] + \
            [bb.emit(relax.op.permute_dims(r, [1, 0, 2])) for r in results[1:]]
    count = attrs["tvm_custom"]["num_outputs"]
    return relax.Tuple(results[:count]) if count > 1 else results[0]


def _hidden_size(op, attrs, r) -> int:
    """The hidden size: R's last size, which the attribute must agree with."""
    size = None
    shape = getattr(r.ty, "shape", None)
    if shape is not None and isinstance(shape.values[-1], tvm.tirx.IntImm):
        size = int(shape.values[-1])
    given = attrs.get("hidden_size")
    if given is not None and size is not None and int(given) != size:
        raise InvalidOnnxModel(f"{_described(op, attrs)}: hidden_size {given} differs from R's last size {size}")
    size = size if size is not None else given
    if size is None:
        raise _refusal(op, attrs, "its hidden size is known neither from hidden_size nor from R's shape")
    return int(size)


def _validated(importer, bb, lengths, steps):
    """``sequence_lens`` as int64, each checked to lie in ``[0, steps]``
    where the kernel reads it; None where none is given or it is all
    ``steps`` (known at import)."""
    if lengths is None:
        return None
    known = const_value(importer, lengths)
    if known is not None and isinstance(steps, tvm.tirx.IntImm) and np.all(known == int(steps)):
        return None
    return bb.emit_te(index_checks.checked_tensor, lengths, steps + 1, "sequence length", False,
                      primfunc_name_hint="sequence_lengths")


def _node_name(attrs, op: str) -> str:
    """A name for the node's loop functions (its ONNX name, else ``op``)."""
    return function_name(attrs["tvm_custom"]["name"] or op.lower())


@converter("RNN")
def rnn(importer, inputs, attrs, opset):
    return _recurrent("RNN", importer, inputs, attrs, opset)


@converter("GRU")
def gru(importer, inputs, attrs, opset):
    return _recurrent("GRU", importer, inputs, attrs, opset)


@converter("LSTM")
def lstm(importer, inputs, attrs, opset):
    return _recurrent("LSTM", importer, inputs, attrs, opset)
