"""Registering shape functions written in Python with TVM TE
(``register_shape_func``): the mask goes into the native registry
(``runtime/registry.py`` reads it), and the function is compiled to host
code once per input signature, when the registry first asks for it.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import tvm_ffi

from ... import _core
from ...runtime import config
from ...runtime.registry import data_dependence
from . import te_shape_func

MaskLike = bool | Sequence[bool]

# The function of each registry entry written in Python, by canonical name,
# for the compiler to build into executables (its mask is the registry's).
_python_shape_funcs: dict[str, Callable] = {}


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
    _core.resolve_mask(op_name, data_dependent)  # (refuses a bad mask before the decorator runs)

    def register(func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"shape_func must be callable, got {type(func).__name__}")
        arity = _arity(func)
        mask = _core.resolve_mask(op_name, data_dependent, -1 if arity is None else arity)
        te_shape_func.verify_at_registration(op_name, func, mask)

        def compile_for(signature: str):
            mask_now = data_dependence(op_name)  # (a mask registered later at a higher level)
            fn, out_ndims = te_shape_func.compile_shape_func(
                op_name, func, mask_now, signature, cache_dir=config.cache_dir())
            return [fn, *out_ndims]

        if _core.register(op_name, mask, level, override, -1 if arity is None else arity,
                          tvm_ffi.convert(compile_for)):
            _python_shape_funcs[_core.entry_info(op_name)["name"]] = func
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


def python_shape_func(op_name: str) -> tuple[Callable, tuple[bool, ...]] | None:
    """The function and mask registered for ``op_name`` when its registry
    entry is a shape function written in Python; else None."""
    try:
        info = _core.entry_info(op_name)
    except KeyError:
        return None
    func = _python_shape_funcs.get(info["name"]) if info["kind"] == "python" else None
    return None if func is None else (func, tuple(info["mask"]))
