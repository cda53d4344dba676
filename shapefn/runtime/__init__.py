"""The runtime: what loads and runs executables, and nothing that makes
them. ``vm.py`` is the VM (its interpreter is native, ``csrc/vm``);
``executable.py`` an executable and its kernels, saved and loaded (verified
on load); ``builder.py`` writes bytecode by hand; ``devices.py`` names
devices; ``registry.py`` reads the shape-function registry; ``profiler.py``,
``bundle.py`` (an executable with the libraries it runs with, for a machine
without Python), ``config.py``, ``errors.py``, ``libraries.py``,
``host_threads.py`` and ``progress.py`` serve them. ``native.py`` loads the
native libraries the extensions link.

The runtime imports neither the compiler nor the frontends, nor TVM's
Python package: a saved executable loads and runs without them.
"""
import importlib

from . import native  # noqa: F401  (before anything imports the extensions)


def __getattr__(name: str):
    """A submodule, imported on first use (``shapefn.runtime.devices``)."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
