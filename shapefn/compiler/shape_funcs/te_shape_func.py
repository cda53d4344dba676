"""Shape functions written in Python with TVM TE: tracing, mask verification, compilation.

A TE shape function is called with one ``te.placeholder`` per op input. Each
placeholder has the input's dtype and rank (from the signature) and a fresh
symbolic int64 size variable per dimension. The function reads an input's
shape through ``x.shape[i]`` and its values through ``x[...]``, and returns one
output shape, or a list/tuple of them. An output shape is either a 1-D TE
tensor of integer dtype and static length, or a list/tuple of ints/PrimExprs.

Where the mask says ``False`` the VM passes a tensor with the real shape but a
dummy data pointer, so the function must never read that input's data. Tracing
finds which inputs' data the outputs are computed from; verification rejects a
read of a shape-only input (``DataDependenceError``) and warns about inputs
declared data-dependent but never read (``OverDeclaredWarning``).

The compiled function's calling convention, used by the VM: the input tensors in
order, then one int64 1-D output tensor per output, of length ``out_ndims[i]``.
It is compiled once per input signature and cached in memory and on disk.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import operator
import os
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm import te, tirx

from ... import _core
from ...runtime import config
from ...runtime.errors import DataDependenceError, OverDeclaredWarning
from ..machine_code import kernel_cache
from ..schedules import target_schedule

Signature = list[tuple[str, int]]
SignatureLike = str | Sequence[tuple[str, int]]
MaskLike = bool | Sequence[bool]

_ENTRY_NAME = "shape_func"
_SIGNATURE_ITEM = re.compile(r"([A-Za-z][A-Za-z0-9_]*):([0-9]+)")


# ---------------------------------------------------------------------------
# Signatures and masks
# ---------------------------------------------------------------------------


def parse_signature(sig: str) -> Signature:
    """Parse the VM's input description, e.g. ``"int64:1,float32:4"``, into (dtype, ndim) pairs.

    The empty string describes an op without inputs. Raises ``ValueError`` for a
    malformed string or an unknown or vector dtype.
    """
    if not isinstance(sig, str):
        raise TypeError(f"shape-function signature must be a str, got {type(sig).__name__}")
    if sig == "":
        return []
    parsed = []
    for index, item in enumerate(sig.split(",")):
        match = _SIGNATURE_ITEM.fullmatch(item.strip())
        if match is None:
            raise ValueError(
                f"malformed shape-function signature {sig!r}: input {index} is {item!r}, "
                "expected 'dtype:ndim'"
            )
        parsed.append((_canonical_dtype(match.group(1), sig), int(match.group(2))))
    return parsed


def format_signature(sig: Sequence[tuple[str, int]]) -> str:
    """Format (dtype, ndim) pairs as the VM does: the inverse of ``parse_signature``.

    Raises ``ValueError`` for a negative rank or an unknown or vector dtype.
    """
    items = []
    for entry in sig:
        dtype, ndim = entry
        ndim = operator.index(ndim)
        if ndim < 0:
            raise ValueError(f"negative ndim {ndim} in shape-function signature {list(sig)!r}")
        items.append(f"{_canonical_dtype(str(dtype), sig)}:{ndim}")
    return ",".join(items)


def _canonical_dtype(dtype: str, sig: object) -> str:
    try:
        parsed = tvm.DataType(dtype)
    except Exception as err:
        raise ValueError(f"unknown dtype {dtype!r} in shape-function signature {sig!r}") from err
    if parsed.lanes != 1 or dtype in ("handle", "void"):
        raise ValueError(
            f"dtype {dtype!r} in shape-function signature {sig!r} is not a scalar type"
        )
    return str(parsed)


def _normalize_signature(signature: SignatureLike) -> tuple[str, Signature]:
    text = signature if isinstance(signature, str) else format_signature(signature)
    return text, parse_signature(text)


def _normalize_mask(mask: MaskLike, num_inputs: int, op_name: str) -> tuple[bool, ...]:
    """``mask`` for ``num_inputs`` inputs, validated by the registry (the
    one place masks are checked)."""
    return tuple(_core.resolve_mask(op_name, mask, num_inputs))


# ---------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Traced:
    """A shape function traced at one input signature."""

    op_name: str
    signature: str
    placeholders: list[te.Tensor]  # one per input, in order
    outputs: list[te.Tensor]  # int64 vectors of static length, one per output
    out_ndims: list[int]  # the static length of each output vector
    reads: frozenset[int]  # indices of the inputs whose data the outputs are computed from


def trace(
    op_name: str,
    func: Callable[..., Any],
    num_inputs_or_mask: int | MaskLike,
    signature: SignatureLike,
) -> Traced:
    """Call ``func`` on placeholders built from ``signature`` and find which inputs' data it reads.

    ``num_inputs_or_mask`` (a count, or a mask with one entry per input) is
    checked against the signature's length; a single bool checks nothing.
    Exceptions raised by ``func`` propagate with a note naming the op and signature.
    """
    sig_text, sig = _normalize_signature(signature)
    if not isinstance(num_inputs_or_mask, bool):
        expected = (
            num_inputs_or_mask if isinstance(num_inputs_or_mask, int) else len(num_inputs_or_mask)
        )
        if expected != len(sig):
            raise ValueError(
                f"shape function of {op_name!r} takes {expected} inputs "
                f"but signature {sig_text!r} describes {len(sig)}"
            )
    placeholders = [
        te.placeholder(
            tuple(tirx.Var(f"in{i}_d{d}", "int64") for d in range(ndim)), dtype, name=f"in{i}"
        )
        for i, (dtype, ndim) in enumerate(sig)
    ]
    try:
        result = func(*placeholders)
    except Exception as err:
        err.add_note(f"while tracing the shape function of {op_name!r} at signature {sig_text!r}")
        raise
    outputs = [
        _output_vector(op_name, index, shape)
        for index, shape in enumerate(_split_outputs(op_name, result))
    ]
    return Traced(
        op_name=op_name,
        signature=sig_text,
        placeholders=placeholders,
        outputs=outputs,
        out_ndims=[int(out.shape[0]) for out in outputs],
        reads=_inputs_read(op_name, placeholders, outputs),
    )


def _is_shape_sequence(value: object) -> bool:
    return isinstance(value, (list, tuple))


def _split_outputs(op_name: str, result: object) -> list[object]:
    if isinstance(result, te.Tensor):
        return [result]
    if _is_shape_sequence(result):
        nested = [isinstance(v, te.Tensor) or _is_shape_sequence(v) for v in result]
        if result and all(nested):
            return list(result)
        if not any(nested):
            return [result]  # a single shape given as ints/PrimExprs
        raise TypeError(
            f"shape function of {op_name!r} returned a sequence mixing shapes with "
            "ints/PrimExprs; return one shape or a list of shapes"
        )
    raise TypeError(
        f"shape function of {op_name!r} returned {type(result).__name__}; expected a TE tensor, "
        "a list of ints/PrimExprs, or a list/tuple of those"
    )


def _output_vector(op_name: str, index: int, shape: object) -> te.Tensor:
    """Turn one returned shape into a fresh int64 compute named ``out<index>``.

    Always copying gives every output its own buffer, even when the function
    returns a placeholder or the same tensor twice.
    """
    name = f"out{index}"
    if isinstance(shape, te.Tensor):
        if len(shape.shape) != 1:
            raise ValueError(
                f"shape function of {op_name!r}: output {index} has rank {len(shape.shape)}, "
                "expected a 1-D vector"
            )
        length = shape.shape[0]
        if not isinstance(length, tirx.IntImm):
            raise ValueError(
                f"shape function of {op_name!r}: output {index} has length {length}, "
                "which is not a compile-time constant (its rank must be static)"
            )
        if not re.fullmatch(r"u?int[0-9]+", str(shape.dtype)):
            raise TypeError(
                f"shape function of {op_name!r}: output {index} has dtype {shape.dtype}, "
                "expected an integer dtype"
            )
        return te.compute((int(length),), lambda i: tirx.Cast("int64", shape(i)), name=name)

    dims = [_int64_expr(op_name, index, dim) for dim in shape]

    def select(i: tirx.Var) -> tirx.Expr:
        # if_then_else, not Select: only the chosen element is evaluated, so an
        # element guarded by the function's own logic is never read out of range.
        chosen = dims[-1]
        for position in range(len(dims) - 2, -1, -1):
            chosen = tirx.if_then_else(i == position, dims[position], chosen)
        return chosen

    if not dims:
        return te.compute((0,), lambda i: tirx.const(0, "int64"), name=name)
    return te.compute((len(dims),), select, name=name)


def _int64_expr(op_name: str, index: int, value: object) -> tirx.Expr:
    if isinstance(value, te.TensorSlice):  # x[i] is a slice until used in arithmetic
        value = value.asobject()
    if isinstance(value, tirx.Expr):
        return tirx.Cast("int64", value)
    try:
        return tirx.const(operator.index(value), "int64")
    except TypeError:
        raise TypeError(
            f"shape function of {op_name!r}: output {index} has an element of type "
            f"{type(value).__name__}; expected int or PrimExpr"
        ) from None


def _loaded_tensors(op: te.Operation) -> list[te.Tensor]:
    """Tensors whose elements ``op`` loads, in its body or in its shape and axis extents."""
    loaded = list(op.input_tensors)
    extents = [dim for k in range(op.num_outputs) for dim in op.output(k).shape]
    if isinstance(op, te.ComputeOp):
        extents += [axis.dom.extent for axis in op.reduce_axis]
    if extents:
        # te collects loads only from compute bodies; a throwaway compute whose
        # body uses every extent lets it find loads hidden in sizes too.
        total = functools.reduce(operator.add, [tirx.Cast("int64", e) for e in extents])
        loaded += te.compute((1,), lambda _: total, name="extent_probe").op.input_tensors
    return loaded


def _inputs_read(
    op_name: str, placeholders: list[te.Tensor], outputs: list[te.Tensor]
) -> frozenset[int]:
    input_index = {ph.op: i for i, ph in enumerate(placeholders)}
    reads = set()
    seen = set()
    pending = [out.op for out in outputs]
    while pending:
        op = pending.pop()
        if op in seen:
            continue
        seen.add(op)
        for tensor in _loaded_tensors(op):
            producer = tensor.op
            if isinstance(producer, te.PlaceholderOp):
                if producer not in input_index:
                    raise ValueError(
                        f"shape function of {op_name!r} reads placeholder {producer.name!r}, "
                        "which is not one of its arguments; build values from the arguments only"
                    )
                reads.add(input_index[producer])
            else:
                pending.append(producer)
    return frozenset(reads)


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """What verifying a mask against a traced shape function found."""

    signature: str  # the signature the function was traced at
    reads: frozenset[int]  # inputs whose data the function reads
    over_declared: tuple[int, ...]  # inputs declared data-dependent but never read


def verify(
    op_name: str, func: Callable[..., Any], mask: MaskLike, signature: SignatureLike
) -> VerifyResult:
    """Trace ``func`` at ``signature`` and check ``mask`` against what it reads.

    Raises ``DataDependenceError`` if it reads the data of an input declared
    ``False``; warns ``OverDeclaredWarning`` (and lists the inputs in
    ``over_declared``) for inputs declared ``True`` whose data it never reads.
    """
    _, sig = _normalize_signature(signature)
    mask = _normalize_mask(mask, len(sig), op_name)
    return _check_mask(trace(op_name, func, mask, signature), mask)


def _check_mask(traced: Traced, mask: tuple[bool, ...]) -> VerifyResult:
    op_name = traced.op_name
    undeclared = sorted(i for i in traced.reads if not mask[i])
    if undeclared:
        inputs = " and ".join(f"input {i}" for i in undeclared)
        raise DataDependenceError(
            f"shape function of {op_name!r} reads the data of {inputs}, declared shape-only "
            "(data_dependent=False): the VM passes only the shape there. Declare it True "
            "or use only its .shape"
        )
    over_declared = tuple(
        i for i, dependent in enumerate(mask) if dependent and i not in traced.reads
    )
    for i in over_declared:
        warnings.warn(
            f"shape function of {op_name!r} never reads the data of input {i}, declared "
            "data-dependent (data_dependent=True); over-declared: forces a needless "
            "device-to-host copy",
            OverDeclaredWarning,
            stacklevel=3,
        )
    return VerifyResult(traced.signature, traced.reads, over_declared)


def _probe_signatures(mask: tuple[bool, ...]) -> list[Signature]:
    vector, feature_map = ("int64", 1), ("float32", 4)
    return [
        [vector] * len(mask),
        [vector if dependent else feature_map for dependent in mask],
        [feature_map] * len(mask),
    ]


def verify_at_registration(
    op_name: str, func: Callable[..., Any], mask: MaskLike
) -> VerifyResult | None:
    """Verify ``mask`` before any input signature is known, by tracing at probe signatures.

    Probes, in order: every input ``int64`` rank 1; shape-only inputs
    ``float32`` rank 4 with data-dependent inputs ``int64`` rank 1; every input
    ``float32`` rank 4. The first probe ``func`` traces at without raising is
    verified as ``verify`` does (a ``DataDependenceError`` propagates). If no
    probe traces — the function needs other dtypes or ranks — this returns
    ``None`` and verification happens at the first ``compile_shape_func``,
    which verifies every signature it compiles. A single-bool ``mask`` is
    applied to each of ``func``'s positional parameters; ``None`` is returned
    if their number is variable.
    """
    if isinstance(mask, bool):
        num_inputs = _positional_arity(func)
        if num_inputs is None:
            return None
    else:
        num_inputs = len(mask)
    mask = _normalize_mask(mask, num_inputs, op_name)
    for probe in _probe_signatures(mask):
        try:
            traced = trace(op_name, func, mask, probe)
        except Exception:  # noqa: BLE001 - any failure means "try the next probe"
            continue
        return _check_mask(traced, mask)
    return None


def _positional_arity(func: Callable[..., Any]) -> int | None:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = [p.kind for p in parameters]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(kind in positional for kind in kinds)


# ---------------------------------------------------------------------------
# Compilation and caches
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Compiled:
    func: Callable[..., Any]  # held so that id(func) in the key cannot be reused
    function: tvm_ffi.Function
    out_ndims: tuple[int, ...]


_compiled: dict[tuple[str, int, str, tuple[bool, ...]], _Compiled] = {}
_compiled_lock = threading.Lock()


def compile_shape_func(
    op_name: str,
    func: Callable[..., Any],
    mask: MaskLike,
    signature: SignatureLike,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[tvm_ffi.Function, list[int]]:
    """Verify and compile ``func`` for ``signature`` to host code; return it and its output lengths.

    The returned function is called with the input tensors in order, then one
    int64 1-D output tensor per output of length ``out_ndims[i]``; it writes
    the output shapes. Shape-only inputs may carry any non-NULL data pointer:
    their data is never read (verified here). Results are cached in this
    process and on disk in ``cache_dir`` (default ``config.cache_dir()``).
    """
    sig_text, sig = _normalize_signature(signature)
    mask = _normalize_mask(mask, len(sig), op_name)
    key = (op_name, id(func), sig_text, mask)
    with _compiled_lock:
        cached = _compiled.get(key)
    if cached is not None and cached.func is func:
        return cached.function, list(cached.out_ndims)

    prim_func, out_ndims = shape_func_prim_func(op_name, func, mask, sig_text)
    directory = Path(cache_dir) if cache_dir is not None else config.cache_dir()
    function = _load_or_build(prim_func.with_attr("global_symbol", _ENTRY_NAME), directory)

    compiled = _Compiled(func, function, tuple(out_ndims))
    with _compiled_lock:
        _compiled[key] = compiled
    return function, list(compiled.out_ndims)


def shape_func_prim_func(
    op_name: str, func: Callable[..., Any], mask: MaskLike, signature: SignatureLike
) -> tuple[tirx.PrimFunc, list[int]]:
    """``func`` traced at ``signature`` with ``mask`` verified, as a PrimFunc
    with the calling convention ``compile_shape_func``'s functions have, and
    the length of each output shape.

    The compiler builds these into an executable's kernel library, so that
    the executable carries its shape functions."""
    sig_text, sig = _normalize_signature(signature)
    mask = _normalize_mask(mask, len(sig), op_name)
    traced = trace(op_name, func, mask, sig_text)
    _check_mask(traced, mask)
    return te.create_prim_func([*traced.placeholders, *traced.outputs]), list(traced.out_ndims)


def clear_memory_cache() -> None:
    """Forget the functions compiled in this process; the disk cache is kept."""
    with _compiled_lock:
        _compiled.clear()


def _load_or_build(prim_func: tirx.PrimFunc, directory: Path) -> tvm_ffi.Function:
    target = target_schedule.host_target()
    scheduled = target_schedule.schedule({_ENTRY_NAME: prim_func}, target)
    library, _ = kernel_cache.build(scheduled.module, target, scheduled.version, directory)
    return library[_ENTRY_NAME]
