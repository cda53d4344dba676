"""The Relax -> shapefn compiler."""
from .compile import compile, lower
from .shape_calls import emit_extern

__all__ = ["compile", "emit_extern", "lower"]
