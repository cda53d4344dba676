"""ONNX's RNN, GRU and LSTM (shapefn's converters,
``frontend/onnx/ops/recurrent.py``) on a strict sim and on opencl against
onnxruntime (``onnx_check``): each direction, biases, initial states,
peepholes, ``sequence_lens`` (an entry of length 0 too), ``clip``, other
activations, GRU's ``linear_before_reset``, LSTM's ``input_forget``;
``layout`` 1 (which onnxruntime refuses) against ONNX's reference
implementation; and the refusals. Every model has a dynamic batch. ONNX's
own node tests of the three run in ``test_onnx_backend_suite.py``."""
import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_onnx_ops import model, node, uniform

from shapefn.frontend import from_onnx
from shapefn.runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp

F, I32 = TensorProto.FLOAT, TensorProto.INT32
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
STEPS, INPUT, HIDDEN = 4, 3, 5
rng = np.random.default_rng(5)


def recurrent_model(op, direction="forward", bias=False, lengths=False, initial=False, peepholes=False,
                    layout=0, outputs=("Y", "Y_h", "Y_c"), weights_as_inputs=False, steps=STEPS, **attrs):
    """``op`` over X ``[steps, N, INPUT]`` (``[N, steps, INPUT]`` with
    layout 1); the inputs asked for are graph inputs (W and R too with
    ``weights_as_inputs``), the others initializers."""
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    weights = {"W": uniform((dirs, gates * HIDDEN, INPUT), -1, 1), "R": uniform((dirs, gates * HIDDEN, HIDDEN), -1, 1)}
    inputs = [("X", F, [steps, "N", INPUT] if layout == 0 else ["N", steps, INPUT])]
    if weights_as_inputs:
        inputs += [(name, F, list(value.shape)) for name, value in weights.items()]
        inits = {}
    else:
        inits = dict(weights)
    if bias:
        inits["B"] = uniform((dirs, 2 * gates * HIDDEN), -1, 1)
    if peepholes:
        inits["P"] = uniform((dirs, 3 * HIDDEN), -1, 1)
    state = [dirs, "N", HIDDEN] if layout == 0 else ["N", dirs, HIDDEN]
    names = ["X", "W", "R", "B" if bias else "", "L" if lengths else "", "h0" if initial else ""]
    inputs += [("L", I32, ["N"])] * lengths + [("h0", F, state)] * initial
    if op == "LSTM":
        names += ["c0" if initial else "", "P" if peepholes else ""]
        inputs += [("c0", F, state)] * initial
    while not names[-1]:
        names.pop()
    count = {"LSTM": 3}.get(op, 2)
    outs = [name if name in outputs else "" for name in ("Y", "Y_h", "Y_c")[:count]]
    while not outs[-1]:
        outs.pop()
    attrs = {"hidden_size": HIDDEN, "direction": direction, **({"layout": layout} if layout else {}), **attrs}
    return model([node(op, names, outs, **attrs)], inputs, [(name, F, None) for name in outs if name], inits,
                 opset=22)


def feeds(onnx_model, batches, lengths=None):
    """Per batch size, the graph inputs (``lengths[n]``: sequence_lens)."""
    sets = []
    for n in batches:
        values = []
        for value in onnx_model.graph.input:
            dims = [n if d.dim_param == "N" else d.dim_value for d in value.type.tensor_type.shape.dim]
            if value.name == "L":
                values.append(np.array(lengths[n], np.int32))
            elif value.name in ("W", "R"):
                values.append(uniform(dims, -1, 1))
            else:
                values.append(uniform(dims, -2, 2))
        sets.append(values)
    return sets


