"""A saved executable with everything that runs it and nothing else: a folder
to copy to a server that has no Python packages (no apache-tvm, no shapefn).

    DIR/bin/shapefn-run                the native runner, finding its libraries in DIR/lib
    DIR/lib/libshapefn_core.so         shapefn's VM, devices and built-in shape functions
    DIR/lib/libtvm_ffi.so              tvm-ffi
    DIR/lib/libtvm_runtime.so          TVM's runtime, which compiled kernels call
    DIR/lib/libtvm_runtime_cuda.so     (cuda builds) TVM's CUDA runtime, and
    DIR/lib/libcudart.so.13            the CUDA runtime, where this machine has it
    DIR/MODEL.sfx, MODEL.sfx.kernels.so  the executable and its kernel library

Run it as ``DIR/bin/shapefn-run DIR/MODEL.sfx --device cuda --input x.npy
--output-dir out``. The machine provides the C and C++ runtime libraries
(glibc and libstdc++ at least as new as where shapefn was built) and, for a
GPU, its driver: the NVIDIA driver (``libcuda.so.1``) or an OpenCL driver
(``libOpenCL.so.1`` and an ICD), never carried.
"""
from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import _core
from . import native

_CUDA_RUNTIME = "libcudart.so.13"


@dataclass
class Bundle:
    """What ``bundle`` wrote: ``directory``, the ``files`` in it (relative
    paths), their total ``size_bytes``, the ``executable`` to pass to the
    runner, and ``notes`` on what the target machine must provide."""

    directory: Path
    files: list[str]
    size_bytes: int
    executable: Path
    notes: list[str]

    def __str__(self) -> str:
        lines = [f"bundle: {self.directory} ({len(self.files)} files, {self.size_bytes / 1e6:.1f} MB)"]
        lines += [f"  {name}" for name in self.files]
        lines.append(f"run: {self.directory / 'bin' / 'shapefn-run'} {self.executable} --device DEVICE "
                     "--input x.npy --output-dir out")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def bundle(executable: str | os.PathLike, directory: str | os.PathLike) -> Bundle:
    """Writes the bundle of the saved ``executable`` (and its kernel library,
    beside it) into ``directory``, which must not exist or be empty. Raises
    ``FileNotFoundError`` for a missing executable or library,
    ``FileExistsError`` for a folder holding files, ``ExecutableFormatError``
    for a file that is not a valid executable."""
    source = Path(executable)
    if not source.is_file():
        raise FileNotFoundError(f"no executable at {source}")
    core = _core.Executable.load(str(source))  # verified; its library is not loaded (no device is needed)
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} exists and is not an empty folder: bundle into a new one")

    program = [source]
    if core.kernel_library:
        library = source.parent / core.kernel_library
        if not library.is_file():
            raise FileNotFoundError(f"the kernel library {library} of {source} is missing")
        program.append(library)
    libraries, notes = _runtime_libraries(core.device_code)

    (target / "bin").mkdir(parents=True, exist_ok=True)
    (target / "lib").mkdir(exist_ok=True)
    shutil.copy2(_runner(), target / "bin" / "shapefn-run")
    for path in libraries:  # (copy2 follows links: libcudart.so.13 is one, to libcudart.so.13.0.<n>)
        shutil.copy2(path, target / "lib" / path.name)
    for path in program:
        shutil.copy2(path, target / path.name)
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    size = sum((target / name).stat().st_size for name in files)
    return Bundle(target, files, size, target / source.name, notes)


def _runner() -> Path:
    runner = Path(_core.__file__).parent / "_bundle" / "shapefn-run"  # installed beside the extensions
    if not runner.is_file():
        raise FileNotFoundError(f"the relocatable runner {runner} is missing: reinstall shapefn (pip install .)")
    return runner


def _runtime_libraries(device_code: str) -> tuple[list[Path], list[str]]:
    """The libraries an executable for ``device_code`` runs with, and notes
    on what the target machine must provide itself."""
    import tvm_ffi.libinfo

    tvm_lib = native.tvm_lib_dir()
    libraries = [Path(_core.__file__).parent / "libshapefn_core.so", Path(tvm_ffi.libinfo.find_libtvm_ffi()),
                 tvm_lib / "libtvm_runtime.so"]
    notes = []
    if device_code == "cuda":
        libraries.append(tvm_lib / "libtvm_runtime_cuda.so")
        cudart = _cuda_runtime()
        if cudart is not None:
            libraries.append(cudart)
        else:
            notes.append(f"{_CUDA_RUNTIME} was not found here: the target machine must have the CUDA 13 runtime")
        notes.append("the target machine needs the NVIDIA driver (libcuda.so.1)")
    elif device_code == "opencl":
        notes.append("the target machine needs an OpenCL driver (libOpenCL.so.1 and an ICD)")
    missing = [str(p) for p in libraries if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"runtime libraries missing from this installation: {', '.join(missing)}")
    return libraries, notes


def _cuda_runtime() -> Path | None:
    """libcudart.so.13: from PyPI's nvidia-cuda-runtime, $CUDA_HOME or the
    usual toolkit folder; None if none has it."""
    import site

    candidates = [Path(p) for root in site.getsitepackages() + [site.getusersitepackages()]
                  for p in glob.glob(os.path.join(root, "nvidia", "*", "lib", _CUDA_RUNTIME))]
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            candidates += [Path(home) / sub / _CUDA_RUNTIME for sub in ("lib64", "lib")]
    return next((p for p in candidates if p.is_file()), None)
