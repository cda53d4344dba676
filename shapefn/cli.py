"""The ``shapefn`` command: compile, run and profile models, list devices,
manage the kernel cache.

    shapefn compile MODEL.onnx -o MODEL.sfx [--device host] [--shape NAME=1x3x320x320 ...] [--cuda-arch sm_90 ...]
    shapefn run MODEL.onnx|MODEL.sfx --input x.npy ... [--device host] [--output-dir DIR] [--repeat N]
    shapefn profile MODEL.onnx|MODEL.sfx --input x.npy ... [--trace trace.json]
    shapefn bundle MODEL.sfx DIR
    shapefn devices
    shapefn cache info | prune [--max-size 2G] [--older-than 30d] | clear

Exit status: 0 on success; 1 when the model or the run fails (one line on
stderr naming the error; the traceback too with ``--verbose``); 2 on a usage
error (a bad option, a file that does not exist).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

from .runtime import device_kinds

DEVICES = device_kinds.offered()
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(Exception):
    """A command line that cannot be acted on (exit status 2)."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # (a usage error exits with status 2)
    try:
        args.handler(args)
    except BrokenPipeError:  # (the reader went away, as `| head` does): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except UsageError as e:
        parser.exit(2, f"shapefn {args.command}: error: {e}\n")
    except Exception as e:  # noqa: BLE001 - every failure of a model or a run is reported the same way
        if args.verbose:
            traceback.print_exc()
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"shapefn {args.command}: {type(e).__name__}{': ' + message if message else ''}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shapefn", description="Compile, run and profile models; list devices; manage the kernel cache.",
        epilog="Exit status: 0 on success, 1 when the model or the run fails, 2 on a usage error.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", action="store_true", help="print the traceback of an error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compiling = argparse.ArgumentParser(add_help=False, parents=[common])
    compiling.add_argument("--quiet", action="store_true",
                           help="no progress on stderr (shown by default when stderr is a terminal)")
    compiling.add_argument("--cuda-arch", action="append", type=_cuda_arch, metavar="SM",
                           help="with --device cuda: a GPU architecture to carry machine code for, e.g. sm_90 "
                                "(repeatable; default sm_80, sm_86, sm_89, sm_90 and this machine's GPU's)")

    p = commands.add_parser("compile", parents=[compiling], help="import an ONNX model, compile it, save it")
    p.add_argument("model", help="an ONNX model")
    p.add_argument("-o", "--output", required=True, help="the executable to write (its kernels go beside it)")
    _device_option(p)
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="a fixed shape for an input, e.g. image=1x3x320x320 (repeatable)")
    p.set_defaults(handler=_compile)

    for name, help_text in (("run", "run a model and write its outputs"),
                            ("profile", "run a model once under the profiler")):
        p = commands.add_parser(name, parents=[compiling], help=help_text)
        p.add_argument("model", help="an ONNX model or a saved executable (.sfx)")
        p.add_argument("--input", action="append", default=[], metavar="FILE.npy",
                       help="an input, in the model's input order (repeatable)")
        _device_option(p)
        p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                       help="a fixed input shape when MODEL is ONNX (repeatable)")
        if name == "run":
            p.add_argument("--output-dir", help="write each output as output_<i>.npy here")
            p.add_argument("--repeat", type=_positive, default=1, help="timed runs after the first (default 1)")
            p.set_defaults(handler=_run)
        else:
            p.add_argument("--trace", help="write a Chrome/Perfetto trace here")
            p.set_defaults(handler=_profile)

    p = commands.add_parser("bundle", parents=[common],
                            help="copy an executable with the runner and runtime libraries into a folder "
                                 "that runs it without Python")
    p.add_argument("executable", help="a saved executable (.sfx; its kernel library beside it)")
    p.add_argument("directory", help="the folder to write (new or empty)")
    p.set_defaults(handler=_bundle)

    p = commands.add_parser("devices", parents=[common], help="list the devices shapefn can run on")
    p.set_defaults(handler=_devices)

    p = commands.add_parser("cache", parents=[common], help="the kernel cache: info, prune, clear")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("info", help="where the cache is, its size and entries")
    prune = actions.add_parser("prune", help="remove the least recently used entries")
    prune.add_argument("--max-size", type=_size, help="keep at most this many bytes (e.g. 500M, 2G)")
    prune.add_argument("--older-than", type=_age, help="remove entries unused for this long (e.g. 12h, 30d)")
    actions.add_parser("clear", help="remove every entry")
    p.set_defaults(handler=_cache)
    return parser


