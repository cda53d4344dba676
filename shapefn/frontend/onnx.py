"""``shapefn.from_onnx``: ONNX -> Relax, for shapefn.compile.

TVM's Relax ONNX importer does most of the work; shapefn's converters
(``onnx_converters.py``) take over the ops it cannot import with runtime
values — TopK with a runtime K, Reshape / Expand / ConstantOfShape / Tile /
Range / Resize / Pad from runtime tensors, NonMaxSuppression with runtime
limits, Equal / Min / Max on sizes known only at run time — emitting Relax
that shapefn.compile lowers through the shape-function registry. Values TVM
keeps as shapes (``Shape`` outputs) are turned into tensors for ops that need
tensors and for graph outputs; shapefn's placement keeps that integer work on
the host.
"""
from __future__ import annotations

import os

import onnx
import tvm
from google.protobuf.message import DecodeError
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as tvm_onnx

from ..errors import InvalidOnnxModel, UnsupportedOnnxOp
from . import onnx_converters
from .onnx_loop import convert_loop

# Ops TVM's converters accept ShapeExpr inputs for (from its importer).
_SHAPE_COMPATIBLE = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand", "Concat",
                     "Equal", "Where", "Cast", "CastLike", "Squeeze"}


# Ops the importer converts itself rather than through a converter.
_IMPORTER_OPS = {"If", "Loop", "Constant"}
_DEFAULT_DOMAINS = ("", "ai.onnx")


class _Importer(tvm_onnx.ONNXGraphImporter):
    _fresh = 0

    def _check_for_unsupported_ops(self, graph):
        pass  # from_onnx checked the whole model (TVM's check misses shapefn's converters)

    def _construct_nodes(self, graph):
        for node in graph.node:
            self._construct_node(node)
        for output in graph.output:
            self._nodes[output.name] = self._as_tensor(self._nodes[output.name])

    def _as_tensor(self, value):
        """A graph or branch result as a tensor: ONNX values are tensors, but
        TVM's importer keeps shape values as shapes or scalar PrimExprs."""
        ty = getattr(value, "ty", None)
        if isinstance(ty, relax.ShapeType):
            return self.bb.emit(relax.op.shape_to_tensor(value))
        if isinstance(ty, tvm.ir.PrimType):
            return self.bb.emit(_prim_tensor(self.bb, value))
        return value

    def _construct_node(self, node):
        op_name = node.op_type
        attr = self._parse_attr(node.attribute)
        inputs = tvm_onnx.onnx_input()
        for name in node.input:
            if name != "":
                # Cast once per value, so every use sees the same sizes.
                self._nodes[name] = self._with_shape(self._nodes[name])
            inputs.append(self._nodes[name] if name != "" else None)
        attr["tvm_custom"] = {"name": self._parse_value_proto(node), "num_outputs": len(node.output)}
        outputs = list(node.output)
        if op_name == "If":
            cond = inputs[0]
            if isinstance(getattr(cond, "ty", None), relax.TensorType) and cond.ty.ndim == 1:
                cond = self.bb.emit(relax.op.reshape(cond, []))
            then_branch = self._branch(attr["then_branch"])
            else_branch = self._branch(attr["else_branch"])
            self._bind_outputs(outputs, self.bb.emit(relax.If(cond, then_branch, else_branch)))
            return
        if op_name == "Loop":
            self._nodes.update(zip(outputs, convert_loop(self, node, inputs, attr)))
            return
        if op_name not in _SHAPE_COMPATIBLE and op_name not in onnx_converters.CONVERTERS:
            inputs = _coerce(self.bb, inputs)
        try:
            result = self._convert_operator(op_name, inputs, attr, self.opset)
        except UnsupportedOnnxOp:
            raise
        except Exception as err:
            raise RuntimeError(f"converting ONNX node '{node.name}' ({op_name}) failed: {err}") from err
        self._bind_outputs(outputs, result)

    def _branch(self, graph) -> relax.SeqExpr:
        """A subgraph as a branch body with its own bindings: only the branch
        taken runs. Outer values are visible; the branch's are not after it."""
        outer = dict(self._nodes)
        self.bb._begin_binding_block()
        try:
            for init in graph.initializer:
                self._nodes[init.name] = relax.const(self._parse_array(init))
            for node in graph.node:
                self._construct_node(node)
            results = [self._as_tensor(self._nodes[o.name]) for o in graph.output]
            result = results[0] if len(results) == 1 else relax.Tuple(results)
            result = self.bb.emit(result) if not isinstance(result, relax.Var) else result
        finally:
            block = self.bb._end_block()
            self._nodes = outer
        return relax.SeqExpr([block], result)

    def _with_shape(self, value):
        """A tensor whose rank is known but shape is not, cast to fresh size
        variables (read from the tensor at run time), so TVM's converters and
        legalizations see a shape."""
        ty = getattr(value, "ty", None)
        if not isinstance(ty, relax.TensorType) or ty.shape is not None or ty.ndim < 0:
            return value
        dims = [tvm.tirx.Var(f"d{self._fresh}_{i}", "int64") for i in range(ty.ndim)]
        self._fresh += 1
        if not isinstance(value, relax.Var):
            value = self.bb.emit(value)
        # The sizes are bound from the shape as well: TVM's FuseTIR drops a
        # tensor match_cast once the value's shape becomes known (after
        # shapefn lowers the op), and the sizes must outlive it.
        self.bb.match_cast(self.bb.emit(relax.op.shape_of(value)), relax.ShapeType(dims))
        return self.bb.match_cast(value, relax.TensorType(dims, ty.dtype))

    def _bind_outputs(self, outputs, result):
        if len(outputs) == 1:
            self._nodes[outputs[0]] = result
            return
        if not isinstance(result, relax.Tuple):
            result = relax.Tuple([self.bb.emit(relax.TupleGetItem(result, i)) for i in range(len(outputs))])
        for name, value in zip(outputs, result.fields):
            self._nodes[name] = value

    def _convert_operator(self, op_name, inputs, attrs, opset):
        converter = onnx_converters.CONVERTERS.get(op_name)
        if converter is not None:
            result = converter(self, inputs, attrs, opset)
            if result is not NotImplemented:
                return self.bb.normalize(result) if isinstance(result, relax.Expr) else result
            if op_name not in _SHAPE_COMPATIBLE:
                inputs = _coerce(self.bb, inputs)
        if op_name not in tvm_onnx._get_convert_map():
            raise UnsupportedOnnxOp(f"ONNX operator not supported: {op_name}")
        return super()._convert_operator(op_name, inputs, attrs, opset)


