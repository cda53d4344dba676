"""shapefn's ONNX converters for operators that read indices or axes from
tensor values: Gather, GatherElements, GatherND, ScatterND, and Slice with
axes given at run time (or, before opset 10, as attributes).

Every such index is checked where a kernel reads it, against the bound ONNX
gives it, negative ones counted from the end where ONNX says so
(``compiler/passes/index_checks.py``); an index out of range raises ``IndexError``
naming the node, the index and the bound (docs/guarantees.md). TVM's
converters add the extent to negative indices before the kernel sees them,
which turns an index below the bound into one within it (-11 on an axis of
10 read element 9): these pass the indices as they are."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ....compiler.passes import index_checks
from ..registry import converter, tvm_converter
from ..values import as_tensor, const_value


def _is_tensor(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType)


@converter("Gather")
def gather(importer, inputs, attrs, opset):
    """A gather from a tensor, its indices as they are (``relax.take``, whose
    kernel checks them); from a shape, or of constants, TVM's."""
    data, indices = inputs
    if not _is_tensor(data) or (const_value(importer, data) is not None and const_value(importer, indices)
                                is not None):
        return NotImplemented
    return relax.op.take(data, as_tensor(importer.bb, indices), axis=attrs.get("axis", 0))


@converter("GatherElements")
def gather_elements(importer, inputs, attrs, opset):
    data, indices = inputs
    return relax.op.gather_elements(as_tensor(importer.bb, data), as_tensor(importer.bb, indices),
                                    attrs.get("axis", 0))


@converter("GatherND")
def gather_nd(importer, inputs, attrs, opset):
    """GatherND whose index tuples' length (the last size of indices) is
    known: it decides the result's rank. Otherwise refused (TVM fails while
    compiling, naming nothing: found by fuzzing)."""
    data, indices = as_tensor(importer.bb, inputs[0]), as_tensor(importer.bb, inputs[1])
    shape = getattr(indices.ty, "shape", None)
    if shape is not None and not isinstance(shape.values[-1], tvm.tirx.IntImm):
        raise ValueError(f"the length of its index tuples (the last size of indices, {shape.values[-1]}) must be "
                         "known when it is imported")
    return relax.op.gather_nd(data, indices, attrs.get("batch_dims", 0))


_SCATTER_ND_REDUCTIONS = {"none": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}


@converter("ScatterND")
def scatter_nd(importer, inputs, attrs, opset):
    data, indices, updates = (as_tensor(importer.bb, v) for v in inputs)
    reduction = attrs.get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
    if reduction not in _SCATTER_ND_REDUCTIONS:
        raise ValueError(f"ScatterND's reduction must be one of {sorted(_SCATTER_ND_REDUCTIONS)}, not {reduction!r}")
    return relax.op.scatter_nd(data, indices, updates, _SCATTER_ND_REDUCTIONS[reduction])


@converter("Slice", takes_scalars=True)
def slice_(importer, inputs, attrs, opset):
    """Slice before opset 10, whose bounds are attributes (TVM's converter
    reads them from inputs only), as opset 13's; axes given at run time
    checked against the data's rank first (TVM's converter scatters the
    bounds into place by them, which wrote outside its buffer for an axis out
    of range)."""
    if opset < 10:
        bounds = [attrs["starts"], attrs["ends"], attrs.get("axes")]
        constants = [relax.const(np.array(list(v), np.int64), "int64") if v is not None else None for v in bounds]
        return tvm_converter(importer, "Slice", [inputs[0], *constants, None], {"tvm_custom": attrs["tvm_custom"]},
                             13)
    axes = inputs[3] if len(inputs) > 3 else None
    data = inputs[0]
    if axes is None or const_value(importer, axes) is not None or not _is_tensor(data) or data.ty.ndim < 0:
        return NotImplemented
    bb = importer.bb
    checked = bb.emit_te(index_checks.checked_tensor, as_tensor(bb, axes, "int64"), data.ty.ndim, "axis",
                         primfunc_name_hint="slice_axes")
    steps = inputs[4] if len(inputs) > 4 else None
    return tvm_converter(importer, "Slice", [data, inputs[1], inputs[2], checked, steps], attrs, opset)
