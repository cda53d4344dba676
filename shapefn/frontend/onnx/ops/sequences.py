"""shapefn's ONNX converters for sequences of a length known when the model
is imported (Relax tuples): ONNX's positions, negative ones included, and
sequences bound to variables (a graph input, an earlier node's result),
which TVM's converters take only as tuple expressions; and Split into
parts whose sizes are given at run time (a tuple of a fixed length too)."""
from __future__ import annotations

import numpy as np
from tvm import relax, tirx

from ....compiler.shape_calls import emit_shape
from ..registry import converter
from ..values import absent, as_tensor, const_value, ndim_of, static_length


def _items(bb: relax.BlockBuilder, sequence) -> list:
    """The tensors of a sequence (a tuple expression or a tuple variable)."""
    if isinstance(sequence, relax.Tuple):
        return list(sequence.fields)
    if not isinstance(getattr(sequence, "ty", None), relax.TupleType):
        raise ValueError(f"expected a sequence, got {getattr(sequence, 'ty', sequence)}")
    return [bb.emit(relax.TupleGetItem(sequence, i)) for i in range(len(sequence.ty.fields))]


def _position(importer, inputs, index: int, default: int, length: int, inclusive: bool) -> int:
    """The constant position input ``index`` (``default`` when absent),
    negative ones counted from the back, checked against ONNX's range:
    ``[-length, length - 1]``, or ``[-length, length]`` with ``inclusive``."""
    if len(inputs) <= index or inputs[index] is None:
        return default
    value = const_value(importer, inputs[index])
    if value is None:
        raise ValueError("a position given at run time is not supported (sequences are tuples of a length fixed "
                         "when the model is imported)")
    position = int(np.asarray(value).reshape(-1)[0])
    upper = length if inclusive else length - 1
    if not -length <= position <= upper:
        raise ValueError(f"position {position} is out of range for a sequence of length {length}")
    return position + length if position < 0 else position


@converter("SequenceAt")
def sequence_at(importer, inputs, attrs, opset):
    items = _items(importer.bb, inputs[0])
    return items[_position(importer, inputs, 1, 0, len(items), inclusive=False)]


@converter("SequenceErase")
def sequence_erase(importer, inputs, attrs, opset):
    items = _items(importer.bb, inputs[0])
    position = _position(importer, inputs, 1, len(items) - 1, len(items), inclusive=False)
    return relax.Tuple(items[:position] + items[position + 1:])


@converter("SequenceInsert")
def sequence_insert(importer, inputs, attrs, opset):
    """The tensor inserted before ``position`` (at the end without one; -1
    is before the last tensor, as in ONNX's reference)."""
    items = _items(importer.bb, inputs[0])
    position = _position(importer, inputs, 2, len(items), len(items), inclusive=True)
    # (a shape value is a tensor in the sequence, as ONNX has it)
    return relax.Tuple(items[:position] + [as_tensor(importer.bb, inputs[1])] + items[position:])


@converter("SequenceLength")
def sequencestatic_length(importer, inputs, attrs, opset):
    return relax.const(np.array(len(_items(importer.bb, inputs[0])), np.int64), "int64")


@converter("ConcatFromSequence")
def concat_from_sequence(importer, inputs, attrs, opset):
    axis, new_axis = int(attrs.get("axis", 0)), int(attrs.get("new_axis", 0))
    if new_axis not in (0, 1):
        raise ValueError(f"new_axis must be 0 or 1, got {new_axis}")
    bb = importer.bb
    items = _items(bb, inputs[0])
    if new_axis:
        items = [bb.normalize(relax.op.expand_dims(t, axis=axis)) for t in items]
    return relax.op.concat(items, axis=axis)