@pytest.mark.parametrize("case", [
    # (onnxruntime's RNN reads past its buffers for a length of 0: none here)
    dict(direction="forward", bias=True, lengths={3: [4, 2, 1], 1: [3]}, initial=True, clip=1.5,
         activations=["LeakyRelu"], activation_alpha=[0.2]),
    dict(direction="bidirectional", weights_as_inputs=True, outputs=("Y_h",)),
], ids=["forward-lengths-clip-leakyrelu", "bidirectional-runtime-weights"])
def test_rnn_matches_onnxruntime(onnx_check, case):
    lengths = case.pop("lengths", None)
    m = recurrent_model("RNN", lengths=lengths is not None, **case)
    onnx_check(m, feeds(m, (3, 1), lengths), atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(direction="reverse", bias=True, lengths={3: [4, 0, 2], 1: [3]}, initial=True),
    dict(direction="bidirectional", bias=True, linear_before_reset=1, clip=2.0, lengths={3: [1, 4, 3], 1: [4]}),
    dict(direction="forward", activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3],
         activation_beta=[0.4], outputs=("Y",)),
], ids=["reverse-lengths-initial", "bidirectional-linear-before-reset-clip", "hardsigmoid-softsign"])
def test_gru_matches_onnxruntime(onnx_check, case):
    lengths = case.pop("lengths", None)
    m = recurrent_model("GRU", lengths=lengths is not None, **case)
    onnx_check(m, feeds(m, (3, 1), lengths), atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(direction="forward", bias=True, peepholes=True, initial=True, lengths={3: [4, 0, 2], 1: [1]}),
    dict(direction="bidirectional", bias=True, peepholes=True, input_forget=1, clip=1.0,
         lengths={3: [2, 4, 3], 1: [4]}),
    dict(direction="reverse", outputs=("Y_h", "Y_c"), activations=["Sigmoid", "Elu", "ScaledTanh"],
         activation_alpha=[0.8, 1.2], activation_beta=[0.7]),
], ids=["forward-peepholes-lengths-initial", "bidirectional-input-forget-clip", "reverse-states-elu-scaledtanh"])
def test_lstm_matches_onnxruntime(onnx_check, case):
    lengths = case.pop("lengths", None)
    m = recurrent_model("LSTM", lengths=lengths is not None, **case)
    onnx_check(m, feeds(m, (3, 1), lengths), atol=1e-5)


@pytest.mark.parametrize("op,direction", [("GRU", "bidirectional"), ("LSTM", "reverse")])
def test_batch_first_layout_matches_onnx_reference(op, direction):
    """layout 1 (X, Y and the states batch first), which onnxruntime
    refuses, against ONNX's reference implementation (which knows no
    sequence_lens, clip or other activations: layout 0 covers those)."""
    from conftest import run_on_devices

    m = recurrent_model(op, direction, bias=True, initial=True, peepholes=op == "LSTM", layout=1)
    calls = feeds(m, (3, 1))
    reference = ReferenceEvaluator(m)
    names = [value.name for value in m.graph.input]
    results = run_on_devices(from_onnx(m), calls)
    for device, runs in results.items():
        for args, (outs, _) in zip(calls, runs):
            wants = reference.run(None, dict(zip(names, args)))
            assert len(outs) == len(wants)
            for got, want in zip(outs, wants):
                assert got.shape == want.shape, device
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=device)


@pytest.mark.parametrize("op,case,message", [
    ("LSTM", dict(steps="T"), "LSTM over a sequence length known only at run time"),
    ("GRU", dict(layout=1, steps="T"), "GRU over a sequence length known only at run time"),
    ("RNN", dict(activations=["Affine"]), "'affine' needs its activation_alpha"),
    ("RNN", dict(activations=["Gelu"]), "activation 'Gelu' is not one of ONNX's"),
    ("LSTM", dict(activations=["Sigmoid", "LeakyRelu", "Tanh"], activation_alpha=[0.1, 0.2, 0.3]),
     "different values read in order"),
    ("GRU", dict(direction="bidirectional", activations=["Sigmoid", "Tanh"]), "lists 2 activations"),
])
def test_refused_with_the_reason(op, case, message):
    with pytest.raises(UnsupportedOnnxOp, match=message):
        from_onnx(recurrent_model(op, **case))


def test_weights_of_other_sizes_than_the_node_implies_are_invalid():
    with pytest.raises(InvalidOnnxModel, match="hidden_size 4 differs from R's last size 5"):
        from_onnx(recurrent_model("LSTM", hidden_size=4))
    m = recurrent_model("GRU", bias=True)
    m.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.zeros((1, 20), np.float32), "B"))
    with pytest.raises(InvalidOnnxModel, match=r"B has shape \[1, 20\]; the node implies \[1, 30\]"):
        from_onnx(m)
