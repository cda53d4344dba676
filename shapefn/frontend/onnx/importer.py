"""``shapefn.from_onnx``: ONNX -> Relax, for shapefn.compile.

TVM's Relax ONNX importer does most of the work; shapefn's converters
(``registry.py``, ``ops/``) take over the ops it cannot import with runtime
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

from ...compiler import interrupts, tvm_compat
from ...compiler.codegen.sources import name_after_sources
from ...compiler.kernels import te_params
from ...compiler.passes.placement import key
from ...runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp
from . import ops as _ops  # noqa: F401  (registers every family's converters)
from .checks import DEFAULT_DOMAINS, check_nodes, check_operators, check_shapes, for_checker, node_label
from .functions import expand_functions, expand_preview, expandable, fold_constant_sizes, opset_of
from .loop import convert_loop
from .registry import ONNX_DOMAIN, converter_of, qualified_name, supported_ops, tvm_converts
from .scan import scans_as_loops
from .sequence_inputs import sequences_as_tensors
from .values import const_value, prim_tensor

# How TVM's importer keeps shape values: ``Shape`` outputs as shapes
# (``relax.ShapeExpr``, ``R.Shape``), and one size (``Gather(Shape(x), 0)``)
# and integer arithmetic on sizes as scalars (``relax.prim_value``), so that
# sizes known at import time stay known. A converter receives them only if
# it takes them (below); anything else gets int64 tensors instead
# (``_converter_inputs``), computed on the host by shapefn's placement.
#
# TVM's converters that take shapes (the list TVM's importer checks).
_TVM_TAKES_SHAPES = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand", "Concat",
                     "Equal", "Where", "Cast", "CastLike", "Squeeze"}
# TVM's converters that take integer scalars: arithmetic on sizes folds
# them with constants and other scalars (not with tensors computed at run
# time); the others read sizes and bounds from them (``Unsqueeze`` makes
# a scalar a 1-D shape).
_TVM_FOLDS_SCALARS = {"Add", "Sub", "Mul", "Div", "Mod", "Neg", "Identity"}
_TVM_TAKES_SCALARS = {"Unsqueeze", "Slice", "Range"}

# Ops the importer converts itself rather than through a converter.
_IMPORTER_OPS = {"If", "Loop", "Constant", "Scan"}  # (Scan: as a Loop, scan.py)
# Ops whose one output is a sequence or an optional, which TVM's importer
# represents as a Relax tuple: bound whole. Every other converter result of
# tuple type holds the node's outputs, possibly more of them than the node
# names (TVM's BatchNormalization and LayerNormalization return their
# optional statistics too).
_SEQUENCE_OPS = {"Optional", "OptionalGetElement", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                 "SequenceInsert", "ConcatFromSequence", "SplitToSequence"}


class _Importer(tvm_compat.OnnxGraphImporter):
    _fresh = 0

    def check_for_unsupported_ops(self, graph):
        pass  # from_onnx checked the whole model (TVM's check misses shapefn's converters)

    def parse_graph_input(self, graph):
        """Input shapes from ``shape_dict`` or the model, each dimension a
        literal, a size variable shared by name, or a fresh size variable
        where the size is unknown: unnamed, ``?``, or negative (as
        paddle2onnx writes dynamic sizes). TVM's importer would give every
        unnamed dimension one variable and keep a negative size as it is."""
        names: dict[str, tvm.tirx.Var] = {}
        initialized = {init.name for init in graph.initializer}
        for value in graph.input:
            if value.name in self.input_shapes:
                self.input_shapes[value.name] = [self._input_dim(value.name, axis, d, names)
                                                 for axis, d in enumerate(self.input_shapes[value.name])]
            elif value.name not in initialized and value.type.tensor_type.HasField("shape"):
                self.input_shapes[value.name] = [self._input_dim(value.name, axis, d, names)
                                                 for axis, d in enumerate(value.type.tensor_type.shape.dim)]
        super().parse_graph_input(graph)

    @staticmethod
    def _input_dim(input_name, axis, dim, names):
        if isinstance(dim, onnx.TensorShapeProto.Dimension):
            if dim.HasField("dim_value"):
                dim = dim.dim_value
            else:
                dim = dim.dim_param or None
        if isinstance(dim, str) and dim != "?":
            return tvm_compat.parse_shape_name(dim, names)
        if dim is None or isinstance(dim, str) or dim < 0:
            return tvm.tirx.Var(f"{input_name}_dim{axis}", "int64")
        return int(dim)

    def parse_attr(self, attr_proto):
        """Attributes as TVM's importer reads them, except that an empty list
        counts as absent (as onnxruntime reads one: ``axes=[]`` of a
        reduction reduces every axis) where TVM's refuses it."""
        return super().parse_attr([a for a in attr_proto if not _empty_list(a)])

    def construct_nodes(self, graph):
        for node in graph.node:
            self.construct_node(node)
        for output in graph.output:
            self.nodes[output.name] = self.as_tensor(self.nodes[output.name])

    def as_tensor(self, value):
        """A graph or branch result as a tensor: ONNX values are tensors, but
        TVM's importer keeps shape values as shapes or scalar PrimExprs."""
        ty = getattr(value, "ty", None)
        if isinstance(ty, relax.ShapeType):
            return self.bb.emit(relax.op.shape_to_tensor(value))
        if isinstance(ty, tvm.ir.PrimType):
            return self.bb.emit(prim_tensor(self.bb, value))
        return value

    def construct_node(self, node):
        self._convert_node(node)
        # What the node binds is named after it (``compiler.sources``): errors
        # at run time name the node.
        sources = self.__dict__.setdefault("sources", {})
        for name in node.output:
            value = self.nodes.get(name) if name else None
            if isinstance(value, relax.Call):  # (bound where first used, otherwise)
                value = self.nodes[name] = self.bb.emit(value)
            if isinstance(value, relax.Var) and key(value) not in sources:
                sources[key(value)] = (name, _described(node))

    def _convert_node(self, node):
        op_name = node.op_type
        attr = self.parse_attr(node.attribute)
        for flag in ("keepdims", "largest", "sorted"):  # (as onnxruntime reads them: only 1 is true)
            if flag in attr:
                attr[flag] = int(attr[flag] == 1)
        inputs = tvm_compat.onnx_input()
        for name in node.input:
            if name != "":
                # Cast once per value, so every use sees the same sizes.
                self.nodes[name] = self.with_shape(self.nodes[name], name)
            inputs.append(self.nodes[name] if name != "" else None)
        attr["tvm_custom"] = {"name": self.parse_value_proto(node), "num_outputs": len(node.output)}
        outputs = list(node.output)
        _check_types(node, inputs, self.opset)
        _check_windows(node, inputs)
        _check_axis(node, inputs, attr)
        if op_name == "If":
            taken = const_value(self, inputs[0])
            if taken is not None and taken.size == 1:
                # (a condition known at import, as ONNX's function bodies test ranks and attributes: only the
                # branch taken is imported, and its sizes stay known)
                results = self._inlined(attr["then_branch" if taken.item() else "else_branch"])
                self.nodes.update((name, value) for name, value in zip(outputs, results) if name)
                return
            cond = inputs[0]
            if isinstance(getattr(cond, "ty", None), relax.TensorType) and cond.ty.ndim == 1:
                cond = self.bb.emit(relax.op.reshape(cond, []))
            then_branch = self._branch(attr["then_branch"])
            else_branch = self._branch(attr["else_branch"])
            result = self.bb.emit(relax.If(cond, then_branch, else_branch))
            self._bind_outputs(outputs, result, split=len(outputs) > 1)
            return
        if op_name == "Loop":
            self.nodes.update(zip(outputs, convert_loop(self, node, inputs, attr)))
            return
        try:
            result = self.convert_operator(op_name, inputs, attr, self.opset, node.domain)
        except (UnsupportedOnnxOp, InvalidOnnxModel):
            raise
        except Exception as err:
            # TVM's ops refuse inputs the node's types make inconsistent
            # (comparing a float with an int): the model is invalid if
            # ONNX's type inference says so; else shapefn cannot take it.
            invalid = self._type_error()
            if invalid is not None:
                raise InvalidOnnxModel(f"{_described(node)} cannot be imported: the ONNX model fails ONNX's type "
                                       f"inference: {invalid}") from err
            raise UnsupportedOnnxOp(f"{_described(node)} cannot be imported: {_first_line(err)}",
                                    {op_name: [node_label(node)]}) from err
        if op_name == "Squeeze" and not _static_squeeze(node, inputs, attr):
            raise ValueError(f"{_described(node)}: Squeeze without axes needs every size of its input known "
                             f"(the input is {inputs[0].ty}); give the axes")
        self._bind_outputs(outputs, result, split=op_name not in _SEQUENCE_OPS)

    def _type_error(self) -> str | None:
        """What ONNX's shape inference with type checks finds wrong with the
        model (None if nothing), computed once."""
        if not hasattr(self, "_type_check"):
            try:
                onnx.shape_inference.infer_shapes(for_checker(self._model, shape_unshaped=False), check_type=True,
                                                  strict_mode=True)
                self._type_check = None
            except onnx.shape_inference.InferenceError as err:
                self._type_check = _first_line(err)
        return self._type_check

    def _branch(self, graph) -> relax.SeqExpr:
        """A subgraph as a branch body with its own bindings: only the branch
        taken runs. Outer values are visible; the branch's are not after it."""
        tvm_compat.begin_binding_block(self.bb)
        try:
            results = [self.as_tensor(r) for r in self._inlined(graph)]
            if not all(isinstance(r, relax.Expr) for r in results):
                raise UnsupportedOnnxOp(f"If's branch '{graph.name}' returns a sequence or an optional value; "
                                        "shapefn's If returns tensors only")
            result = results[0] if len(results) == 1 else relax.Tuple(results)
            result = self.bb.emit(result) if not isinstance(result, relax.Var) else result
        finally:
            block = tvm_compat.end_block(self.bb)
        return relax.SeqExpr([block], result)

    def _inlined(self, graph, given: dict | None = None) -> list:
        """A subgraph's results, its nodes imported where the importer is,
        its inputs bound to ``given`` (name -> value): outer values are
        visible, the subgraph's are not after it (If's branches, SequenceMap's
        and unrolled Loops' bodies)."""
        outer = self.nodes  # (restored as it is: callers bind the node's outputs into it)
        self.nodes = {**outer, **(given or {})}
        try:
            for init in graph.initializer:
                self.nodes[init.name] = relax.const(self.parse_array(init))
            for node in graph.node:
                self.construct_node(node)
            return [self.nodes[o.name] for o in graph.output]
        finally:
            self.nodes = outer

    def with_shape(self, value, name: str | None = None):
        """A tensor whose rank is known but shape is not, cast to fresh size
        variables (read from the tensor at run time), or to the sizes ONNX's
        shape inference knows for value ``name``, so TVM's converters and
        legalizations see a shape."""
        ty = getattr(value, "ty", None)
        if not isinstance(ty, relax.TensorType) or ty.shape is not None or ty.ndim < 0:
            return value
        known = self._inferred_sizes().get(name, ())
        known = known if len(known) == ty.ndim else (None,) * ty.ndim
        dims = [tvm.tirx.IntImm("int64", size) if size is not None else tvm.tirx.Var(f"d{self._fresh}_{i}", "int64")
                for i, size in enumerate(known)]
        self._fresh += 1
        if not isinstance(value, relax.Var):
            value = self.bb.emit(value)
        # The sizes are bound from the shape as well: TVM's FuseTIR drops a
        # tensor match_cast once the value's shape becomes known (after
        # shapefn lowers the op), and the sizes must outlive it.
        self.bb.match_cast(self.bb.emit(relax.op.shape_of(value)), relax.ShapeType(dims))
        return self.bb.match_cast(value, relax.TensorType(dims, ty.dtype))

    def _inferred_sizes(self) -> dict[str, tuple]:
        """Value name -> its sizes where ONNX's shape inference knows them
        as numbers (None for the others), for the values of the main graph."""
        if not hasattr(self, "_sizes"):
            self._sizes = {}
            inferred = onnx.shape_inference.infer_shapes(for_checker(self._model, shape_unshaped=False))
            for value in inferred.graph.value_info:
                if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
                    self._sizes[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                                    for d in value.type.tensor_type.shape.dim)
        return self._sizes

    def _bind_outputs(self, outputs, result, split: bool):
        """Binds a node's outputs: with ``split``, a tuple result holds the
        outputs (its first fields; ONNX leaves unused ones unnamed), so no
        tuple reaches a converter that expects a tensor."""
        if not split or not isinstance(getattr(result, "ty", None), relax.TupleType):
            if len(outputs) != 1:
                raise ValueError(f"{len(outputs)} outputs expected, the converter returned one value")
            self.nodes[outputs[0]] = result
            return
        count = len(result.ty.fields)
        if len(outputs) > count:
            raise ValueError(f"{len(outputs)} outputs expected, the converter returned {count}")
        for i, name in enumerate(outputs):
            if name:
                self.nodes[name] = (result.fields[i] if isinstance(result, relax.Tuple)
                                     else self.bb.emit(relax.TupleGetItem(result, i)))

    def _dimension_vars(self) -> set:
        """The variables in the shapes of the values converted so far: sizes,
        not negative (an integer scalar carried through a Loop may be)."""
        found = set()
        for value in self.nodes.values():
            ty = getattr(value, "ty", None)
            if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
                dims = ty.shape.values
            elif isinstance(ty, relax.ShapeType) and ty.values is not None:
                dims = ty.values
            else:
                continue
            for d in dims:
                found.update(tvm.tirx.analysis.undefined_vars(d))
        return found

    def convert_operator(self, op_name, inputs, attrs, opset, domain=ONNX_DOMAIN):
        """A node's Relax expression: shapefn's converter of ``op_name`` in
        ``domain``, else TVM's (which TVM's table finds by name alone)."""
        converter = converter_of(domain, op_name)
        if converter is not None:
            scalars = "keep" if converter.takes_scalars else "tensor"
            result = converter(self, _converter_inputs(self.bb, inputs, True, scalars), attrs, opset)
            if result is not NotImplemented:
                return self.bb.normalize(result) if isinstance(result, relax.Expr) else result
        if not tvm_converts(domain, op_name):
            raise UnsupportedOnnxOp(f"ONNX operator not supported: {qualified_name(domain, op_name)}")
        scalars = "keep" if op_name in _TVM_TAKES_SCALARS else "fold" if op_name in _TVM_FOLDS_SCALARS else "tensor"
        sizes = _size_arithmetic(op_name, inputs, self._dimension_vars)
        if sizes is NotImplemented:
            scalars = "tensor"
        elif sizes is not None:
            return sizes
        inputs = _converter_inputs(self.bb, inputs, op_name in _TVM_TAKES_SHAPES, scalars)
        return super().convert_operator(op_name, inputs, attrs, opset)


