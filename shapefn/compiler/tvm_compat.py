"""shapefn's one seam to what TVM does not publish.

apache-tvm is pinned (pyproject.toml), and shapefn relies on a few of its
names that are private (a leading ``_``) or are no part of its documented
API: the ONNX importer's class and its hooks, BlockBuilder's binding-block
methods, the registration of a new TIR op, setting an expression's type, and
the modules that bind ``gen_call_tir_inputs`` under names of their own. Every
such use is here, under a name of shapefn's, and nowhere else in the package
(``tests/test_tvm_compat.py`` checks both: that each still does what shapefn
needs of it, with a message naming what TVM changed, and that no other
module names one). A TVM upgrade starts by running that test.

The runtime layer uses none of these: it loads TVM's runtime library and
tvm-ffi through their published entry points (``runtime/native.py``).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as _onnx

__all__ = ["OnnxGraphImporter", "begin_binding_block", "end_block", "gen_call_tir_inputs_callers",
           "onnx_convert_map", "onnx_input", "parse_shape_name", "register_op", "replace_gen_call_tir_inputs",
           "update_type"]


# --- TVM's Relax ONNX importer ---------------------------------------------

def onnx_convert_map() -> dict:
    """ONNX operator name -> TVM's converter class (``get_converter(opset)``
    gives the function ``fn(bb, inputs, attrs, [nodes, params])``)."""
    return _onnx._get_convert_map()


def onnx_input():
    """The list type TVM's ONNX converters take their inputs in."""
    return _onnx.onnx_input()


def parse_shape_name(name: str, names: dict) -> tvm.tirx.PrimExpr:
    """A named ONNX dimension as TVM's importer reads it: the size variable
    ``names`` holds for it (made and added there the first time), or the
    expression it spells (``"n+1"``)."""
    return _onnx.parse_shape_name(name, names)


class OnnxGraphImporter(_onnx.ONNXGraphImporter):
    """TVM's ONNX graph importer, its hooks and state under public names.

    TVM's ``from_onnx(graph, opset)`` drives the import through methods of
    its own (private) names; each forwards here to the public method a
    subclass overrides, whose default is TVM's behaviour."""

    # The hooks TVM's from_onnx calls, by TVM's names.
    def _check_for_unsupported_ops(self, graph):
        return self.check_for_unsupported_ops(graph)

    def _parse_graph_input(self, graph):
        return self.parse_graph_input(graph)

    def _parse_attr(self, attr_proto):
        return self.parse_attr(attr_proto)

    def _construct_nodes(self, graph):
        return self.construct_nodes(graph)

    def _convert_operator(self, op_name, inputs, attrs, opset):
        return self.convert_operator(op_name, inputs, attrs, opset)

    # Their defaults: TVM's.
    def check_for_unsupported_ops(self, graph):
        """Raises for operators TVM's table lacks."""
        return _onnx.ONNXGraphImporter._check_for_unsupported_ops(self, graph)

    def parse_graph_input(self, graph):
        """Makes the graph's inputs (``input_shapes`` holds the shapes given)."""
        return _onnx.ONNXGraphImporter._parse_graph_input(self, graph)

    def parse_attr(self, attr_proto) -> dict:
        """A node's attributes as a dict."""
        return _onnx.ONNXGraphImporter._parse_attr(self, attr_proto)

    def construct_nodes(self, graph):
        """Converts every node of the graph."""
        return _onnx.ONNXGraphImporter._construct_nodes(self, graph)

    def convert_operator(self, op_name, inputs, attrs, opset):
        """The Relax expression of one operator, by TVM's converter."""
        return _onnx.ONNXGraphImporter._convert_operator(self, op_name, inputs, attrs, opset)

    # TVM's helpers.
    def parse_array(self, tensor_proto):
        """An ONNX tensor (an initializer, a constant) as a tvm Tensor."""
        return self._parse_array(tensor_proto)

    def parse_value_proto(self, value_proto) -> str:
        """The name of a value (a node's, a graph output's)."""
        return self._parse_value_proto(value_proto)

    # TVM's state.
    @property
    def nodes(self) -> dict:
        """ONNX value name -> its Relax value, so far."""
        return self._nodes

    @nodes.setter
    def nodes(self, value: dict) -> None:
        self._nodes = value

    @property
    def params(self) -> dict:
        """Initializer name -> (its Relax var, its value), as TVM's converters take them."""
        return self._params

    @property
    def input_shapes(self) -> dict:
        """Graph input name -> its shape as given (``shape_dict``); what
        ``parse_graph_input`` makes of it once a subclass rewrites it."""
        return self._shape


# --- BlockBuilder ------------------------------------------------------------

def begin_binding_block(bb: relax.BlockBuilder) -> None:
    """Opens a (non-dataflow) binding block: a branch's or a loop body's
    bindings, closed by ``end_block``."""
    bb._begin_binding_block()


def end_block(bb: relax.BlockBuilder) -> relax.BindingBlock:
    """Closes the innermost block ``begin_binding_block`` opened; its bindings."""
    return bb._end_block()


# --- IR ----------------------------------------------------------------------

def update_type(expr: relax.Expr, ty) -> None:
    """Sets ``expr``'s type in place (a new call, a new GlobalVar: a node
    made outside a BlockBuilder has none)."""
    relax.expr._update_type(expr, ty)


def register_op(name: str, description: str) -> None:
    """Registers a new op ``name`` with TVM's op registry (then
    ``tvm.ir.register_op_attr`` gives it its attributes)."""
    tvm.ir._ffi_api.RegisterOp(name, description)


# --- gen_call_tir_inputs -----------------------------------------------------

# The TVM modules that call ``relax.utils.gen_call_tir_inputs`` by a name of
# their own (``from .utils import gen_call_tir_inputs``): call_te, emit_te
# and the legalization of layout_transform.
_GEN_CALL_TIR_INPUTS_CALLERS = ("tvm.relax.utils", "tvm.relax.block_builder",
                                "tvm.relax.transform.legalize_ops.manipulate")


def gen_call_tir_inputs_callers() -> tuple[str, ...]:
    """The modules whose ``gen_call_tir_inputs`` binding TVM's TE-made kernels go through."""
    return _GEN_CALL_TIR_INPUTS_CALLERS


def replace_gen_call_tir_inputs(wrap: Callable) -> Callable[[], None]:
    """Binds ``wrap(TVM's function)`` in place of ``gen_call_tir_inputs`` in
    each caller; returns the function that puts TVM's back (where the
    binding is still the wrapper: one someone replaced since is theirs)."""
    installed = []
    for name in _GEN_CALL_TIR_INPUTS_CALLERS:
        module = importlib.import_module(name)
        original = module.gen_call_tir_inputs
        wrapper = wrap(original)
        module.gen_call_tir_inputs = wrapper
        installed.append((module, original, wrapper))

    def restore() -> None:
        for module, original, wrapper in installed:
            if module.gen_call_tir_inputs is wrapper:
                module.gen_call_tir_inputs = original

    return restore
