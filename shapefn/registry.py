"""The shape-function registry: per-input data-dependence masks.

Built-ins are native C++ (see ``csrc/shape``); shape functions written in
Python with TVM TE are compiled to host code once per input signature.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import tvm_ffi

from . import _core, config, te_shape_func

MaskLike = bool | Sequence[bool]

# The function and mask of each registry entry written in Python, by
# canonical name, for the compiler to build into executables.
_python_shape_funcs: dict[str, tuple[Callable, tuple[bool, ...]]] = {}


def register_shape_func(
    op_name: str,
    data_dependent: MaskLike,
    shape_func: Callable | None = None,
    level: int = 10,
    override: bool = False,
):
    """Registers the shape function of ``op_name``; usable as a decorator.

    ``data_dependent`` is one bool (for every input) or one bool per input:
    ``True`` where the shape function reads the input's *value*. The function
    receives one TE placeholder per input (value dtype and rank, symbolic
    dimensions) and returns the output shape(s) as int64 TE vectors or lists of
    expressions. Reading the data of an input declared ``False`` raises
    ``DataDependenceError``; declaring ``True`` where only the shape is used
    warns ``OverDeclaredWarning`` (it would force a needless copy).

    A higher ``level`` replaces a lower one; the same level raises unless
    ``override=True``. Built-ins are registered at level 10.
    """
    if not isinstance(op_name, str) or not op_name:
        raise TypeError("op_name must be a non-empty string")
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"level must be an int, got {type(level).__name__}")
    mask = _core.check_mask(data_dependent)

    def register(func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"shape_func must be callable, got {type(func).__name__}")
        arity = _arity(func)
        full_mask = mask * arity if len(mask) == 1 and arity is not None else mask
        if arity is not None and len(full_mask) != arity:
            raise ValueError(
                f"register_shape_func: the shape function of '{op_name}' takes {arity} inputs "
                f"but the mask has {len(full_mask)}")
        known = _known_arity(op_name)
        if known is not None and len(full_mask) != known:
            raise ValueError(
                f"register_shape_func: '{op_name}' takes {known} inputs but the mask has {len(full_mask)}")
        te_shape_func.verify_at_registration(op_name, func, full_mask)

        def compile_for(signature: str):
            fn, out_ndims = te_shape_func.compile_shape_func(
                op_name, func, full_mask, signature, cache_dir=config.cache_dir())
            return [fn, *out_ndims]

        if _core.register(op_name, list(full_mask), level, override, len(full_mask),
                          tvm_ffi.convert(compile_for)):
            _python_shape_funcs[_core.entry_info(op_name)["name"]] = (func, tuple(full_mask))
        return func

    if shape_func is not None:
        return register(shape_func)
    return register


def _arity(func: Callable) -> int | None:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in kinds)


def _known_arity(op_name: str) -> int | None:
    try:
        arity = _core.entry_info(op_name)["arity"]
    except KeyError:
        return None
    return arity if arity >= 0 else None


def python_shape_func(op_name: str) -> tuple[Callable, tuple[bool, ...]] | None:
    """The function and mask registered for ``op_name`` when its registry
    entry is a shape function written in Python; else None."""
    try:
        info = _core.entry_info(op_name)
    except KeyError:
        return None
    return _python_shape_funcs.get(info["name"]) if info["kind"] == "python" else None


def data_dependence(op_name: str) -> list[bool]:
    """The per-input mask of ``op_name`` (or of the op it aliases).

    Raises ``KeyError`` naming the op when nothing is registered for it."""
    return list(_core.entry_info(op_name)["mask"])


def registered_ops() -> list[str]:
    """Every registered op name and alias, sorted."""
    return list(_core.registered_ops())


def shape_func_info(op_name: str) -> dict:
    """Registry entry of ``op_name``: canonical name, mask, arity, outputs, level, kind."""
    return dict(_core.entry_info(op_name))