_LIST_FIELDS = {onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.FLOATS: "floats",
                onnx.AttributeProto.STRINGS: "strings", onnx.AttributeProto.TENSORS: "tensors",
                onnx.AttributeProto.GRAPHS: "graphs"}


def _first_line(err: Exception) -> str:
    """An error's message without what follows its first line (TVM's
    diagnostics print the IR after it)."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(err).__name__


def _empty_list(attr) -> bool:
    return attr.type in _LIST_FIELDS and not len(getattr(attr, _LIST_FIELDS[attr.type]))


def _described(node) -> str:
    """A node as an error names it: its name, else its first output's."""
    if node.name:
        return f"ONNX node '{node.name}' ({node.op_type})"
    return f"ONNX node {node.op_type} computing '{node.output[0] if node.output else ''}'"


# relax dtype -> the ONNX type name the op schemas constrain
_ONNX_TYPE = {"float32": "tensor(float)", "float64": "tensor(double)", "float16": "tensor(float16)",
              "bfloat16": "tensor(bfloat16)", "int64": "tensor(int64)", "int32": "tensor(int32)",
              "int16": "tensor(int16)", "int8": "tensor(int8)", "uint64": "tensor(uint64)",
              "uint32": "tensor(uint32)", "uint16": "tensor(uint16)", "uint8": "tensor(uint8)",
              "bool": "tensor(bool)"}