def _device_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="host",
                   help=f"where to run: {', '.join(DEVICES)} or a device such as opencl:1 (default host)")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _cuda_arch(text: str) -> str:
    if not re.fullmatch(r"sm_\d+[af]?", text):
        raise argparse.ArgumentTypeError(f"not a CUDA architecture: {text!r} (e.g. sm_90)")
    return text


def _size(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500M, 2G)")
    return int(float(match[1]) * _SIZE_UNITS[match[2].upper()])


def _age(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not an age: {text!r} (e.g. 12h, 30d)")
    return float(match[1]) * _AGE_UNITS[match[2]]


def _existing(path: str, what: str) -> Path:
    found = Path(path)
    if not found.is_file():
        raise UsageError(f"{what} {path!r} does not exist")
    return found


def _shapes(specs: list[str]) -> dict[str, list[int]] | None:
    shapes = {}
    for spec in specs:
        name, _, dims = spec.partition("=")
        if not name or not re.fullmatch(r"\d+(x\d+)*", dims):
            raise UsageError(f"--shape takes NAME=DIMS such as image=1x3x320x320, got {spec!r}")
        shapes[name] = [int(d) for d in dims.split("x")]
    return shapes or None


def _executable(args):
    """The executable ``args.model`` names: loaded (.sfx) or compiled (ONNX)."""
    import shapefn

    model = _existing(args.model, "model")
    if model.suffix == ".onnx":
        return _compiled(args, model)
    for option, given in (("--shape", args.shape), ("--cuda-arch", args.cuda_arch)):
        if given:
            raise UsageError(f"{option} applies to ONNX models only: an executable's were fixed when compiled")
    return shapefn.Executable.load(model)


def _compiled(args, model: Path):
    """The ONNX model at ``model`` imported and compiled for ``--device``,
    with progress unless ``--quiet``."""
    import shapefn

    if args.cuda_arch and not args.device.startswith("cuda"):
        raise UsageError(f"--cuda-arch applies to --device cuda, not {args.device}")
    return shapefn.compile(shapefn.from_onnx(str(model), _shapes(args.shape)), args.device,
                           progress=False if args.quiet else "auto", cuda_archs=args.cuda_arch)


def _vm(args, exe):
    import shapefn

    return shapefn.VirtualMachine(exe, args.device)


def _inputs(args) -> list:
    import numpy as np

    return [np.load(_existing(path, "input")) for path in args.input]


def _outputs(result) -> list:
    items = result if isinstance(result, (list, tuple)) else [result]
    return [item.numpy() for item in items]


def _compile(args) -> None:
    model = _existing(args.model, "model")
    folder = Path(args.output).parent
    if not folder.is_dir():  # said before the compile, not after it
        raise UsageError(f"the folder {str(folder)!r} of --output does not exist")
    start = time.perf_counter()
    exe = _compiled(args, model)
    seconds = time.perf_counter() - start
    exe.save(args.output)
    print(json.dumps({"output": args.output, "device": args.device, "kernels": len(exe.kernel_names),
                      "compile_s": round(seconds, 3)}))


def _run(args) -> None:
    import numpy as np

    exe = _executable(args)
    vm, inputs = _vm(args, exe), _inputs(args)
    start = time.perf_counter()
    outputs = _outputs(vm(*inputs))
    first = time.perf_counter() - start
    vm.reset_counters()
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        _outputs(vm(*inputs))
        times.append(time.perf_counter() - start)
    counters = vm.counters
    if args.output_dir:
        directory = Path(args.output_dir)
        directory.mkdir(parents=True, exist_ok=True)
        for i, array in enumerate(outputs):
            np.save(directory / f"output_{i}.npy", array)
    per_call = {k: _per_call(v, args.repeat) for k, v in counters.items()}
    print(json.dumps({
        "device": args.device,
        "outputs": ["x".join(map(str, a.shape)) + f" {a.dtype}" for a in outputs],
        "first_call_s": round(first, 6),
        "wall_s": {"min": round(min(times), 6), "median": round(sorted(times)[len(times) // 2], 6),
                   "repeat": args.repeat},
        "counters_per_call": per_call,
    }, indent=1))


def _per_call(total, repeat: int):
    if isinstance(total, int) and total % repeat == 0:
        return total // repeat
    return total / repeat


def _profile(args) -> None:
    exe = _executable(args)
    vm, inputs = _vm(args, exe), _inputs(args)
    vm(*inputs)  # (compiles shape functions and warms the caches: the profiled call is a steady one)
    report = vm.profile(*inputs)
    print(report)
    if args.trace:
        report.to_chrome_trace(args.trace)
        print(f"trace: {args.trace} (open it in https://ui.perfetto.dev)")


def _bundle(args) -> None:
    from .runtime.bundle import bundle

    _existing(args.executable, "executable")
    try:
        print(bundle(args.executable, args.directory))
    except FileExistsError as e:  # a folder in use: a usage error, not a failed bundle
        raise UsageError(str(e)) from e


_DEVICE_DETAILS = ("device", "platform", "compute_units", "global_mem_bytes")


def _devices(args) -> None:
    import shapefn

    for entry in shapefn.list_devices():
        details = [f"{key}={entry[key]}" for key in _DEVICE_DETAILS if key in entry]
        print("  ".join([f"{entry['name']:<10}", f"{entry['kind']:<7}", *details]).rstrip())
    reason = shapefn.opencl_unavailable_reason()
    if reason:
        print(f"(no OpenCL device: {reason})")


def _cache(args) -> None:
    from .runtime import config

    root = config.cache_dir()
    if args.action == "info":
        entries = _entries(root)
        print(json.dumps({"directory": str(root), "entries": len(entries),
                          "bytes": sum(size for _, size, _ in entries)}))
    elif args.action == "clear":
        removed = _remove([path for path, _, _ in _entries(root)])
        print(json.dumps({"directory": str(root), "removed": removed}))
    else:
        if args.max_size is None and args.older_than is None:
            raise UsageError("prune needs --max-size or --older-than")
        entries = sorted(_entries(root), key=lambda e: e[2])  # least recently used first
        now, doomed, total = time.time(), [], sum(size for _, size, _ in entries)
        for path, size, used in entries:
            old = args.older_than is not None and now - used > args.older_than
            big = args.max_size is not None and total > args.max_size
            if old or big:
                doomed.append(path)
                total -= size
        removed = _remove(doomed)
        print(json.dumps({"directory": str(root), "removed": removed, "bytes": total}))


def _entries(root: Path) -> list[tuple[Path, int, float]]:
    """Every cache entry (a file) under ``root``: path, size, last use
    (access or modification time, the later). Files being written (the
    cache writes under a temporary name starting with "." and renames) are
    not entries yet."""
    found = []
    for directory, _, files in os.walk(root):
        for name in files:
            if name.startswith("."):
                continue
            path = Path(directory) / name
            try:
                st = path.stat()
            except FileNotFoundError:  # (removed by another process meanwhile)
                continue
            found.append((path, st.st_size, max(st.st_atime, st.st_mtime)))
    return found


def _remove(paths: list[Path]) -> int:
    """Removes ``paths``; an entry another process removed first is not an
    error. A process that has a removed library loaded keeps its mapping;
    a compile that misses an entry builds it again."""
    removed = 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += 1
    return removed


if __name__ == "__main__":
    sys.exit(main())
