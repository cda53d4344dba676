"""shapefn in TVM's VM: per program, what one call moves from the device to
the host, how often it waits on the device, and its wall time, in three
configurations side by side:

* ``tvm_default``: ``tvm.compile`` with TVM's default pipeline, run by
  ``relax.VirtualMachine``;
* ``shapefn_pipeline``: ``tvm.compile(..., relax_pipeline=shapefn.compiler.relax_vm.pipeline(target))``,
  run by the same ``relax.VirtualMachine``;
* ``shapefn_vm``: ``shapefn.compile`` and shapefn's VM.

On ``--device opencl`` every copy and sync goes through shapefn's OpenCL
runtime whichever VM makes it, so ``d2h_copies``, ``d2h_bytes`` and
``syncs`` are counted at the device (``shapefn.device_counters``) for all
three; on PoCL the device is the CPU, so times are CPU times, not a GPU's.
On ``--device cpu`` nothing crosses and only times are reported. Results are
checked against numpy before anything is timed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from ..compiler.compile import compile as shapefn_compile
from ..compiler.relax_vm import pipeline, runnable
from ..runtime import devices
from ..runtime.vm import VirtualMachine


@I.ir_module
class Slice:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), begin: R.Tensor((2,), "int64"), end: R.Tensor((2,), "int64"),
             strides: R.Tensor((2,), "int64")):
        return R.dynamic_strided_slice(x, begin, end, strides)


@I.ir_module
class NonZero:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")):
        return R.nonzero(R.greater(x, R.const(0.0, "float32")))


@I.ir_module
class Unique:
    @R.function
    def main(x: R.Tensor(("n",), "float32")):
        return R.unique(x, sorted=True)


@I.ir_module
class TwoFilters:
    """Two independent count-sized ops: their counts can cross in one sync."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")):
        above = R.nonzero(R.greater(x, R.const(0.5, "float32")))
        below = R.nonzero(R.less(x, R.const(-0.5, "float32")))
        return above, below


@I.ir_module
class ReshapeFromTensor:
    @R.function
    def main(x: R.Tensor(("n",), "float32"), shape: R.Tensor((2,), "int64")):
        return R.reshape(x, R.tensor_to_shape(shape))


