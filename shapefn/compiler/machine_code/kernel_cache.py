"""On-disk cache of TVM-compiled kernels: each kernel keyed by its content,
compiled in a batch with others into one object file, and linked into one
shared library per module.

Compiling kernels is most of the time a model takes to compile. Keying each
kernel on its own (rather than the whole module) lets a compile reuse every
kernel it has seen before even when others changed: TVM's legalization is
not deterministic in a few kernels of a large model (the order of size
parameters and of the terms of size expressions varies between processes),
and a model edited in one op renames the kernels after it.

Kernels come scheduled for their target (``compiler/schedules/target_schedule.py``);
the cache compiles them as they are. A kernel's key is TVM's structural
hash of its PrimFunc without its name (the equality TVM itself uses to merge
identical kernels: it ignores variable names) plus the target, the TVM pass
options in effect, TVM's version and the version of the schedules applied.
For CPU targets the kernels a compile lacks are compiled in batches of up to
16, one module per batch (TVM and LLVM spend per module about what a small
kernel costs); each kernel has a symbol made from its key and its batch's,
its entry names its batch, and the linker gives each name of the module an
alias to its kernel's symbol (``--defsym``), so one object serves every name
and module. Device code is a module imported by
the host code, which objects cannot carry: for GPU targets the module is
compiled whole and only the library is cached. Libraries are keyed by the
module's names and kernel keys (and, for CUDA, the architectures of its
fatbin and the nvcc that made it: ``cuda_fatbin.device_code``). Entries
are written under a temporary name and renamed, so concurrent processes see a whole entry or none; an object
carries the SHA-256 of its bytes, and a kernel whose entry or object is
missing or does not match (or a library that does not load) is rebuilt.

Layout under ``directory`` (default ``<cache_dir>/kernels``):
``objects/<kernel key>.ref`` (its batch's key), ``objects/<batch key>.o``
and ``libraries/<key>.so``.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import hashlib
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm.support import cc

from ...runtime import config, libraries
from ...runtime.progress import QUIET, Progress
from . import cuda_fatbin

_DIGEST_BYTES = hashlib.sha256().digest_size
_SYMBOL_PREFIX = "shapefn_kernel_"
_FFI_PREFIX = "__tvm_ffi_"  # what TVM's LLVM codegen names an exported function's symbol


@dataclass(frozen=True)
class Stats:
    """Kernels this process looked up in the cache: found (``hits``) and
    compiled (``misses``). Kernels of a module whose linked library was
    cached count as hits."""
    hits: int = 0
    misses: int = 0


_stats = Stats()
_stats_lock = threading.Lock()


def stats() -> Stats:
    """The counts of kernel cache hits and misses since the process started."""
    with _stats_lock:
        return _stats


def _count(hits: int, misses: int) -> None:
    global _stats
    with _stats_lock:
        _stats = Stats(_stats.hits + hits, _stats.misses + misses)


def kernel_key(func: tvm.tirx.PrimFunc, target: tvm.target.Target, schedule_version: str = "") -> str:
    """What a kernel's compiled code depends on: TVM's version, the target,
    the pass options in effect, the schedules' version and the PrimFunc's
    structure (not its name)."""
    shash = tvm_ffi.structural_hash(func.without_attr("global_symbol"))
    text = "\0".join([tvm.__version__, str(target), _pass_options(), schedule_version, f"{shash:016x}"])
    return hashlib.sha256(text.encode()).hexdigest()


def _pass_options() -> str:
    context = tvm.transform.PassContext.current()
    config = sorted((str(k), str(v)) for k, v in context.config.items())
    return f"{context.opt_level} {list(context.required_pass)} {list(context.disabled_pass)} {config}"


def build(mod: tvm.IRModule, target, schedule_version: str = "",
          directory: Path | None = None, progress: Progress = QUIET,
          cuda_archs: Sequence[str] | None = None) -> tuple[object, Path]:
    """The compiled library of ``mod``'s PrimFuncs for ``target`` and the
    file it lives in; each function is callable by its name in ``mod``.
    ``schedule_version`` is that of the schedules that made the PrimFuncs
    (``target_schedule.schedule``'s), empty for kernels built as written.
    A CUDA library holds SASS for ``cuda_archs`` (by default the target's
    or the usual ones: ``cuda_fatbin.architectures``).

    When this process has no runtime for the target's device (a GPU build
    on a machine without the GPU runtime), the library is cached for one
    that has, and the module is returned as built: its device code can be
    inspected, not run.

    A cache that cannot be written (read-only, full, not permitted) is not
    an error: the library is built in a directory of this process's own,
    with a warning naming why."""
    try:
        directory = Path(directory) if directory is not None else config.cache_dir() / "kernels"
        return _build(mod, target, schedule_version, directory, progress, cuda_archs)
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        warnings.warn(f"shapefn: the kernel cache cannot be written ({e}); building without it", stacklevel=2)
    return _build(mod, target, schedule_version, _private_directory(), progress, cuda_archs)


# Why a cache directory may refuse a write: it is read-only, full, not ours,
# or its path runs through a file.
_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}


@functools.cache
def _private_directory() -> Path:
    """A directory of this process's own for libraries the cache could not
    take; removed when the process exits (loaded libraries stay mapped)."""
    path = Path(tempfile.mkdtemp(prefix="shapefn-kernels-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _build(mod: tvm.IRModule, target, schedule_version: str, directory: Path,
           progress: Progress, cuda_archs: Sequence[str] | None) -> tuple[object, Path]:
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    cuda = target.kind.name == "cuda"
    if cuda:
        cuda_archs = cuda_fatbin.architectures(target, cuda_archs)
    funcs = {gv.name_hint: func for gv, func in mod.functions.items()}
    keys = {name: kernel_key(func, target, schedule_version) for name, func in funcs.items()}
    device_code = cuda_fatbin.device_code(cuda_archs) if cuda else ""
    library_key = hashlib.sha256(
        ("".join(f"{n}\0{keys[n]}\0" for n in sorted(keys)) + device_code).encode()).hexdigest()
    path = directory / "libraries" / f"{library_key}.so"
    library = _load_library(path, funcs)
    if library is not None:
        _count(len(set(keys.values())), 0)
        return library, path
    if target.kind.name == "llvm":
        objects = _objects({keys[n]: f for n, f in funcs.items()}, target, directory / "objects", progress)
        _write_library(path, lambda temp: _link(objects, keys, temp))
    else:
        # Device code is a module imported by the host code, which objects
        # cannot carry: the module is compiled whole (and cached as a library).
        _count(0, len(set(keys.values())))
        with progress.kernels(1, f"{target.kind.name} module of {len(funcs)} kernels built"):
            compiled = _build_whole(funcs, target)
            progress.advance()
        if cuda:
            compiled = cuda_fatbin.with_fatbin(compiled, cuda_archs)
        _write_library(path, compiled.export_library)
        if not _loadable(compiled):
            if not all(compiled.implements_function(name, query_imports=True) for name in funcs):
                raise RuntimeError(f"kernel library {path} was just built but lacks functions of {sorted(funcs)}")
            return compiled, path
    library = _load_library(path, funcs)
    if library is None:
        raise RuntimeError(f"kernel library {path} was just built but does not load")
    return library, path


def _load_library(path: Path, funcs) -> object | None:
    """The library at ``path`` if it is whole (its size and SHA-256 those
    recorded beside it when it was written), loads and has every function,
    else None. A library is checked before it is mapped: a truncated one
    would fault the process (SIGBUS) when loaded."""
    if not path.exists() or not _is_whole(path):
        return None
    try:
        library = libraries.load(path)
    except Exception:  # noqa: BLE001 - an unreadable entry is rebuilt and replaced
        return None
    if not all(library.implements_function(name, query_imports=True) for name in funcs):
        return None
    return library


def _digest_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _file_digest(path: Path) -> str:
    """"<size> <SHA-256>" of the file at ``path``."""
    data = path.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def _write_library(path: Path, write) -> None:
    """Writes a library with ``write(temp_name)``, then its digest beside it
    (both renamed into place): a library without its digest, or one that
    does not match it, is rebuilt."""
    _write_atomically(path, write)
    digest = _file_digest(path)
    _write_atomically(_digest_path(path), lambda temp: Path(temp).write_text(digest))


def _is_whole(path: Path) -> bool:
    """Whether the library at ``path`` is the one its digest names; one that
    is not is removed (entries are renamed into place whole, so it is no
    write in progress: it was truncated or overwritten)."""
    try:
        whole = _digest_path(path).read_text() == _file_digest(path)
    except OSError:
        return False
    if not whole:
        for stale in (path, _digest_path(path)):
            with contextlib.suppress(OSError):
                stale.unlink()
    return whole


def _build_whole(funcs: dict, target):
    """``funcs`` built as one module for ``target``; if TVM fails, the
    error names the kernels that fail on their own."""
    kind = target.kind.name
    if tvm_ffi.get_global_func(f"target.build.{kind}", allow_missing=True) is None:
        raise RuntimeError(f"this TVM has no code generator for {kind} (no 'target.build.{kind}')")
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name) for name, func in funcs.items()})
    try:
        return tvm.tirx.build(mod, target)
    except Exception as error:  # noqa: BLE001 - re-raised with the kernels named
        failing = []
        for name in funcs:
            try:
                tvm.tirx.build(tvm.IRModule({name: mod[name]}), target)
            except Exception:  # noqa: BLE001 - what is being looked for
                failing.append(name)
        shown = ", ".join(failing[:10]) + (f" ({len(failing)} in all)" if len(failing) > 10 else "")
        cause = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise RuntimeError(f"TVM cannot build kernel(s) {shown or '(none alone)'} for {kind}: {cause}") from error


def _loadable(module) -> bool:
    """Whether this process can load a library holding ``module``: a
    device module needs its device's runtime (its loader) registered."""
    return all(tvm_ffi.get_global_func(f"ffi.Module.load_from_bytes.{m.kind}", allow_missing=True) is not None
               for m in module.imports)