def _check_types(node, inputs, opset) -> None:
    """Each input's element type against the types the op's schema allows
    for it (ONNX's ``T``, ``T1``, ... constraints), so that a node TVM would
    legalize into a kernel that cannot compile (a float ``Xor``) is refused
    here, naming it. Inputs of unknown type and ops without a schema pass."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = list(schema.inputs)
    bound: dict[str, tuple[int, str]] = {}  # type parameter -> the first input of it and its type
    for i, value in enumerate(inputs):
        if value is None or not formals:
            continue
        formal = formals[min(i, len(formals) - 1)]  # (variadic: the last formal repeats)
        dtype = getattr(getattr(value, "ty", None), "dtype", None)
        onnx_type = _ONNX_TYPE.get(str(dtype)) if dtype is not None else None
        if onnx_type is None or formal.type_str not in allowed:
            continue
        if onnx_type not in allowed[formal.type_str]:
            raise InvalidOnnxModel(f"{_described(node)}: input {i} ('{node.input[i]}') is {onnx_type}, which "
                                   f"{node.op_type} does not take ({', '.join(sorted(allowed[formal.type_str]))})")
        if not formal.is_homogeneous:  # (a variadic of several types: a Loop's carried values)
            continue
        first, first_type = bound.setdefault(formal.type_str, (i, onnx_type))
        if first_type != onnx_type:
            raise InvalidOnnxModel(f"{_described(node)}: inputs {first} ('{node.input[first]}') and {i} "
                                   f"('{node.input[i]}') must have one type, got {first_type} and {onnx_type}")


# Ops sliding a window over the spatial axes (2, 3, ...) of their first input.
_WINDOWED = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
             "GlobalLpPool", "MaxRoiPool", "RoiAlign", "ConvInteger", "QLinearConv", "DeformConv"}


def _check_windows(node, inputs) -> None:
    """A window op over a spatial axis of literal size 0 is refused, naming
    the node: TVM's kernels divide by it or compute negative sizes while
    compiling (naming nothing)."""
    if node.op_type not in _WINDOWED or not inputs or inputs[0] is None:
        return
    shape = getattr(getattr(inputs[0], "ty", None), "shape", None)
    if shape is None:
        return
    for axis, size in enumerate(shape.values[2:], 2):
        if isinstance(size, tvm.tirx.IntImm) and size.value == 0:
            raise ValueError(f"{_described(node)}: input 0 ('{node.input[0]}') has size 0 along spatial axis "
                             f"{axis}, where {node.op_type} needs at least one element")


# Ops whose ``axis`` attribute names an axis of their first input, in
# [-rank, rank) (onnxruntime refuses any other; TVM's converters take some
# and fail later, naming nothing: found by fuzzing).
_AXIS_OF_INPUT = {"Concat", "Gather", "GatherElements", "Split", "Softmax", "LogSoftmax", "Hardmax", "TopK",
                  "ArgMax", "ArgMin", "ScatterElements", "Compress", "LpNormalization"}


def _check_axis(node, inputs, attr) -> None:
    """An ``axis`` out of range for the first input's rank is refused, naming the node."""
    if node.op_type not in _AXIS_OF_INPUT or "axis" not in attr or not inputs or inputs[0] is None:
        return
    ty = getattr(inputs[0], "ty", None)
    rank = 1 if isinstance(ty, relax.ShapeType) else getattr(ty, "ndim", -1) if isinstance(ty, relax.TensorType) \
        else 0 if isinstance(ty, tvm.ir.PrimType) else -1
    axis = attr["axis"]
    if rank >= 0 and not -max(rank, 1) <= axis < max(rank, 1):
        raise InvalidOnnxModel(f"{_described(node)}: axis {axis} is out of range for input 0 "
                               f"('{node.input[0]}') of rank {rank}")


