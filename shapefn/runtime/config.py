"""Process-wide settings: where compiled shape functions are cached on disk."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_ENV_CACHE_DIR = "SHAPEFN_CACHE_DIR"
_cache_dir_override: Path | None = None


def cache_dir() -> Path:
    """The directory compiled kernels and shape functions are cached in,
    created if missing (and if it can be).

    In order of precedence: the last ``set_cache_dir`` path, the
    ``SHAPEFN_CACHE_DIR`` environment variable (read on every call), then
    ``~/.cache/shapefn``.
    """
    if _cache_dir_override is not None:
        path = _cache_dir_override
    elif os.environ.get(_ENV_CACHE_DIR):
        path = Path(os.environ[_ENV_CACHE_DIR]).expanduser()
    else:
        path = Path.home() / ".cache" / "shapefn"
    # (a directory that cannot be made is no error here: writers fall back
    # to building without the cache, kernel_cache.build)
    with contextlib.suppress(OSError):
        path.mkdir(parents=True, exist_ok=True)
    return path


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` as the cache directory; ``None`` restores the default lookup."""
    global _cache_dir_override
    _cache_dir_override = None if path is None else Path(path).expanduser()
