"""On-disk cache of TVM-compiled kernel libraries, keyed by content.

Compiling kernels is most of the time a model takes to compile; the cache
makes the second compile of the same module (in any process) load the
library instead. Entries are written atomically (temporary name, then
rename), so concurrent processes see no file or a whole one.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import tvm

from . import config


def key(mod: tvm.IRModule, target) -> str:
    """What the compiled code depends on: TVM's version, the target, the TIR."""
    digest = hashlib.sha256("\0".join([tvm.__version__, str(target)]).encode())
    # Function by function, in name order: a module's own order follows
    # object addresses, which differ between processes.
    for gv, func in sorted(mod.functions.items(), key=lambda item: item[0].name_hint):
        digest.update(f"\0{gv.name_hint}\0".encode())
        digest.update(func.script(show_meta=True).encode())
    return digest.hexdigest()


def build(mod: tvm.IRModule, target, directory: Path | None = None) -> tuple[object, Path]:
    """The compiled library of ``mod`` for ``target`` and the file it lives
    in, from the cache when present (``directory`` defaults to
    ``<cache_dir>/kernels``)."""
    directory = Path(directory) if directory is not None else config.cache_dir() / "kernels"
    path = directory / f"{key(mod, target)}.so"
    if path.exists():
        try:
            return tvm.runtime.load_module(str(path)), path
        except Exception:  # noqa: BLE001 - an unreadable entry is rebuilt and replaced
            pass
    library = tvm.compile(mod, target=target)
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".so", dir=directory)
    os.close(fd)
    try:
        library.export_library(temp_name)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    return tvm.runtime.load_module(str(path)), path
