"""Kernel libraries loaded from files, and the file of each.

A library TVM loaded from a shared object cannot be exported again, so
saving an executable whose kernels come from one copies its file. The
runtime keeps the pairing here; the compiler's kernel cache loads its
libraries through ``load``."""
from __future__ import annotations

import threading
from pathlib import Path

import tvm_ffi

_loaded: list[tuple[object, Path]] = []
_loaded_lock = threading.Lock()


def load(path: str | Path) -> object:
    """The TVM runtime module (a shared library of kernels) at ``path``,
    remembered as loaded from it."""
    library = tvm_ffi.load_module(str(Path(path).resolve()))
    with _loaded_lock:
        _loaded.append((library, Path(path)))
    return library


def file_of(library) -> Path | None:
    """The file ``library`` was loaded from by ``load``, or None."""
    with _loaded_lock:
        return next((path for loaded, path in _loaded if loaded.same_as(library)), None)
