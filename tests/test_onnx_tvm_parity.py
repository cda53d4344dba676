"""Models TVM's own importer, ``tvm.compile`` and ``relax.VirtualMachine``
run (the classes of failures found running TVM's ONNX frontend tests
through shapefn, ``tools/tvm_onnx_suite``), and the forms paddle2onnx and
Keras exports give them: dynamic sizes, shape values, contrib operators.
Each model is imported with shapefn.from_onnx, run at two or three input
shapes on a strict sim and on opencl (the ``onnx_check`` fixture) and
compared with onnxruntime."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MICROSOFT = "com.microsoft"
rng = np.random.default_rng(0)


def model(nodes, inputs, outputs, inits=(), opset=14):
    """``inputs``/``outputs`` are ``(name, elem_type, shape)``; ``inits`` maps
    names to numpy values. Imports com.microsoft too when a node uses it."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    opsets = [helper.make_opsetid("", opset)]
    if any(n.domain == MICROSOFT for n in nodes):
        opsets.append(helper.make_opsetid(MICROSOFT, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def const(name, value):
    return node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def outputs(*names, elem_type=F):
    return [(n, elem_type, None) for n in names]


def test_gather_shape_constant_index(onnx_check):
    """Gather from ``Shape(x)``: the result's rank is the index's (TVM keeps
    only a 0-d index's result as a size)."""
    indices = {"g0": np.array(2, np.int64), "g1": np.array([3], np.int64), "g2": np.array([[1]], np.int64),
               "g3": np.array([-1, 0], np.int64)}
    nodes = [node("Shape", ["x"], ["s"])]
    for name, index in indices.items():
        nodes += [const(f"{name}_index", index), node("Gather", ["s", f"{name}_index"], [name], axis=0)]
    m = model(nodes, [("x", F, ["N", 3, "H", "W"])], outputs(*indices, elem_type=I64), opset=13)
    onnx_check(m, [[normal(2, 3, 4, 5)], [normal(1, 3, 6, 2)]])


def test_microsoft_gelu(onnx_check):
    nodes = [node("Gelu", ["x"], ["a"], domain=MICROSOFT), node("FastGelu", ["x", "b"], ["c"], domain=MICROSOFT),
             node("BiasGelu", ["x", "b"], ["d"], domain=MICROSOFT)]
    m = model(nodes, [("x", F, ["N", "T", 8])], outputs("a", "c", "d"), {"b": normal(8)})
    onnx_check(m, [[normal(2, 3, 8)], [normal(1, 5, 8)]])


def test_a_contrib_operator_without_its_domains_opset_import():
    """As TVM's own tests write it (TVM's importer takes it; ONNX's shape
    inference does not): imported, and computed as numpy computes Gelu."""
    import math

    import shapefn

    m = model([node("Gelu", ["x"], ["y"], domain=MICROSOFT)], [("x", F, [4, 8])], outputs("y"))
    del m.opset_import[1:]
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(m), "sim"), "sim")
    x = normal(4, 8)
    want = x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(vm(x).numpy(), want, rtol=1e-5, atol=1e-6)


def test_microsoft_skip_layer_normalization(onnx_check):
    """All four outputs (TVM's converter gives the statistics as 0 and no
    sum), and without the optional beta and bias."""
    nodes = [node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y", "mean", "inv_std", "sum"],
                  domain=MICROSOFT, epsilon=1e-5),
             node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y2"], domain=MICROSOFT)]
    m = model(nodes, [("x", F, ["N", "T", 8]), ("skip", F, ["N", "T", 8])],
              outputs("y", "mean", "inv_std", "sum", "y2"), {"gamma": normal(8), "beta": normal(8), "bias": normal(8)})
    onnx_check(m, [[normal(2, 3, 8), normal(2, 3, 8)], [normal(1, 5, 8), normal(1, 5, 8)]])


def test_layer_normalization_before_opset_17(onnx_check):
    """LayerNormalization in an opset-14 model (onnxruntime runs it; onnx's
    checker has no schema for it before 17), with its Mean and InvStdDev
    outputs (TVM's converter gives them as 0), over one axis and over two."""
    nodes = [node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv_std"], axis=-1, epsilon=1e-5),
             node("LayerNormalization", ["x", "scale2"], ["y2"], axis=1)]
    m = model(nodes, [("x", F, ["N", 4, 6])], outputs("y", "mean", "inv_std", "y2"),
              {"scale": normal(6), "bias": normal(6), "scale2": normal(4, 6)})
    onnx_check(m, [[normal(2, 4, 6) * 3 + 1], [normal(1, 4, 6)]])


def _batch_norm_params(channels):
    return {"scale": normal(channels), "bias": normal(channels), "mean": normal(channels),
            "var": np.abs(normal(channels)) + 0.5}