def _static_squeeze(node, inputs, attr) -> bool:
    """Whether a Squeeze is importable: it has axes, or its input's sizes
    are all known (which ones are 1 decides the output's rank)."""
    if attr.get("axes") is not None or (len(inputs) > 1 and inputs[1] is not None):
        return True
    ty = getattr(inputs[0], "ty", None)
    if isinstance(ty, relax.ShapeType):  # (a shape value is a vector of ndim sizes)
        return ty.ndim >= 0
    shape = getattr(ty, "shape", None)
    return shape is not None and all(isinstance(d, tvm.tirx.IntImm) for d in shape.values)


def _size_arithmetic(op_name, inputs, dimension_vars):
    """Integer arithmetic of a size (an int64 scalar TVM keeps as a
    PrimExpr, e.g. ``Gather(Shape(x), i)``) with another size or an int64
    constant of one element, as a size (a 1-D shape beside a constant of
    shape [1], as ONNX broadcasts); None if the node is not that. TVM's
    converters fold it too, but give a size that is a call (a ceil-mode
    pooling size, an ``if_then_else``) to a Relax op, which cannot return a
    size, divide with ``truncdiv`` and lose the constant's rank. ONNX's Div
    truncates and Mod takes the divisor's sign (the dividend's with
    ``fmod``): as floordiv / floormod where the dividend is not negative
    and the divisor positive, given that ``dimension_vars()`` are not
    negative, which shapefn's VM computes; otherwise ``NotImplemented``:
    computed on tensors."""
    if op_name not in ("Add", "Sub", "Mul", "Div", "Mod") or len(inputs) != 2:
        return None
    sizes = [_int64_size(v) for v in inputs]
    if any(s is None for s in sizes) or not any(isinstance(v.ty, tvm.ir.PrimType) for v in inputs):
        return None
    a, b = sizes
    if op_name in ("Div", "Mod"):
        analyzer = tvm.sym.Analyzer()
        dims = dimension_vars()
        for var in tvm.tirx.analysis.undefined_vars(a) + tvm.tirx.analysis.undefined_vars(b):
            if var in dims:
                analyzer.update(var, tvm.sym.ConstIntBound(0, tvm.sym.ConstIntBound.POS_INF), override=True)
        if not (analyzer.can_prove(a >= 0) and analyzer.can_prove(b > 0)):
            return NotImplemented
        result = tvm.tirx.floordiv(a, b) if op_name == "Div" else tvm.tirx.floormod(a, b)
    else:
        result = {"Add": a + b, "Sub": a - b, "Mul": a * b}[op_name]
    result = tvm.sym.Analyzer().simplify(result)
    if any(isinstance(v.ty, relax.TensorType) and v.ty.ndim == 1 for v in inputs):
        return relax.ShapeExpr([result])
    return relax.prim_value(result)