def _coerce(bb: relax.BlockBuilder, inputs):
    """Inputs for a converter that wants tensors: shape values become int64
    tensors (computed on the host), and so do scalar shape values (TVM keeps
    ``Gather(Shape(x), i)`` as a PrimExpr) when they meet tensors."""
    has_tensor = any(isinstance(getattr(i, "ty", None), relax.TensorType) for i in inputs if i is not None)
    out = tvm_onnx.onnx_input()
    for value in inputs:
        ty = getattr(value, "ty", None)
        if isinstance(ty, relax.ShapeType):
            value = bb.normalize(relax.op.shape_to_tensor(value))
        elif has_tensor and isinstance(ty, tvm.ir.PrimType):
            value = _prim_tensor(bb, value)
        out.append(value)
    return out


_PRIM_BINARY = {"Add": relax.op.add, "Sub": relax.op.subtract, "Mul": relax.op.multiply,
                "Div": relax.op.divide, "Min": relax.op.minimum, "Max": relax.op.maximum}


def _prim_tensor(bb: relax.BlockBuilder, value):
    """A scalar PrimExpr (TVM folds shape arithmetic into these) as a 0-d
    tensor of its dtype, computed with Relax ops (on the host, by placement)."""
    dtype = str(value.ty.dtype)
    if isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return relax.const(value.value, dtype)
    if dtype == "int64":
        vector = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr([value])))
        return bb.normalize(relax.op.reshape(vector, []))
    if isinstance(value, tvm.tirx.Cast):
        return bb.normalize(relax.op.astype(_prim_tensor(bb, value.value), dtype))
    op = _PRIM_BINARY.get(type(value).__name__)
    if op is None:
        raise NotImplementedError(f"the scalar expression {value} cannot become a tensor")
    return bb.normalize(op(_prim_tensor(bb, value.a), _prim_tensor(bb, value.b)))


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _node_label(node) -> str:
    if node.name:
        return repr(node.name)
    return f"(unnamed, output {node.output[0]!r})" if node.output else "(unnamed)"


def _check_model(model: onnx.ModelProto) -> None:
    """Rejects, before anything is converted, a model with operators that
    cannot be imported (``UnsupportedOnnxOp`` listing every one, subgraphs
    included, with its nodes) and a model ``onnx.checker`` finds malformed
    (``InvalidOnnxModel``)."""
    supported = set(tvm_onnx._get_convert_map()) | set(onnx_converters.CONVERTERS) | _IMPORTER_OPS
    unsupported: dict[str, list[str]] = {}
    for node in _all_nodes(model.graph):
        if node.domain in _DEFAULT_DOMAINS and node.op_type in supported:
            continue
        op = node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        unsupported.setdefault(op, []).append(_node_label(node))
    if unsupported:
        listing = "; ".join(f"{op} (node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)})"
                            for op, nodes in sorted(unsupported.items()))
        raise UnsupportedOnnxOp(f"ONNX operators not supported: {listing}", unsupported)
    try:
        onnx.checker.check_model(_with_io_shapes(model))
    except onnx.checker.ValidationError as err:
        raise InvalidOnnxModel(f"the ONNX model is malformed: {err}") from None


def _with_io_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for onnx.checker, which requires a shape on every graph
    input and output: TVM's importer (and so shapefn) takes ones of unknown
    rank, so those get an empty shape, on a copy, that nothing reads."""
    def unshaped(values):
        return [v for v in values if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]

    if not unshaped([*model.graph.input, *model.graph.output]):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in unshaped([*copy.graph.input, *copy.graph.output]):
        value.type.tensor_type.shape.SetInParent()
    return copy


def from_onnx(model, shape_dict: dict | None = None) -> tvm.IRModule:
    """Imports an ONNX model (a ``ModelProto`` or a path) as a Relax module
    for ``shapefn.compile``. Input shapes come from the model (symbolic where
    it names them) unless ``shape_dict`` gives them. Raises, before
    converting anything, ``UnsupportedOnnxOp`` listing every operator that
    cannot be imported and the nodes using it, and ``InvalidOnnxModel`` for a
    malformed model or a file that is not one."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            model = onnx.load(path)
        except DecodeError as err:
            raise InvalidOnnxModel(f"'{path}' is not an ONNX model: {err}") from None
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"from_onnx takes an onnx.ModelProto or a path, got {type(model).__name__}")
    _check_model(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    importer = _Importer(shape_dict, "float32", keep_params_in_input=False, sanitize=True)
    return importer.from_onnx(model.graph, opset)