def test_batch_normalization_feeds_hard_swish_and_conv(onnx_check):
    """Inference BatchNormalization names one output of its converter's
    three, the way paddle2onnx exports it (batch size -1, width '?'); its
    consumers get a tensor."""
    inits = {**_batch_norm_params(3), "w": normal(4, 3, 3, 3), "w2": normal(2, 4, 1, 1)}
    nodes = [node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-5),
             node("HardSwish", ["y"], ["h"]),
             node("Conv", ["h", "w"], ["z"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
             node("Identity", ["z"], ["zi"]),
             node("Conv", ["zi", "w2"], ["out"], kernel_shape=[1, 1]),
             node("Conv", ["y", "w"], ["direct"], kernel_shape=[3, 3])]
    m = model(nodes, [("x", F, [-1, 3, 8, "?"])], outputs("out", "direct"), inits)
    onnx_check(m, [[normal(2, 3, 8, 10)], [normal(1, 3, 8, 5)]])


def test_batch_normalization_training_outputs(onnx_check):
    """training_mode=1: the batch's statistics normalize, and the running
    ones are ``running * momentum + batch * (1 - momentum)``."""
    nodes = [node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "running_mean", "running_var"],
                  epsilon=1e-5, momentum=0.8, training_mode=1)]
    m = model(nodes, [("x", F, ["N", 3, "H", "W"])], outputs("y", "running_mean", "running_var"),
              _batch_norm_params(3), opset=15)
    onnx_check(m, [[normal(2, 3, 5, 7)], [normal(1, 3, 4, 3)]])


def test_size_division_feeds_reshape_and_slice(onnx_check):
    """paddle2onnx: half the width, ``Div(Gather(Shape(x), 3), [2])``, as a
    Slice's end and in a Reshape's shape; the quotient has the constant's
    rank (1)."""
    nodes = [node("Shape", ["x"], ["s"]), const("i3", np.array(3, np.int64)), const("i0", np.array(0, np.int64)),
             node("Gather", ["s", "i3"], ["w"], axis=0), node("Gather", ["s", "i0"], ["n"], axis=0),
             node("Div", ["w", "two"], ["half"]), node("Unsqueeze", ["n", "zero"], ["n1"]),
             node("Concat", ["n1", "minus_one", "half"], ["shape"], axis=0),
             node("Slice", ["x", "zero", "half", "three"], ["left"]),
             node("Reshape", ["left", "shape"], ["y"])]
    inits = {"two": np.array([2], np.int64), "zero": np.array([0], np.int64), "three": np.array([3], np.int64),
             "minus_one": np.array([-1], np.int64)}
    m = model(nodes, [("x", F, ["N", 3, "H", "W"])], [("y", F, None), ("half", I64, None)], inits, opset=13)
    onnx_check(m, [[normal(2, 3, 4, 6)], [normal(1, 3, 2, 9)]])


def test_size_division_truncates(onnx_check):
    """ONNX's integer Div truncates and Mod takes the divisor's sign (the
    dividend's with fmod=1), also where a size difference is negative or
    the divisor is."""
    nodes = [node("Shape", ["x"], ["s"]), const("i3", np.array(3, np.int64)),
             node("Gather", ["s", "i3"], ["w"], axis=0), node("Sub", ["w", "seven"], ["d"]),
             node("Div", ["d", "two"], ["q"]), node("Mod", ["d", "two"], ["r"]),
             node("Mod", ["d", "two"], ["r_fmod"], fmod=1), node("Div", ["w", "minus_two"], ["q_negative"]),
             node("Div", ["w", "two"], ["q_size"]), node("Mod", ["w", "two"], ["r_size"])]
    inits = {"seven": np.array(7, np.int64), "two": np.array(2, np.int64), "minus_two": np.array(-2, np.int64)}
    m = model(nodes, [("x", F, ["N", 3, "H", "W"])],
              outputs("q", "r", "r_fmod", "q_negative", "q_size", "r_size", elem_type=I64), inits, opset=13)
    onnx_check(m, [[normal(1, 3, 2, 4)], [normal(1, 3, 2, 9)], [normal(1, 3, 2, 7)]])


def test_range_of_sizes(onnx_check):
    """Range between sizes (``Gather(Shape(x), i)``), a constant and a
    runtime tensor."""
    nodes = [node("Shape", ["x"], ["s"]), const("i2", np.array(2, np.int64)), const("i3", np.array(3, np.int64)),
             node("Gather", ["s", "i2"], ["h"], axis=0), node("Gather", ["s", "i3"], ["w"], axis=0),
             node("Range", ["h", "w", "one"], ["h_to_w"]), node("Range", ["zero", "w", "two"], ["even"]),
             node("Range", ["w", "limit", "one"], ["w_to_limit"])]
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "two": np.array(2, np.int64)}
    m = model(nodes, [("x", F, ["N", 3, "H", "W"]), ("limit", I64, [])],
              outputs("h_to_w", "even", "w_to_limit", elem_type=I64), inits, opset=13)
    onnx_check(m, [[normal(1, 3, 2, 5), np.array(9, np.int64)], [normal(1, 3, 6, 3), np.array(1, np.int64)]])


