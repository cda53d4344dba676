"""The shape-function registry as the runtime sees it: one entry per op,
with its per-input data-dependence mask (``True`` where the shape function
reads the input's value). Built-ins are native C++ (``csrc/shape``);
``compiler/shape_funcs/registry.py`` registers shape functions written in
Python.
"""
from __future__ import annotations

from .. import _core


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
