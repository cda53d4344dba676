"""CUDA device code compiled to a fatbin with the machine's nvcc: machine
code (SASS) for each GPU generation targeted, and PTX for newer ones.

TVM's CUDA code generator keeps CUDA C++ source in the device module when
its CUDA runtime is not loaded (a machine without a GPU driver), leaving the
compile to a GPU machine at load time. Where nvcc exists, shapefn compiles
that source at build time instead, so the saved library holds the code a GPU
runs and a build that nvcc rejects fails where it is made, naming the error.
A library of PTX alone would be compiled by the GPU's driver when it is
first loaded (SSD-lite's 425 kernels: 8.85 s on an H200); one with SASS for
the GPU loads at once.

The architectures (``architectures``): those asked for (``cuda_archs``), or
the target's ``arch`` where one was chosen, or by default the data-center
and desktop generations ``DEFAULT_ARCHITECTURES`` and the GPU of this
machine, if any. nvcc's front end runs once, for the oldest of them; ptxas
turns that PTX into SASS for each (a front-end run per architecture would
double SSD-lite's compile, for the same machine code). The PTX goes in too:
the driver compiles it for a GPU newer than every SASS in the fatbin.

nvcc is run here rather than through ``tvm.support.nvcc.compile_cuda``,
which always adds ``--use_fast_math``: approximate division, square root
and exponentials would change results against onnxruntime. Fused
multiply-adds are off too (``--fmad=false``), so the IoU tests of NMS round
as the CPU kernels do.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import tvm
import tvm_ffi

_log = logging.getLogger(__name__)
_FLAGS = ["-O3", "--fmad=false", "-std=c++17", "--expt-relaxed-constexpr",
          # TVM's half and bfloat16 code uses the operators these macros hide.
          "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
          "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
          # ptxas for each architecture at once, on as many cores as there are.
          "--threads", "0"]
#: What a CUDA build targets unless told otherwise: Ampere (A100, RTX 30),
#: Ada (L4, L40, RTX 40) and Hopper (H100, H200).
DEFAULT_ARCHITECTURES = ("sm_80", "sm_86", "sm_89", "sm_90")
# sm_90a / sm_100f: code for that GPU (family) only, from its own PTX.
_ARCHITECTURE = re.compile(r"sm_(\d+)([af]?)")


class CudaCompileError(RuntimeError):
    """nvcc rejected the CUDA source TVM generated, or cannot compile for
    an architecture asked for."""


def nvcc() -> str | None:
    """The nvcc on PATH (or under ``$CUDA_HOME/bin``), or None."""
    found = shutil.which("nvcc")
    if found is None and os.environ.get("CUDA_HOME"):
        candidate = Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"
        found = str(candidate) if candidate.exists() else None
    return found


def _environment() -> dict[str, str]:
    # Libraries preloaded into this process (a sanitizer's runtime, for
    # one) are not for nvcc, which crashes under AddressSanitizer's.
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


@functools.cache
def supported_architectures(compiler: str) -> tuple[str, ...]:
    """The architectures ``compiler`` makes SASS for ("sm_75", ...)."""
    listed = subprocess.run([compiler, "--list-gpu-code"], capture_output=True, text=True, check=True,
                            env=_environment()).stdout
    return tuple(sorted(set(re.findall(r"sm_\d+[af]?", listed)), key=_order))


@functools.cache
def _version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True,
                          env=_environment()).stdout.strip().splitlines()[-1]


def _order(arch: str) -> tuple[int, str]:
    match = _ARCHITECTURE.fullmatch(arch)
    return int(match[1]), match[2]


@functools.cache
def _tvm_default_arch() -> str:
    # What TVM fills in for a "cuda" target without one: this machine's
    # GPU's, or sm_50 when it finds none.
    return str(tvm.target.Target({"kind": "cuda"}).attrs["arch"])


def _gpu_arch() -> list[str]:
    """This machine's first CUDA GPU's architecture, if TVM finds one."""
    gpu = tvm.cuda(0)
    return [f"sm_{gpu.compute_version.replace('.', '')}"] if gpu.exist else []


def architectures(target: tvm.target.Target, requested: Sequence[str] | None = None) -> tuple[str, ...]:
    """The architectures ("sm_90", ...) a CUDA build makes SASS for, oldest
    first: ``requested`` if given; else the target's ``arch`` if one was
    chosen (it differs from what TVM fills in for a bare "cuda" target);
    else ``DEFAULT_ARCHITECTURES`` and this machine's GPU's. Raises
    ValueError for a name that is not an architecture and CudaCompileError
    for one this machine's nvcc cannot compile for."""
    if isinstance(requested, str):
        raise TypeError(f"cuda_archs takes a list of architectures, e.g. [{requested!r}], not a string")
    if requested is not None:
        archs = [str(a) for a in requested]
        if not archs:
            raise ValueError("cuda_archs is empty: name at least one architecture, e.g. ['sm_90']")
    elif str(target.attrs.get("arch", "")) != _tvm_default_arch():
        archs = [str(target.attrs["arch"])]
    else:
        archs = [*DEFAULT_ARCHITECTURES, *_gpu_arch()]
    bad = [a for a in archs if not _ARCHITECTURE.fullmatch(a)]
    if bad:
        raise ValueError(f"not a CUDA architecture: {', '.join(map(repr, bad))} (expected names such as 'sm_90')")
    compiler = nvcc()
    if compiler is not None:
        unsupported = [a for a in archs if a not in supported_architectures(compiler)]
        if unsupported:
            raise CudaCompileError(f"{compiler} cannot compile for {', '.join(unsupported)}; it supports "
                                   f"{', '.join(supported_architectures(compiler))}")
    return tuple(sorted(set(archs), key=_order))


