"""The ONNX converter registry (``shapefn.frontend.onnx.registry``): one
converter per operator of a domain, each family's module registering its own
when the ``ops`` package imports it, and which operators the import takes in
which domain."""
import pkgutil

import pytest

from shapefn.compiler import tvm_compat
from shapefn.frontend.onnx import ops, registry


def test_a_second_converter_for_an_operator_is_refused():
    before = dict(registry.CONVERTERS)
    assert ("", "Gather") in before
    with pytest.raises(ValueError, match=r"ONNX operator 'Gather' already has a converter: "
                                         r"shapefn\.frontend\.onnx\.ops\.indexing\."):
        registry.converter("Gather")(lambda importer, node, inputs: None)
    with pytest.raises(ValueError, match=r"ONNX operator 'Gather' already has a converter"):
        registry.converter("Gather", domain="ai.onnx")(lambda importer, node, inputs: None)
    with pytest.raises(ValueError, match=r"ONNX operator 'ai\.onnx\.ml\.Binarizer' already has a converter: "
                                         r"shapefn\.frontend\.onnx\.ops\.ml\."):
        registry.converter("Binarizer", domain="ai.onnx.ml")(lambda importer, node, inputs: None)
    assert registry.CONVERTERS == before


def test_every_family_module_is_imported_and_registers_converters():
    families = {m.name for m in pkgutil.iter_modules(ops.__path__)}
    assert {"indexing", "shapes", "recurrent", "detection"} <= families
    registering = {fn.__module__.rpartition(".")[2] for fn in registry.CONVERTERS.values()}
    assert registering == families


def test_converters_are_found_by_domain_and_operator():
    assert registry.converter_of("ai.onnx.ml", "Binarizer") is ops.ml.binarizer
    assert registry.converter_of("", "Binarizer") is None
    assert registry.converter_of("ai.onnx", "Gather") is registry.converter_of("", "Gather") is ops.indexing.gather
    assert registry.converter_of("com.microsoft", "SkipLayerNormalization") is ops.layers.skip_layer_normalization


def test_each_domain_s_supported_operators():
    assert registry.supported_ops("ai.onnx.ml") == {"ArrayFeatureExtractor", "Binarizer"}
    assert registry.supported_ops("ai.onnx.preview.training") == {"Adagrad", "Adam", "Momentum"}
    assert registry.supported_ops("com.microsoft") == registry.TVM_DOMAIN_OPS["com.microsoft"]
    assert {"Gather", "Relu", "TopK"} <= registry.supported_ops("") == registry.supported_ops("ai.onnx")
    assert registry.supported_ops("my.ops") == set()


def test_the_operators_declared_as_tvm_s_in_other_domains_are_in_tvm_s_table():
    """A TVM upgrade that drops one of them fails here, not in a user's import."""
    table = tvm_compat.onnx_convert_map()
    for domain, op_types in registry.TVM_DOMAIN_OPS.items():
        assert op_types <= set(table), domain
        assert all(registry.tvm_converts(domain, op) for op in op_types)
    assert not registry.tvm_converts("ai.onnx.ml", "Relu")


def test_an_operator_is_taken_only_in_the_domain_it_is_registered_for():
    from onnx import TensorProto, helper

    import shapefn

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], name="binarizer"),  # (ai.onnx.ml's, not ONNX's)
             helper.make_node("Relu", ["b"], ["y"], name="relu", domain="my.ops")]  # (ONNX's, not my.ops')
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
    with pytest.raises(shapefn.UnsupportedOnnxOp) as info:
        shapefn.from_onnx(model)
    assert info.value.ops == {"Binarizer": ["'binarizer'"], "my.ops.Relu": ["'relu'"]}
