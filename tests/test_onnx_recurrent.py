"""ONNX's RNN, GRU and LSTM (shapefn's converters,
``frontend/onnx/ops/recurrent.py``) on a strict sim and on opencl against
onnxruntime (``onnx_check``): each direction, biases, initial states,
peepholes, ``sequence_lens`` (an entry of length 0 too), ``clip``, other
activations, GRU's ``linear_before_reset``, LSTM's ``input_forget``;
``layout`` 1 (which onnxruntime refuses) against ONNX's reference
implementation; and the refusals. Every model has a dynamic batch, and each
case runs over a sequence length known at import (unrolled) and over one
known only at run time (a loop; two lengths per case). ONNX's own node
tests of the three run in ``test_onnx_backend_suite.py`` and here once
more with their time axis made symbolic, on sim and opencl."""
import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_onnx_ops import model, node, uniform

from conftest import DEVICES, opencl
from shapefn.frontend import from_onnx
from shapefn.runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp

F, I32 = TensorProto.FLOAT, TensorProto.INT32
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
STEPS, INPUT, HIDDEN = 4, 3, 5
# A sequence length known only at run time: its value per batch size of ``feeds``.
RUN_TIME_STEPS = {3: 4, 1: 6}
STEPS_KNOWN = pytest.mark.parametrize("steps", [STEPS, "T"], ids=["steps-at-import", "steps-at-run-time"])
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
    """Per batch size, the graph inputs (``lengths[n]``: sequence_lens; a
    symbolic length ``T``: ``RUN_TIME_STEPS[n]``)."""
    sets = []
    for n in batches:
        values = []
        for value in onnx_model.graph.input:
            dims = [n if d.dim_param == "N" else RUN_TIME_STEPS[n] if d.dim_param == "T" else d.dim_value
                    for d in value.type.tensor_type.shape.dim]
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
@STEPS_KNOWN
def test_rnn_matches_onnxruntime(onnx_check, case, steps):
    case = dict(case)
    lengths = case.pop("lengths", None)
    m = recurrent_model("RNN", lengths=lengths is not None, steps=steps, **case)
    onnx_check(m, feeds(m, (3, 1), lengths), atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(direction="reverse", bias=True, lengths={3: [4, 0, 2], 1: [3]}, initial=True),
    dict(direction="bidirectional", bias=True, linear_before_reset=1, clip=2.0, lengths={3: [1, 4, 3], 1: [4]}),
    dict(direction="forward", activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3],
         activation_beta=[0.4], outputs=("Y",)),
], ids=["reverse-lengths-initial", "bidirectional-linear-before-reset-clip", "hardsigmoid-softsign"])
@STEPS_KNOWN
def test_gru_matches_onnxruntime(onnx_check, case, steps):
    case = dict(case)
    lengths = case.pop("lengths", None)
    m = recurrent_model("GRU", lengths=lengths is not None, steps=steps, **case)
    onnx_check(m, feeds(m, (3, 1), lengths), atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(direction="forward", bias=True, peepholes=True, initial=True, lengths={3: [4, 0, 2], 1: [1]}),
    dict(direction="bidirectional", bias=True, peepholes=True, input_forget=1, clip=1.0,
         lengths={3: [2, 4, 3], 1: [4]}),
    dict(direction="reverse", outputs=("Y_h", "Y_c"), activations=["Sigmoid", "Elu", "ScaledTanh"],
         activation_alpha=[0.8, 1.2], activation_beta=[0.7]),
], ids=["forward-peepholes-lengths-initial", "bidirectional-input-forget-clip", "reverse-states-elu-scaledtanh"])
@STEPS_KNOWN
def test_lstm_matches_onnxruntime(onnx_check, case, steps):
    case = dict(case)
    lengths = case.pop("lengths", None)
    m = recurrent_model("LSTM", lengths=lengths is not None, steps=steps, **case)
    onnx_check(m, feeds(m, (3, 1), lengths), atol=1e-5)


@STEPS_KNOWN
@pytest.mark.parametrize("op,direction", [("GRU", "bidirectional"), ("LSTM", "reverse")])
def test_batch_first_layout_matches_onnx_reference(op, direction, steps):
    """layout 1 (X, Y and the states batch first), which onnxruntime
    refuses, against ONNX's reference implementation (which knows no
    sequence_lens, clip or other activations: layout 0 covers those)."""
    from conftest import run_on_devices

    m = recurrent_model(op, direction, bias=True, initial=True, peepholes=op == "LSTM", layout=1, steps=steps)
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


