"""Operators ONNX defines as functions (``frontend/onnx/functions.py``):
imported as their function bodies, on a strict sim and on opencl
(``onnx_check``) against onnxruntime, with sizes known only at run time.
Attention (opset 23) in its three layouts — 3-D with grouped key/value
heads, 4-D with a past cache and its present outputs, causal, with a
boolean mask — at several (batch, length) pairs, length 1 included."""
import numpy as np
import pytest
from onnx import TensorProto
from test_onnx_ops import model, node, uniform

import shapefn
from conftest import need_opencl, opencl
from shapefn.frontend import from_onnx
from shapefn.runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp

F, B = TensorProto.FLOAT, TensorProto.BOOL
rng = np.random.default_rng(5)


def test_grouped_heads_3d_attention(onnx_check):
    """Q of 4 heads, K/V of 2 (hidden 4 x 8 and 2 x 8), batch and lengths symbolic."""
    m = model([node("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2)],
              [("q", F, ["B", "S", 32]), ("k", F, ["B", "L", 16]), ("v", F, ["B", "L", 16])], [("y", F, None)],
              opset=23)
    onnx_check(m, [[uniform((b, s, 32)), uniform((b, kv, 16)), uniform((b, kv, 16))]
                   for b, s, kv in [(2, 5, 7), (1, 1, 1), (3, 4, 1)]], atol=1e-5)


def test_causal_4d_attention_with_a_past_cache(onnx_check):
    """A decoder step: past keys/values of length P, new ones of length S;
    the outputs are Y and the present cache (P + S long)."""
    m = model([node("Attention", ["q", "k", "v", "", "past_k", "past_v"], ["y", "present_k", "present_v"],
                    is_causal=1)],
              [("q", F, ["B", 2, "S", 8]), ("k", F, ["B", 2, "S", 8]), ("v", F, ["B", 2, "S", 8]),
               ("past_k", F, ["B", 2, "P", 8]), ("past_v", F, ["B", 2, "P", 8])],
              [("y", F, None), ("present_k", F, None), ("present_v", F, None)], opset=23)
    onnx_check(m, [[uniform((b, 2, s, 8)), uniform((b, 2, s, 8)), uniform((b, 2, s, 8)),
                    uniform((b, 2, p, 8)), uniform((b, 2, p, 8))]
                   for b, s, p in [(1, 1, 6), (2, 3, 4), (1, 5, 0)]], atol=1e-5)


def test_masked_4d_attention_with_scale_and_softcap(onnx_check):
    """A boolean mask (True attends) broadcast over heads, and the QK product
    as a fourth output."""
    m = model([node("Attention", ["q", "k", "v", "mask"], ["y", "", "", "qk"], scale=0.3, softcap=2.0,
                    qk_matmul_output_mode=1)],
              [("q", F, ["B", 2, "S", 4]), ("k", F, ["B", 2, "L", 4]), ("v", F, ["B", 2, "L", 4]),
               ("mask", B, ["S", "L"])],
              [("y", F, None), ("qk", F, None)], opset=23)

    def feed(b, s, kv):
        mask = rng.random((s, kv)) < 0.7
        mask[:, 0] = True  # (a row with nothing to attend is zero in both)
        return [uniform((b, 2, s, 4)), uniform((b, 2, kv, 4)), uniform((b, 2, kv, 4)), mask]

    onnx_check(m, [feed(2, 3, 5), feed(1, 1, 1)], atol=1e-5)


@pytest.mark.parametrize("op, attrs, shape", [
    ("Celu", {"alpha": 0.7}, ["N", 5]),
    ("MeanVarianceNormalization", {}, ["N", 3, "H", 2]),
    ("Swish", {"alpha": 1.3}, ["N", 5]),
])
def test_function_defined_operators(onnx_check, op, attrs, shape):
    opset = 24 if op == "Swish" else 13
    m = model([node(op, ["x"], ["y"], **attrs)], [("x", F, shape)], [("y", F, None)], opset=opset)
    sizes = [[3, 5], [1, 5]] if len(shape) == 2 else [[2, 3, 4, 2], [1, 3, 3, 2]]
    onnx_check(m, [[uniform(s)] for s in sizes], atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_window_functions_with_their_default_attributes(onnx_check, op):
    """The window's length is an input; ``output_datatype`` and ``periodic``
    are left to their defaults, which ONNX's inliner would drop."""
    m = model([node(op, ["n"], ["y"])], [("n", TensorProto.INT64, [])], [("y", F, None)], opset=17)
    onnx_check(m, [[np.array(8, np.int64)]], atol=1e-6)
    m = model([node(op, ["n"], ["y"], periodic=0, output_datatype=TensorProto.DOUBLE)],
              [("n", TensorProto.INT64, [])], [("y", TensorProto.DOUBLE, None)], opset=17)
    onnx_check(m, [[np.array(5, np.int64)]], atol=1e-6)


def test_center_crop_pad_with_axes(onnx_check):
    """CenterCropPad's body reads its ``axes`` attribute in a Constant,
    which ONNX's inliner leaves empty: bound when the body is built."""
    m = model([node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 1])],
              [("x", F, [10, 7, 3]), ("shape", TensorProto.INT64, [2])], [("y", F, None)], opset=18)
    onnx_check(m, [[uniform((10, 7, 3)), np.array([6, 9], np.int64)]])


@pytest.mark.parametrize("device", ["sim", pytest.param("opencl", marks=opencl)])
def test_flex_attention_a_preview_operator_matches_onnx_reference(device):
    """ai.onnx.preview's FlexAttention, imported as its definition, with
    query and key lengths known only at run time; against ONNX's reference
    implementation (onnxruntime 1.32 has no FlexAttention)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    if device == "opencl":
        need_opencl()
    graph = helper.make_graph(
        [helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview")], "flex",
        [helper.make_tensor_value_info("Q", F, [2, 4, "L", 16]), helper.make_tensor_value_info("K", F, [2, 4, "S", 16]),
         helper.make_tensor_value_info("V", F, [2, 4, "S", 16])], [helper.make_tensor_value_info("Y", F, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), device), device)
    reference = ReferenceEvaluator(m)
    for length, keys in ((8, 6), (1, 3)):
        q, k, v = uniform((2, 4, length, 16)), uniform((2, 4, keys, 16)), uniform((2, 4, keys, 16))
        np.testing.assert_allclose(vm(q, k, v).numpy(), reference.run(None, {"Q": q, "K": k, "V": v})[0],
                                   rtol=1e-5, atol=1e-5)


def test_a_malformed_node_is_refused_before_expansion():
    """The checker sees the node as written (not its expansion), and names it."""
    m = model([node("Attention", ["q", "k"], ["y"])], [("q", F, [1, 2, 3, 4]), ("k", F, [1, 2, 3, 4])],
              [("y", F, None)], opset=23)
    with pytest.raises(InvalidOnnxModel, match="OpType: Attention"):
        from_onnx(m)


def test_an_unsupported_operator_in_a_definition_names_the_definition():
    m = model([node("Bernoulli", ["x"], ["y"], seed=1.0)], [("x", F, [4])], [("y", F, None)], opset=15)
    with pytest.raises(UnsupportedOnnxOp, match="in ONNX's definition of Bernoulli: RandomUniformLike"):
        from_onnx(m)