def test_max_pool_ceil_mode_size_arithmetic(onnx_check):
    """torchvision's SSD300-VGG16: a ceil-mode pool's height times its width
    (``MaxPool -> Shape -> Gather x2 -> Mul``)."""
    nodes = [node("MaxPool", ["x"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
             node("MaxPool", ["p0"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             node("Shape", ["p1"], ["s"]), const("i2", np.array(2, np.int64)), const("i3", np.array(3, np.int64)),
             node("Gather", ["s", "i2"], ["h"], axis=0), node("Gather", ["s", "i3"], ["w"], axis=0),
             node("Mul", ["h", "w"], ["hw"]), node("Add", ["h", "w"], ["h_plus_w"]),
             node("Sub", ["h", "w"], ["h_minus_w"])]
    m = model(nodes, [("x", F, [1, 1, "H", "W"])],
              [("p1", F, None), *outputs("hw", "h_plus_w", "h_minus_w", elem_type=I64)], opset=13)
    onnx_check(m, [[normal(1, 1, 37, 19)], [normal(1, 1, 16, 22)]])


def test_max_pool_ceil_mode_dynamic(onnx_check):
    """Ceil-mode pools over dynamic sizes, padded unevenly, and where a last
    window would start in the padding after (dropped): 1x1 with stride 2,
    2x2 with stride 3 and padding."""
    pools = {"k2s2": dict(kernel_shape=[2, 2], strides=[2, 2]), "k3s2": dict(kernel_shape=[3, 3], strides=[2, 2]),
             "k3s2_padded": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1]),
             "k1s2": dict(kernel_shape=[1, 1], strides=[2, 2]),
             "k2s3": dict(kernel_shape=[2, 2], strides=[3, 3], pads=[1, 0, 1, 1])}
    nodes = [node("MaxPool", ["x"], [name], ceil_mode=1, **attrs) for name, attrs in pools.items()]
    m = model(nodes, [("x", F, ["N", 2, "H", "W"])], outputs(*pools), opset=13)
    onnx_check(m, [[normal(1, 2, 7, 6)], [normal(2, 2, 4, 9)], [normal(1, 2, 5, 5)]])


def test_max_pool_same_padding_dynamic(onnx_check):
    """SAME_UPPER / SAME_LOWER over dynamic sizes (Keras exports): padding
    that depends on the size's parity (3x3 stride 2 upper, 2x2 stride 2
    lower) and padding that does not."""
    pools = {"upper_k2s2": ("SAME_UPPER", 2, 2), "lower_k2s2": ("SAME_LOWER", 2, 2),
             "upper_k3s1": ("SAME_UPPER", 3, 1), "upper_k3s2": ("SAME_UPPER", 3, 2), "lower_k3s2": ("SAME_LOWER", 3, 2)}
    nodes = [node("MaxPool", ["x"], [name], kernel_shape=[k, k], strides=[s, s], auto_pad=mode)
             for name, (mode, k, s) in pools.items()]
    m = model(nodes, [("x", F, ["N", 2, "H", "W"])], outputs(*pools), opset=13)
    onnx_check(m, [[normal(1, 2, 7, 6)], [normal(2, 2, 4, 9)]])


def test_pools_with_same_padding_over_static_spatial_sizes_and_a_symbolic_batch(onnx_check):
    """SAME_UPPER / SAME_LOWER pools over a batch known only at run time and
    spatial sizes known at import (a Keras face-landmark network), odd sizes
    and strides 2, 1-D too: TVM's converter reads every size as an integer,
    and counts floor(in / s) windows for MaxPool's SAME_LOWER where ONNX
    (and onnxruntime) count ceil(in / s). (Dilated SAME pools are not
    compared: onnxruntime's output size there differs from the one ONNX's
    shape inference gives the same model.)"""
    pools = {"max_upper": ("MaxPool", "SAME_UPPER", 3, 2, 1), "max_lower": ("MaxPool", "SAME_LOWER", 2, 2, 1),
             "avg_upper": ("AveragePool", "SAME_UPPER", 3, 2, 1),
             "avg_lower": ("AveragePool", "SAME_LOWER", 2, 2, 1)}
    nodes = [node(op, ["x"], [name], kernel_shape=[k, k], strides=[s, s], auto_pad=mode,
                  **({"dilations": [d, d]} if d != 1 else {}))
             for name, (op, mode, k, s, d) in pools.items()]
    nodes.append(node("MaxPool", ["x1"], ["max_1d"], kernel_shape=[3], strides=[2], auto_pad="SAME_LOWER"))
    m = model(nodes, [("x", F, ["N", 2, 7, 5]), ("x1", F, ["M", 3, 9])], outputs(*pools, "max_1d"), opset=13)
    onnx_check(m, [[normal(1, 2, 7, 5), normal(1, 3, 9)], [normal(3, 2, 7, 5), normal(2, 3, 9)]])


def test_split_by_constant_sizes_with_empty_parts(onnx_check):
    """Split by constant sizes some of which are 0 (tf2onnx computes them):
    the empty parts are empty tensors, the others the slices between."""
    nodes = [const("sizes", np.array([0, 2, 0, 3], np.int64)),
             node("Split", ["x", "sizes"], ["a", "b", "c", "d"], axis=1)]
    m = model(nodes, [("x", F, ["N", 5])], outputs("a", "b", "c", "d"), opset=13)
    onnx_check(m, [[normal(2, 5)], [normal(1, 5)]])
