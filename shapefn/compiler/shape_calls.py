"""The Relax forms shapefn's compiler and frontends emit for data-dependent
shapes. Each is a packed call the code generator maps onto VM instructions:

* ``shapefn.shape_func``: ``(op_name: str, attrs: Shape, *inputs) -> Shape``
  (or a tuple of shapes): the registered shape function of ``op_name``,
  handed by the VM only what its mask says;
* ``shapefn.view``: ``(tensor, shape) -> Tensor``: the leading bytes of
  ``tensor`` viewed with an exact shape (count-sized ops trim their
  upper-bound outputs this way);
* ``shapefn.to_host``: ``(tensor) -> Tensor``: the tensor read back whole
  to the host, in the readback group of its phase (``host_params.py``).
"""
from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm import relax, tirx

SHAPE_FUNC = "shapefn.shape_func"
VIEW = "shapefn.view"
TO_HOST = "shapefn.to_host"


def fresh_dims(prefix: str, ndim: int) -> list[tirx.Var]:
    return [tirx.Var(f"{prefix}{i}", "int64") for i in range(ndim)]


def emit_shape(bb: relax.BlockBuilder, op_name: str, inputs: Sequence[relax.Expr], ndims: Sequence[int],
               attrs: Sequence[int] = (), prefix: str | None = None) -> list[list[tirx.Var]]:
    """Emits the shape-function call of ``op_name`` and binds its output
    shape(s) to fresh size variables, returned one list per output."""
    tys = [relax.ShapeType(ndim=n) for n in ndims]
    ty = tys[0] if len(tys) == 1 else relax.TupleType(tys)
    call = relax.op.call_pure_packed(SHAPE_FUNC, tvm.ir.StringImm(op_name),
                                     relax.ShapeExpr([int(a) for a in attrs]), *inputs, ty_args=ty)
    shapes = bb.emit(call, name_hint="shape")
    stem = prefix or op_name.split(".")[-1]
    out = []
    for k, n in enumerate(ndims):
        dims = fresh_dims(f"{stem}{k}_" if len(ndims) > 1 else f"{stem}_", n)
        value = shapes if len(ndims) == 1 else bb.emit(relax.TupleGetItem(shapes, k))
        bb.match_cast(value, relax.ShapeType(dims))
        out.append(dims)
    return out


def emit_view(bb: relax.BlockBuilder, tensor: relax.Expr, dims: Sequence, dtype: str) -> relax.Var:
    """The leading bytes of ``tensor`` as a tensor of shape ``dims``."""
    return bb.emit(relax.op.call_pure_packed(VIEW, tensor, relax.ShapeExpr(list(dims)),
                                             ty_args=relax.TensorType(list(dims), dtype)))


def emit_count(bb: relax.BlockBuilder, count: relax.Expr, name: str) -> tirx.Var:
    """Reads a count tensor (int64 [1]) written by a kernel into a size
    variable: the VM copies these 8 bytes, never the data."""
    shape = bb.emit(relax.op.tensor_to_shape(count))
    (var,) = fresh_dims(f"{name}_count", 1)
    bb.match_cast(shape, relax.ShapeType([var]))
    return var


def emit_extern(bb: relax.BlockBuilder, op_name: str, args: Sequence[relax.Expr], *, out_ndim: int,
                out_dtype: str) -> relax.Var:
    """Emits a user kernel whose output shape depends on its inputs.

    Relax needs a known output shape for ``call_dps_packed``; this emits the
    three bindings that give it one: the host shape function registered for
    ``op_name`` (``register_shape_func(op_name, mask)``), a ``match_cast``
    binding fresh size variables, and ``R.call_dps_packed(op_name, args)``
    with that shape. Use inside a ``relax.BlockBuilder`` function."""
    (dims,) = emit_shape(bb, op_name, list(args), [out_ndim], prefix=op_name.replace(".", "_"))
    return bb.emit(relax.op.call_dps_packed(op_name, relax.Tuple(list(args)),
                                            relax.TensorType(dims, out_dtype)))
