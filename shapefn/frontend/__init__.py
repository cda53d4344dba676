"""Model importers."""
from .onnx.importer import from_onnx

__all__ = ["from_onnx"]