def device_code(archs: Sequence[str]) -> str:
    """What the device code of a CUDA build for ``archs`` is, for the
    kernel cache's key: the fatbin's architectures and the nvcc making it,
    or CUDA source where there is no nvcc."""
    compiler = nvcc()
    return f"fatbin {','.join(archs)} {_version(compiler)}" if compiler else "cuda source"


def gencode_flags(archs: Sequence[str]) -> list[str]:
    """nvcc's ``-gencode`` options for SASS of each of ``archs`` (oldest
    first) and PTX of the oldest (it runs on every newer GPU): one front-end
    run for all but an arch-specific one (sm_90a), which has its own."""
    general = [a for a in archs if _order(a)[1] == ""]
    flags = []
    if general:
        virtual = f"compute_{_order(general[0])[0]}"
        flags += ["-gencode", f"arch={virtual},code=[{','.join(general)},{virtual}]"]
    for arch in archs:
        if arch not in general:
            flags += ["-gencode", f"arch=compute_{arch[3:]},code={arch}"]
    return flags


def compile_fatbin(source: str, archs: Sequence[str], compiler: str) -> bytes:
    """``source`` compiled to a fatbin for ``archs``."""
    with tempfile.TemporaryDirectory(prefix="shapefn-cuda-") as workspace:
        cu, fatbin = os.path.join(workspace, "kernels.cu"), os.path.join(workspace, "kernels.fatbin")
        Path(cu).write_text(source)
        done = subprocess.run([compiler, "--fatbin", *gencode_flags(archs), *_FLAGS, "-o", fatbin, cu],
                              capture_output=True, text=True, env=_environment())
        if done.returncode != 0:
            raise CudaCompileError(f"nvcc could not compile the CUDA kernels:\n{done.stdout}{done.stderr}")
        return Path(fatbin).read_bytes()


def with_fatbin(library, archs: Sequence[str]):
    """``library`` with each CUDA source module it imports replaced by the
    same kernels as a fatbin for ``archs``; unchanged (and logged) when
    there is no nvcc."""
    sources = [m for m in library.imports if m.kind == "cuda" and m.inspect_source("cuda")]
    if not sources:
        return library
    compiler = nvcc()
    if compiler is None:
        _log.info("no nvcc: the CUDA kernels stay CUDA source, compiled when a GPU machine loads them")
        return library
    make = tvm_ffi.get_global_func("shapefn.cuda_binary_module")
    imports = [make(m, "fatbin", compile_fatbin(m.inspect_source("cuda"), archs, compiler))
               if any(m.same_as(s) for s in sources) else m for m in library.imports]
    library.clear_imports()
    for module in imports:
        library.import_module(module)
    return library
