"""The ONNX converter registry (``shapefn.frontend.onnx.registry``): one
converter per operator, each family's module registering its own when the
``ops`` package imports it."""
import pkgutil

import pytest

from shapefn.frontend.onnx import ops, registry


def test_a_second_converter_for_an_operator_is_refused():
    before = dict(registry.CONVERTERS)
    assert "Gather" in before
    with pytest.raises(ValueError, match=r"ONNX operator 'Gather' already has a converter: "
                                         r"shapefn\.frontend\.onnx\.ops\.indexing\."):
        registry.converter("Gather")(lambda importer, node, inputs: None)
    assert registry.CONVERTERS == before


def test_every_family_module_is_imported_and_registers_converters():
    families = {m.name for m in pkgutil.iter_modules(ops.__path__)}
    assert {"indexing", "shapes", "recurrent", "detection"} <= families
    registering = {fn.__module__.rpartition(".")[2] for fn in registry.CONVERTERS.values()}
    assert registering == families
