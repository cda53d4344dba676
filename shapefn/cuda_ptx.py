"""CUDA device code compiled to PTX with the machine's nvcc.

TVM's CUDA code generator keeps CUDA C++ source in the device module when
its CUDA runtime is not loaded (a machine without a GPU driver), leaving the
compile to a GPU machine at load time. Where nvcc exists, shapefn compiles
that source to PTX at build time instead, so the saved library holds the
device code a GPU runs (PTX is compiled on for the GPU by its driver) and a
build that nvcc rejects fails where it is made, naming the error.

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
from pathlib import Path

import tvm
import tvm_ffi

_log = logging.getLogger(__name__)
_FLAGS = ["-O3", "--fmad=false", "-std=c++17", "--expt-relaxed-constexpr",
          # TVM's half and bfloat16 code uses the operators these macros hide.
          "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
          "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]


class CudaCompileError(RuntimeError):
    """nvcc rejected the CUDA source TVM generated."""


def nvcc() -> str | None:
    """The nvcc on PATH (or under ``$CUDA_HOME/bin``), or None."""
    found = shutil.which("nvcc")
    if found is None and os.environ.get("CUDA_HOME"):
        candidate = Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"
        found = str(candidate) if candidate.exists() else None
    return found


@functools.cache
def virtual_architectures(compiler: str) -> tuple[int, ...]:
    """The compute capabilities ``compiler`` generates PTX for (75, 80, ...)."""
    environment = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    listed = subprocess.run([compiler, "--list-gpu-arch"], capture_output=True, text=True, check=True,
                            env=environment).stdout
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", listed)}))


def ptx_architecture(target: tvm.target.Target, compiler: str) -> int:
    """The compute capability to emit PTX for: the target's (``arch``), or
    the oldest the compiler supports if the target's is older (TVM assumes
    sm_50 when it finds no GPU; CUDA 13 starts at 75). PTX runs on its own
    capability and every newer one."""
    arch = str(target.attrs.get("arch", "sm_50"))
    wanted = int(re.sub(r"\D", "", arch) or 50)
    supported = virtual_architectures(compiler)
    if not supported:
        raise CudaCompileError(f"{compiler} lists no GPU architectures")
    at_least = [a for a in supported if a >= wanted]
    return at_least[0] if at_least else supported[-1]


def compile_ptx(source: str, architecture: int, compiler: str) -> bytes:
    """``source`` compiled to PTX for ``compute_<architecture>``."""
    with tempfile.TemporaryDirectory(prefix="shapefn-cuda-") as workspace:
        cu, ptx = os.path.join(workspace, "kernels.cu"), os.path.join(workspace, "kernels.ptx")
        Path(cu).write_text(source)
        # Libraries preloaded into this process (a sanitizer's runtime, for
        # one) are not for nvcc, which crashes under AddressSanitizer's.
        environment = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        done = subprocess.run([compiler, "--ptx", f"-arch=compute_{architecture}", *_FLAGS, "-o", ptx, cu],
                              capture_output=True, text=True, env=environment)
        if done.returncode != 0:
            raise CudaCompileError(f"nvcc could not compile the CUDA kernels:\n{done.stdout}{done.stderr}")
        return Path(ptx).read_bytes()


def with_ptx(library, target: tvm.target.Target):
    """``library`` with each CUDA source module it imports replaced by the
    same kernels as PTX; unchanged (and logged) when there is no nvcc."""
    sources = [m for m in library.imports if m.kind == "cuda" and m.inspect_source("cuda")]
    if not sources:
        return library
    compiler = nvcc()
    if compiler is None:
        _log.info("no nvcc: the CUDA kernels stay CUDA source, compiled when a GPU machine loads them")
        return library
    architecture = ptx_architecture(target, compiler)
    make = tvm_ffi.get_global_func("shapefn.cuda_binary_module")
    imports = [make(m, "ptx", compile_ptx(m.inspect_source("cuda"), architecture, compiler))
               if any(m.same_as(s) for s in sources) else m for m in library.imports]
    library.clear_imports()
    for module in imports:
        library.import_module(module)
    return library