@I.ir_module
class ShapeArithmetic:
    """ONNX's ``Shape -> Gather -> Mul/Div -> Concat -> Reshape``: integer
    tensors computed from a shape, a target shape read from one, and a value
    computed from the shape used by a kernel on the data."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")):
        size = R.shape_to_tensor(R.shape_of(x))
        rows = R.take(size, R.const([0], "int64"), axis=0)
        cols = R.take(size, R.const([1], "int64"), axis=0)
        target = R.concat([R.floor_divide(rows, R.const(2, "int64")), R.multiply(cols, R.const(2, "int64"))])
        scaled = R.multiply(x, R.astype(cols, "float32"))
        return R.reshape(scaled, R.tensor_to_shape(target)), target


def _slice_args(rng, rows: int):
    return [rng.standard_normal((rows, 64)).astype("float32"), np.array([1, 0]), np.array([rows - 1, 64]),
            np.array([3, 2])]


# name -> (module, inputs at a size: (rng, rows) -> arrays, numpy's results)
PROGRAMS = {
    "strided_slice": (Slice, _slice_args, lambda x, b, e, s: [x[b[0]:e[0]:s[0], b[1]:e[1]:s[1]]]),
    "nonzero": (NonZero, lambda rng, rows: [rng.standard_normal((rows, 64)).astype("float32")],
                lambda x: [np.stack(np.nonzero(x > 0))]),
    "unique": (Unique, lambda rng, rows: [rng.integers(0, 40, rows * 8).astype("float32")],
               lambda x: [np.unique(x)]),
    "two_filters": (TwoFilters, lambda rng, rows: [rng.standard_normal((rows, 64)).astype("float32")],
                    lambda x: [np.stack(np.nonzero(x > 0.5)), np.stack(np.nonzero(x < -0.5))]),
    "reshape_from_tensor": (ReshapeFromTensor,
                            lambda rng, rows: [np.arange(rows * 64, dtype="float32"), np.array([rows, 64])],
                            lambda x, s: [x.reshape(*s)]),
    "shape_arithmetic": (ShapeArithmetic, lambda rng, rows: [rng.standard_normal((rows, 64)).astype("float32")],
                         lambda x: [(x * np.float32(x.shape[1])).reshape(x.shape[0] // 2, -1),
                                    np.array([x.shape[0] // 2, 2 * x.shape[1]])]),
}
CONFIGURATIONS = ("tvm_default", "shapefn_pipeline", "shapefn_vm")
_COUNTED = ("d2h_copies", "d2h_bytes", "syncs")


def as_numpy(result) -> list:
    items = result if isinstance(result, (list, tuple, tvm.ir.Array)) else [result]
    return [np.asarray(item.numpy()) for item in items]


def runner(configuration: str, mod: tvm.IRModule, device: str):
    """A function running ``mod`` once on its inputs (numpy arrays, uploaded
    once), as ``configuration`` does, and returning its outputs unread."""
    target = "opencl" if device == "opencl" else "llvm"
    if configuration == "shapefn_vm":
        vm = VirtualMachine(shapefn_compile(mod, device if device == "opencl" else "host"),
                            device if device == "opencl" else "host")
        return lambda args: vm(*args)
    relax_pipeline = pipeline(target) if configuration == "shapefn_pipeline" else "default"
    dev = tvm.opencl(0) if device == "opencl" else tvm.cpu(0)
    vm = relax.VirtualMachine(runnable(tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)), dev)
    uploaded: dict = {}

    def run(args):
        key = tuple(id(a) for a in args)
        if key not in uploaded:
            uploaded.clear()
            uploaded[key] = [tvm.runtime.tensor(a, dev) for a in args]
        return vm["main"](*uploaded[key])

    return run


def measure(name: str, device: str, rows: int, repeat: int) -> dict:
    mod, make_args, reference = PROGRAMS[name]
    args = make_args(np.random.default_rng(0), rows)
    expected = reference(*args)
    result: dict = {"inputs": ",".join("x".join(map(str, a.shape)) for a in args)}
    for configuration in CONFIGURATIONS:
        run = runner(configuration, mod, device)
        got = as_numpy(run(args))
        if len(got) != len(expected) or any(not np.array_equal(g, e) for g, e in zip(got, expected)):
            raise SystemExit(f"relax_vm: {name} under {configuration} does not match numpy")
        entry: dict = {}
        if device == "opencl":
            devices.reset_device_counters("opencl")
            run(args)
            counts = devices.device_counters("opencl")
            entry.update({key: counts[key] for key in _COUNTED})
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            as_numpy(run(args))  # (outputs read, so every configuration waits for its result)
            times.append(time.perf_counter() - start)
        entry["wall_s"] = statistics.median(times)
        result[configuration] = entry
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench relax_vm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--device", default="opencl", choices=("opencl", "cpu"))
    parser.add_argument("--rows", type=int, default=4096, help="rows of each program's input (64 columns)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    args = parser.parse_args(argv)
    results = {name: measure(name, args.device, args.rows, args.repeat) for name in args.programs}
    if args.json:
        print(json.dumps({"device": args.device, "programs": results}, indent=2))
        return
    for name, r in results.items():
        print(f"{name} ({r['inputs']}) on {args.device}:")
        for configuration in CONFIGURATIONS:
            e = r[configuration]
            counted = ", ".join(f"{key} {e[key]:,}" for key in _COUNTED if key in e)
            print(f"  {configuration:17s} {counted + '; ' if counted else ''}{e['wall_s'] * 1e3:.3f} ms")