def _int64_size(value):
    """``value`` as an int64 expression if it is an int64 scalar (a size)
    or an int64 constant of one element; else None."""
    ty = getattr(value, "ty", None)
    if isinstance(ty, tvm.ir.PrimType):
        return value if str(ty.dtype) == "int64" else None
    if isinstance(value, tvm.ir.GenericConst) and isinstance(ty, relax.TensorType) and ty.ndim in (0, 1) \
            and str(ty.dtype) == "int64" and value.value.numpy().size == 1:
        return tvm.tirx.IntImm("int64", int(value.value.numpy().reshape(())))
    return None


def _converter_inputs(bb: relax.BlockBuilder, inputs, takes_shapes: bool, scalars: str):
    """A node's inputs in the form its converter takes: shapes stay shapes
    for a converter that ``takes_shapes``; integer scalars stay scalars for
    ``scalars="keep"``, and for ``"fold"`` unless they meet a tensor
    computed at run time (arithmetic folds them with constants only).
    Everything else becomes a tensor, as ONNX defines it: a shape an int64
    vector, a scalar a 0-d tensor of its dtype."""
    if scalars == "fold" and any(isinstance(getattr(v, "ty", None), relax.TensorType)
                                 and not isinstance(v, tvm.ir.GenericConst) for v in inputs if v is not None):
        scalars = "tensor"
    out = tvm_compat.onnx_input()
    for value in inputs:
        ty = getattr(value, "ty", None)
        if isinstance(ty, relax.ShapeType) and not takes_shapes:
            value = bb.normalize(relax.op.shape_to_tensor(value))
        elif isinstance(ty, tvm.ir.PrimType) and (scalars == "tensor" or not str(ty.dtype).startswith(("int", "uint"))):
            value = prim_tensor(bb, value)
        out.append(value)
    return out


