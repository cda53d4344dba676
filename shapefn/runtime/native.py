"""The native libraries shapefn's extensions link, loaded without importing
the ``tvm`` package (which loads TVM's compiler and imports hundreds of
Python modules): tvm-ffi (``import tvm_ffi``) and TVM's runtime library,
``libtvm_runtime.so`` from apache-tvm's ``lib`` folder, loaded with its
symbols global so that the extensions and the kernel libraries they load
find them. ``import shapefn`` loads them first. TVM's CUDA runtime is
loaded on demand by the native side (``LoadCudaRuntime``)."""
from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import tvm_ffi  # noqa: F401  (loads libtvm_ffi)


def tvm_lib_dir() -> Path:
    """apache-tvm's lib folder, found without importing tvm."""
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("apache-tvm is not installed: shapefn needs its runtime library (libtvm_runtime.so)")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def _load_tvm_runtime() -> ctypes.CDLL:
    path = tvm_lib_dir() / "libtvm_runtime.so"
    if not path.is_file():
        raise FileNotFoundError(f"TVM's runtime library is missing from apache-tvm's installation: {path}")
    # The path TVM's own loader opens (resolved), so that `import tvm` later
    # finds the library already loaded rather than loading a second copy.
    return ctypes.CDLL(str(path.resolve()), mode=ctypes.RTLD_GLOBAL)


TVM_RUNTIME = _load_tvm_runtime()