@converter("Split")
def split(importer, inputs, attrs, opset):
    """Split whose ``split`` sizes are a tensor known only at run time: the
    shape function ``shapefn.split_sizes`` reads them (refusing negative
    sizes and sizes that do not add up to the axis' extent) and binds them
    to size variables; part ``i`` is the slice between the sums of the
    sizes before it and through it. Constant sizes with a zero among them
    (tf2onnx's, computed): the same slices between constant bounds (TVM's
    converter refuses an empty part). Other constant sizes: TVM's converter."""
    given = len(inputs) >= 2 and not absent(importer, inputs[1])
    constant = const_value(importer, inputs[1]) if given else attrs.get("split")
    if constant is not None:
        return _split_with_empty_parts(importer.bb, inputs[0], [int(v) for v in np.ravel(constant)], attrs)
    if not given:
        return NotImplemented
    bb = importer.bb
    data, sizes = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1], "int64")
    count, outputs = static_length(sizes), attrs["tvm_custom"]["num_outputs"]
    if count != outputs:
        raise ValueError(f"Split has {outputs} outputs but its split input holds {count} sizes")
    axis = int(attrs.get("axis", 0)) % ndim_of(data)
    (parts,) = emit_shape(bb, "shapefn.split_sizes", [data, sizes], [count], [axis], prefix="split")
    begin, out = tirx.IntImm("int64", 0), []
    for size in parts:
        end = begin + size
        out.append(bb.normalize(relax.op.strided_slice(data, [axis], [begin], [end], assume_inbound=True)))
        begin = end
    return relax.Tuple(out)


def _split_with_empty_parts(bb, data, sizes: list[int], attrs):
    """Split by constant ``sizes`` one of which is 0: a strided slice per part
    (NotImplemented, for TVM's converter, where none is 0)."""
    if 0 not in sizes:
        return NotImplemented
    data = as_tensor(bb, data)
    outputs = attrs["tvm_custom"]["num_outputs"]
    if len(sizes) != outputs:
        raise ValueError(f"Split has {outputs} outputs but {len(sizes)} sizes: {sizes}")
    if min(sizes) < 0:
        raise ValueError(f"Split's sizes must not be negative: {sizes}")
    axis = int(attrs.get("axis", 0)) % ndim_of(data)
    extent = data.ty.shape.values[axis] if data.ty.shape is not None else None
    if isinstance(extent, tirx.IntImm) and sum(sizes) != int(extent):
        raise ValueError(f"Split's sizes {sizes} add up to {sum(sizes)}, not to the extent {int(extent)} "
                         f"of axis {axis}")
    out, begin = [], 0
    for size in sizes:
        out.append(bb.normalize(relax.op.strided_slice(data, [axis], [begin], [begin + size], assume_inbound=True)))
        begin += size
    return relax.Tuple(out)


@converter("SequenceMap")
def sequence_map(importer, inputs, attrs, opset):
    """The body run once per position of the sequences (unrolled: their
    length is known at import), each sequence input giving it the tensor at
    that position and each tensor input itself; each body output gathered
    into a sequence."""
    bb = importer.bb
    body = attrs["body"]
    if len(body.input) != len(inputs):
        raise ValueError(f"SequenceMap's body takes {len(body.input)} inputs, the node gives {len(inputs)}")
    sequences = [_items(bb, v) if isinstance(getattr(v, "ty", None), relax.TupleType) else None for v in inputs]
    if sequences[0] is None:
        raise ValueError("SequenceMap's first input must be a sequence")
    length = len(sequences[0])
    if any(s is not None and len(s) != length for s in sequences):
        raise ValueError(f"SequenceMap's sequences differ in length: {[len(s) for s in sequences if s is not None]}")
    results = [[] for _ in body.output]
    for k in range(length):
        given = {value.name: items[k] if items is not None else tensor
                 for value, tensor, items in zip(body.input, inputs, sequences, strict=True)}
        for out, value in zip(results, importer._inlined(body, given), strict=True):
            out.append(importer.as_tensor(value))
    return relax.Tuple([relax.Tuple(items) for items in results])
