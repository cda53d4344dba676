"""Legalizations shapefn overrides because TVM's are wrong on dynamic shapes:
``broadcast_to`` from a size-1 dimension known only at run time, and
``resize2d`` with symbolic output sizes (build failures, off-by-one pixels
against onnxruntime)."""
from __future__ import annotations

from .dyn_kernels import legalize_broadcast_to, legalize_resize2d


def legalize_map() -> dict:
    return {"relax.broadcast_to": legalize_broadcast_to, "relax.image.resize2d": legalize_resize2d}
