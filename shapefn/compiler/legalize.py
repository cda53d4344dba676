"""Legalizations shapefn overrides because TVM's are wrong on dynamic shapes."""
from __future__ import annotations


def legalize_map() -> dict:
    try:
        from .dyn_kernels import legalize_broadcast_to
    except ImportError:  # TODO(compiler): remove once dyn_kernels lands
        return {}
    return {"relax.broadcast_to": legalize_broadcast_to}
