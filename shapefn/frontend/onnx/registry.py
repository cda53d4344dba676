"""The registry of shapefn's ONNX converters, which take over the operators
TVM's importer cannot take with runtime values (``importer.py`` consults it
before TVM's table), and the one answer to which operators the import takes
in which domain (``supported_ops``: ``checks.check_operators`` asks it).

A converter is ``converter(importer, inputs, attrs, opset)`` and returns a
Relax expression, or ``NotImplemented`` to let TVM's converter handle the
node (when the values it needs are constants after all). It is registered
for an operator of one domain, ONNX's by default
(``@converter("Binarizer", domain="ai.onnx.ml")``). Each operator family's
module under ``ops/`` registers its converters when imported;
``ops/__init__`` imports every one.
"""
from __future__ import annotations

# ONNX's own domain, and the two ways a node or an opset import names it.
ONNX_DOMAIN = ""
DEFAULT_DOMAINS = ("", "ai.onnx")

# (domain, operator) -> its converter; the domain as ``canonical_domain`` spells it.
CONVERTERS: dict = {}

# The operators of domains other than ONNX's that TVM's own converters
# implement: TVM's table is keyed by operator name alone, so it cannot say
# which domain a converter is for. These are onnxruntime's contrib operators
# (com.microsoft) its converters are written for; a node of another domain
# reaches TVM's converter only if named here. (Every name is in TVM's table:
# tests/test_onnx_converters.py.)
TVM_DOMAIN_OPS: dict[str, frozenset[str]] = {
    "com.microsoft": frozenset({"Attention", "BiasGelu", "EmbedLayerNormalization", "FastGelu", "Gelu",
                                "MatMulInteger16", "SkipLayerNormalization"}),
}


def canonical_domain(domain: str) -> str:
    """``domain`` as the registry keys it (``"ai.onnx"`` is ONNX's, ``""``)."""
    return ONNX_DOMAIN if domain in DEFAULT_DOMAINS else domain


def qualified_name(domain: str, op_type: str) -> str:
    """An operator as messages name it: ``Gather``, ``ai.onnx.ml.Binarizer``."""
    domain = canonical_domain(domain)
    return f"{domain}.{op_type}" if domain else op_type


def converter(op_type: str, takes_scalars: bool = False, domain: str = ONNX_DOMAIN):
    """Registers ``fn`` as the converter of ``op_type`` in ``domain``. It
    receives shape values as shapes, and integer scalars (TVM's PrimValues)
    only with ``takes_scalars``; other inputs as tensors
    (``importer._converter_inputs``). A second converter for the same
    operator of the same domain is refused."""
    key = (canonical_domain(domain), op_type)

    def register(fn):
        if key in CONVERTERS:
            previous = CONVERTERS[key]
            raise ValueError(f"ONNX operator {qualified_name(*key)!r} already has a converter: "
                             f"{previous.__module__}.{previous.__qualname__}")
        fn.takes_scalars = takes_scalars
        CONVERTERS[key] = fn
        return fn

    return register


def converter_of(domain: str, op_type: str):
    """shapefn's converter of ``op_type`` in ``domain``, or None."""
    return CONVERTERS.get((canonical_domain(domain), op_type))


def tvm_converts(domain: str, op_type: str) -> bool:
    """Whether TVM's table has a converter for ``op_type`` of ``domain``:
    any of its names for ONNX's domain, those ``TVM_DOMAIN_OPS`` declares
    for another."""
    from ...compiler import tvm_compat

    domain = canonical_domain(domain)
    if domain == ONNX_DOMAIN:
        return op_type in tvm_compat.onnx_convert_map()
    return op_type in TVM_DOMAIN_OPS.get(domain, ())


def supported_ops(domain: str) -> set[str]:
    """The operators of ``domain`` that shapefn's or TVM's converters
    import. (The importer adds the ones it converts itself, ``If`` and
    ``Loop`` among them, and those ONNX defines as functions.)"""
    from ...compiler import tvm_compat

    domain = canonical_domain(domain)
    tvm_ops = set(tvm_compat.onnx_convert_map()) if domain == ONNX_DOMAIN else set(TVM_DOMAIN_OPS.get(domain, ()))
    return {op for d, op in CONVERTERS if d == domain} | tvm_ops


def tvm_converter(importer, op_type: str, inputs, attrs, opset):
    """TVM's own converter of ``op_type``."""
    from ...compiler import tvm_compat

    fn = tvm_compat.onnx_convert_map()[op_type].get_converter(opset)
    return fn(importer.bb, inputs, attrs, [importer.nodes, importer.params])
