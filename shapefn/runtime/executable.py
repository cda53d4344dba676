"""Executable: bytecode, constants and kernels; ``save`` / ``load``."""
from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from .. import _core

_LIBRARY_SUFFIX = ".kernels.so"


class Executable:
    """A verified shapefn program.

    ``kernels`` maps kernel names to ``tvm_ffi.Function``s; ``library`` is the
    TVM runtime module they came from (needed to ``save``) and
    ``library_path`` the file it was loaded from, if any (``save`` copies
    it). Kernel names found in neither are looked up among tvm-ffi global
    functions when a VM is made. ``default_dependence`` is the dependence
    mode VMs made from it use unless told otherwise.
    """

    def __init__(self, core: _core.Executable, kernels: Mapping | None = None, library=None, *,
                 library_path: str | os.PathLike | None = None, default_dependence: str = "per-input"):
        self._core = core
        self._kernels = dict(kernels or {})
        self._library = library
        self._library_path = library_path
        #: The dependence mode VMs made from this executable use by default.
        self.default_dependence = default_dependence

    @property
    def function_names(self) -> list[str]:
        return list(self._core.function_names)

    @property
    def library(self):
        """The TVM runtime module holding the kernels (None if there are
        none). For a GPU target its ``imports`` hold the device module
        (``kind`` "opencl" or "cuda"; ``inspect_source()`` shows the code)."""
        return self._library

    @property
    def kernel_names(self) -> list[str]:
        """The kernel table: ``kernel#i`` of ``as_text()`` is entry i. It
        holds the host code of carried shape functions too."""
        return list(self._core.kernels)

    @property
    def host_cpu_features(self) -> list[str]:
        """The CPU features (LLVM's names: "avx2", "avx512f"...) the kernel
        library's host code may use: VMs refuse to run it on a CPU without
        one of them (``SHAPEFN_HOST_CPU`` chooses the CPU compiles target)."""
        return list(self._core.host_cpu_features)

    @property
    def device_code(self) -> str:
        """What the kernels were compiled for: "cpu" (the ``host`` and ``sim``
        devices), "cuda", "opencl", ...; "" for any device. VMs refuse
        devices of another kind."""
        return self._core.device_code

    @property
    def shape_funcs(self) -> list[str]:
        """The ops whose shape functions the program calls."""
        return list(self._core.shape_funcs)

    @property
    def shape_func_masks(self) -> dict[str, list[bool]]:
        """Per op the program calls a shape function of, the data-dependence
        mask it was compiled under: the inputs whose values it copies for
        that shape function. A VM refuses the executable in a process that
        registers another mask for an op the executable does not carry."""
        return dict(self._core.shape_func_masks)

    @property
    def carried_shape_funcs(self) -> list[dict]:
        """The shape functions written in Python that this executable
        carries, compiled ahead to host code in its kernel library. Per op:
        ``{"op", "mask", "builds": [{"signature", "kernel", "out_ndims"}]}``,
        one build per input signature ("float32:4,int64:1") its program
        calls it with, named ``kernel`` in the library. VMs use these, with
        this mask, whatever the registry holds."""
        ops, kernels = self._core.shape_funcs, self._core.kernels
        return [{"op": ops[c["shape_func"]], "mask": c["mask"],
                 "builds": [{"signature": b["signature"], "kernel": kernels[b["kernel"]], "out_ndims": b["out_ndims"]}
                            for b in c["builds"]]}
                for c in self._core.carried_shape_funcs]

    @property
    def sources(self) -> dict[str, list[tuple[int, str]]]:
        """Per function, what its code was generated for: ``(first
        instruction, source)`` marks, a source holding until the next mark
        ("ONNX node 'x' (Concat)"; "" for nothing the model names). An error
        an instruction raises starts with its source."""
        return self._core.sources

    def as_text(self, operand_names: bool = False) -> str:
        """The disassembled bytecode of every function; ``operand_names``
        writes each operand as ``name=value`` (the names of isa.def)."""
        return self._core.disassemble(operand_names)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the bytecode to ``path`` and, if it has one, the kernel
        library beside it as ``<path>.kernels.so``."""
        path = os.fspath(path)
        library_name, target = "", ""
        if self._library is not None:
            library_name = os.path.basename(path) + _LIBRARY_SUFFIX
            target = os.path.join(os.path.dirname(path) or ".", library_name)
            if self._library_path is not None:  # a library loaded from a file is copied
                shutil.copyfile(self._library_path, target)
            else:
                self._library.export_library(target)
        else:
            import tvm_ffi

            loose = [n for n in self._kernels if tvm_ffi.get_global_func(n, allow_missing=True) is None]
            if loose:
                raise ValueError(
                    f"cannot save: kernels {loose} were given as functions without a library; "
                    "build with library=<tvm module> or register them as global functions")
        core = _core.Executable.deserialize(self._core.serialize())
        core.set_kernel_library(library_name, target)  # with the digest of the file just written
        core.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Executable:
        """Reads and verifies an executable and loads the kernel library saved
        beside it; raises ``ExecutableFormatError`` for a truncated or corrupt
        file, ``FileNotFoundError`` when the library is missing, and
        ``ValueError`` when the library beside it is not the one it was
        saved with (another size or digest: truncated, or another
        executable's), before the library is loaded."""
        path = os.fspath(path)
        core = _core.Executable.load(path)
        if core.kernel_library:
            import tvm_ffi

            if core.device_code == "cuda":
                _core.load_cuda_runtime()  # its module loader reads the device code; raises naming what is missing

            loaded = {}

            def receive(library_path, library, kernels):
                loaded.update(library_path=library_path, library=library, kernels=dict(kernels))

            _core.load_kernel_library(path, core, tvm_ffi.convert(receive))
            return cls(core, loaded["kernels"], loaded["library"], library_path=loaded["library_path"])
        return cls(core)

    def __repr__(self) -> str:
        return f"shapefn.Executable(functions={self.function_names}, kernels={len(self.kernel_names)})"