def _converted() -> set[str]:
    """The operators of ONNX's domain shapefn's importer converts (TVM's
    converters, shapefn's and its own); another domain's are the registry's."""
    return supported_ops(ONNX_DOMAIN) | _IMPORTER_OPS


# (TVM's converters make kernels from TE: their sizes in a deterministic order)
@te_params.in_order()
def from_onnx(model, shape_dict: dict | None = None, sequence_lengths: dict | None = None) -> tvm.IRModule:
    """Imports an ONNX model (a ``ModelProto`` or a path) as a Relax module
    for ``shapefn.compile``. Input shapes come from the model (symbolic where
    it names them) unless ``shape_dict`` gives them. A graph input that is a
    sequence of tensors is imported for sequences of the length
    ``sequence_lengths`` gives it: the compiled function then takes that
    many tensors in its place (``sequence_inputs.py``). Raises, before
    converting anything, ``UnsupportedOnnxOp`` listing every operator that
    cannot be imported and the nodes using it, and ``InvalidOnnxModel`` for a
    malformed model (``onnx.checker``, ONNX's shape inference as onnxruntime
    runs it) or a file that is not one. Ctrl-C raises ``KeyboardInterrupt``
    (``compiler/interrupts.py``)."""
    with interrupts.kept():
        return _imported(model, shape_dict, sequence_lengths)


