"""The ONNX frontend: ``from_onnx`` imports an ONNX model as a Relax module
for ``shapefn.compile``.

``importer.py`` walks the graph on top of TVM's Relax ONNX importer and
consults ``registry.py`` first: shapefn's converters, one module per
operator family under ``ops/``, take over the operators TVM's importer
cannot take with values known only at run time. ``checks.py`` is what the
importer checks of a model before converting anything; ``functions.py``,
``loop.py``, ``scan.py`` and ``sequence_inputs.py`` rewrite ONNX's
functions, loops, scans and sequence inputs into forms the converters take;
``values.py`` and ``sizes.py`` are what converters read from the values
they are given. ``backend.py`` is ONNX's backend interface over shapefn.
"""
from .importer import from_onnx

__all__ = ["from_onnx"]