# Kernels compiled together into one object: TVM and LLVM have a cost per
# module (building and running their pass pipelines, emitting an object)
# comparable to compiling a small kernel, which a batch shares.
_BATCH_KERNELS = 16


@dataclass(frozen=True)
class _Entry:
    """A cached kernel: the batch object holding it and its symbol there."""
    batch: str
    data: bytes

    def symbol(self, key: str) -> str:
        return _symbol(key, self.batch)


def _symbol(key: str, batch: str) -> str:
    # Unique per batch: a kernel built again (its entry lost, or built by two
    # processes at once) lives in two objects a library may both link.
    return f"{_SYMBOL_PREFIX}{key[:32]}_{batch[:16]}"


def _objects(funcs: dict, target, directory: Path, progress: Progress = QUIET) -> dict[str, _Entry]:
    """Each kernel's (by key) cached object, compiling those the cache
    lacks in batches, one batch per core at a time (TVM releases the GIL
    while compiling)."""
    batches_read: dict[str, bytes | None] = {}
    found = {key: _read_kernel(directory, key, batches_read) for key in funcs}
    missing = [key for key, entry in found.items() if entry is None]
    _count(len(funcs) - len(missing), len(missing))
    cores = len(os.sched_getaffinity(0))
    size = max(1, min(_BATCH_KERNELS, -(-len(missing) // cores)))
    batches = [missing[i:i + size] for i in range(0, len(missing), size)]

    def compile_batch(keys: list[str]) -> list[_Entry]:
        batch = hashlib.sha256("".join(sorted(keys)).encode()).hexdigest()
        data = _compile({_symbol(key, batch): funcs[key] for key in keys}, target)
        _write_atomically(directory / f"{batch}.o",
                          lambda temp: Path(temp).write_bytes(hashlib.sha256(data).digest() + data))
        for key in keys:
            _write_atomically(directory / f"{key}.ref", lambda temp: Path(temp).write_text(batch))
        progress.advance(len(keys))
        return [_Entry(batch, data)] * len(keys)

    workers = min(len(batches), cores)
    if workers > 1:
        # The pass context is thread-local: workers get the caller's options
        # (not its instruments, which are not made for concurrent passes).
        caller = tvm.transform.PassContext.current()

        def compile_in_context(keys: list[str]) -> list[_Entry]:
            with tvm.transform.PassContext(opt_level=caller.opt_level, required_pass=list(caller.required_pass),
                                           disabled_pass=list(caller.disabled_pass), config=dict(caller.config)):
                return compile_batch(keys)

        with progress.kernels(len(missing)), ThreadPoolExecutor(workers) as pool:
            for keys, entries in zip(batches, pool.map(compile_in_context, batches)):
                found.update(zip(keys, entries))
    else:
        with progress.kernels(len(missing)):
            for keys in batches:
                found.update(zip(keys, compile_batch(keys)))
    return found


def _compile(funcs: dict, target) -> bytes:
    """The object code of ``funcs`` (by symbol) compiled as one module; if
    TVM fails, the error is that of the first kernel failing on its own."""
    try:
        module = tvm.tirx.build(tvm.IRModule({s: f.with_attr("global_symbol", s) for s, f in funcs.items()}), target)
    except Exception:
        if len(funcs) == 1:
            raise
        for symbol, func in funcs.items():
            _compile({symbol: func}, target)
        raise
    with tempfile.TemporaryDirectory(prefix="shapefn-kernel-") as workspace:
        path = os.path.join(workspace, "kernels.o")
        module.write_to_file(path)
        return Path(path).read_bytes()


def _read_kernel(directory: Path, key: str, batches_read: dict) -> _Entry | None:
    """A kernel's entry, or None when its reference or its batch object is
    missing or corrupt; ``batches_read`` holds the objects read so far."""
    try:
        batch = (directory / f"{key}.ref").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if len(batch) != 64 or not all(c in "0123456789abcdef" for c in batch):
        return None
    if batch not in batches_read:
        batches_read[batch] = _read_entry(directory / f"{batch}.o")
    data = batches_read[batch]
    return None if data is None else _Entry(batch, data)


def _read_entry(path: Path) -> bytes | None:
    """An object's code, or None when it is missing or corrupt (a corrupt
    object is removed: entries are renamed into place whole, so it is no
    write in progress)."""
    try:
        entry = path.read_bytes()
    except OSError:
        return None
    digest, data = entry[:_DIGEST_BYTES], entry[_DIGEST_BYTES:]
    if data and hashlib.sha256(data).digest() == digest:
        return data
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def _link(objects: dict[str, _Entry], keys: dict[str, str], output: str) -> None:
    """Links the kernels' batch objects into one shared library in which
    each name of ``keys`` is an alias of its kernel's symbol."""
    with tempfile.TemporaryDirectory(prefix="shapefn-link-") as workspace:
        files = []
        for batch, data in {entry.batch: entry.data for entry in objects.values()}.items():
            files.append(os.path.join(workspace, f"{batch}.o"))
            Path(files[-1]).write_bytes(data)
        aliases = [f"-Wl,--defsym,{_FFI_PREFIX}{name}={_FFI_PREFIX}{objects[key].symbol(key)}"
                   for name, key in sorted(keys.items())]
        cc.create_shared(output, files, options=aliases)


def _write_atomically(path: Path, write) -> None:
    """Calls ``write(temp_name)`` and renames the result to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(temp_name)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