def _imported(model, shape_dict: dict | None, sequence_lengths: dict | None) -> tvm.IRModule:
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            model = onnx.load(path)
        except DecodeError as err:
            raise InvalidOnnxModel(f"'{path}' is not an ONNX model: {err}") from None
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"from_onnx takes an onnx.ModelProto or a path, got {type(model).__name__}")
    # Before anything is converted: operators shapefn cannot import (every
    # one, subgraphs included), nodes as written, then what ONNX infers.
    converted = _converted()
    model = sequences_as_tensors(expand_preview(model), sequence_lengths or {})
    defined = expandable(model, converted, DEFAULT_DOMAINS)
    check_operators(model, converted | defined)
    check_nodes(model)
    if defined:
        model = expand_functions(model, converted, DEFAULT_DOMAINS)
        check_operators(model, converted, f" in ONNX's definition of {', '.join(sorted(defined))}")
    model = fold_constant_sizes(scans_as_loops(model, opset_of(model, DEFAULT_DOMAINS)))
    check_shapes(model)
    opset = opset_of(model, DEFAULT_DOMAINS)
    importer = _Importer(shape_dict, "float32", keep_params_in_input=False, sanitize=True)
    importer._model = model
    mod = importer.from_onnx(model.graph, opset)
    return name_after_sources(mod, getattr(importer, "sources", {}))