def _node_cases():
    """ONNX's node tests of RNN, GRU and LSTM (their models and reference
    outputs): their case modules make them when imported (as ONNX's loader
    has them made), into ONNX's list of node test cases."""
    import onnx.backend.test.case.node as cases
    from onnx.backend.test.case.node import gru, lstm, rnn  # noqa: F401  (imported for what they make)

    return {case.name: case for case in cases._NodeTestCases if case.name in NODE_TESTS}


NODE_TESTS = ["test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias", "test_rnn_seq_length",
              "test_simple_rnn_batchwise", "test_simple_rnn_reverse", "test_simple_rnn_bidirectional",
              "test_gru_defaults", "test_gru_with_initial_bias", "test_gru_seq_length", "test_gru_batchwise",
              "test_gru_reverse", "test_gru_bidirectional", "test_lstm_defaults", "test_lstm_with_initial_bias",
              "test_lstm_with_peepholes", "test_lstm_batchwise", "test_lstm_reverse", "test_lstm_bidirectional"]


def _with_symbolic_time(case):
    """``case``'s model with its graph inputs typed from its data, the time
    axis of X (and of the states' nothing: they have none) named ``T``."""
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    (op,) = [n for n in m.graph.node]
    layout = next((a.i for a in op.attribute if a.name == "layout"), 0)
    inputs, _ = case.data_sets[0]
    del m.graph.input[:]
    for name, value in zip([n for n in op.input if n], inputs):
        dims = list(value.shape)
        if name == op.input[0]:
            dims[layout] = "T"
        m.graph.input.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), dims))
    for out in m.graph.output:
        out.type.tensor_type.ClearField("shape")
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NODE_TESTS)
def test_onnx_node_tests_over_a_run_time_length_match_their_reference(name, device):
    """Each node test re-exported with X's time axis symbolic: the steps run
    as a loop, and match the outputs ONNX's reference gave for the test."""
    from conftest import run_on_devices

    case = _node_cases().get(name)
    assert case is not None, f"ONNX made no node test {name}"
    inputs, outputs = case.data_sets[0]
    mod = from_onnx(_with_symbolic_time(case))
    assert any("_direction" in gv.name_hint for gv in mod.functions), "the steps are not a loop"
    ((got, counters),) = run_on_devices(mod, [list(inputs)], devices=(device,))[device]
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(outputs)
    for value, want in zip(got, outputs):
        assert value.shape == want.shape
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5)
    assert counters["d2h_copies"] == 0  # (the VM counts the steps: nothing read back)


@pytest.mark.parametrize("device, steps", [("host", "T"), ("sim", "T"), pytest.param("opencl", "T", marks=opencl),
                                           ("sim", STEPS)])
def test_a_sequence_length_outside_the_sequence_raises_naming_the_node(device, steps):
    """Lengths (int32, as ONNX types them) just outside ``[0, steps]``, far
    outside and INT32_MIN, over a length known at run time (a loop) and at
    import (unrolled)."""
    import shapefn

    m = recurrent_model("LSTM", lengths=True)
    m.graph.node[0].name = "encoder"
    if steps == "T":
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    exe = shapefn.compile(from_onnx(m), device)
    vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
    x = uniform((STEPS, 2, INPUT))
    for bad in (-1, STEPS + 1, 2**31 - 1, -(2**31)):
        with pytest.raises(IndexError, match=rf"ONNX node 'encoder' \(LSTM\).*sequence length is {bad}, outside "
                                             rf"\[0, {STEPS + 1}\)"):
            outs = vm["main"](x, np.array([2, bad], np.int32))
            [np.asarray(o) for o in outs]
    outs = vm["main"](x, np.array([STEPS, 0], np.int32))  # (both bounds are lengths)
    assert [np.asarray(o).shape for o in outs] == [(STEPS, 1, 2, HIDDEN), (1, 2, HIDDEN), (1, 2, HIDDEN)]


def test_a_sequence_known_at_import_longer_than_the_unrolled_runs_as_a_loop(onnx_check):
    from shapefn.frontend.onnx.ops.recurrent import UNROLL_AT_MOST

    steps = UNROLL_AT_MOST + 3
    m = recurrent_model("GRU", direction="bidirectional", bias=True, steps=steps)
    assert any("_direction" in gv.name_hint for gv in from_onnx(m).functions)
    x = uniform((steps, 2, INPUT), -2, 2)
    onnx_check(m, [[x]], atol=1e-5)
