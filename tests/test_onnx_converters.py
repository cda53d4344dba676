"""The ONNX converter registry (``shapefn.frontend.onnx_converters``): one
converter per operator."""
import pytest

import shapefn.frontend.onnx  # noqa: F401 - registers every converter
from shapefn.frontend import onnx_converters


def test_a_second_converter_for_an_operator_is_refused():
    before = dict(onnx_converters.CONVERTERS)
    assert "Gather" in before
    with pytest.raises(ValueError, match=r"ONNX operator 'Gather' already has a converter: "
                                         r"shapefn\.frontend\.onnx_indexing\."):
        onnx_converters.converter("Gather")(lambda importer, node, inputs: None)
    assert onnx_converters.CONVERTERS == before
