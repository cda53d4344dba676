"""Detection models end to end: the weight-free graphs of torchvision's
detection models in tests/data (materialized with seed 0): by default
SSD-lite and Faster R-CNN; ``--models`` names any of them (RetinaNet, FCOS,
SSD300, Keypoint and Mask R-CNN at opsets 11 and 17, too).

Per model: compile seconds and kernels compiled with an empty kernel cache
(cold) and, in a new process, with the cache that filled (warm); per input
size: inference wall seconds (median of ``--repeat``) and the counters of one
inference in ``per-op`` and ``per-input`` modes, with onnxruntime's wall
seconds for reference.

``--device sim`` (default) runs on the modelled device; ``--device opencl``
on a real OpenCL device (on PoCL that is the CPU: its times are CPU times,
not a GPU's), where the first inference also builds the OpenCL programs
(``first_inference_s``).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from .. import config, devices, kernel_cache
from ..compiler import compile as compile_relax
from ..frontend import from_onnx
from ..vm import VirtualMachine

DEFAULT_MODELS = ["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"]
SIZES = [(320, 320), (256, 384)]


def _data_dir(path: str | None) -> pathlib.Path:
    if path:
        return pathlib.Path(path)
    here = pathlib.Path(__file__).resolve()
    for candidate in (here.parents[2] / "tests" / "data", pathlib.Path.cwd() / "tests" / "data"):
        if (candidate / "materialize.py").exists():
            return candidate
    raise SystemExit("models: cannot find tests/data (run from the repository, or pass --data)")


def materialize(data: pathlib.Path, name: str):
    """The model ``name`` from ``data``'s weight-free graph, with seed-0 weights."""
    import onnx

    spec = importlib.util.spec_from_file_location("materialize", data / "materialize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = onnx.load(data / f"{name}.graph.onnx")
    module.materialize_model(model, seed=0)  # refills the weights in place
    return model


def _timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_compile(name: str, data: pathlib.Path, device: str = "sim"):
    """Compiles model ``name`` for ``device``; returns the executable, the
    seconds it took (ONNX import included) and how many kernels it compiled."""
    proto = materialize(data, name)
    misses = kernel_cache.stats().misses
    start = time.perf_counter()
    exe = compile_relax(from_onnx(proto), device)
    return exe, time.perf_counter() - start, kernel_cache.stats().misses - misses


def _timed_compile_in_new_process(name: str, data: pathlib.Path, cache: str, device: str) -> tuple[float, int]:
    """``timed_compile`` in a fresh interpreter (nothing cached in memory)."""
    code = ("import json, pathlib, sys; from shapefn import config; from shapefn.bench.models import timed_compile; "
            "config.set_cache_dir(sys.argv[3]); "
            "_, seconds, built = timed_compile(sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[4]); "
            "print(json.dumps([seconds, built]))")
    proc = subprocess.run([sys.executable, "-c", code, name, str(data), cache, device], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"models: the warm compile of {name} failed:\n{proc.stderr[-3000:]}")
    seconds, built = json.loads(proc.stdout.splitlines()[-1])
    return seconds, built


def measure(name: str, data: pathlib.Path, repeat: int, device: str = "sim") -> dict:
    import onnxruntime as ort

    proto = materialize(data, name)
    result: dict = {"device": device}
    with tempfile.TemporaryDirectory() as cache:
        config.set_cache_dir(cache)
        try:
            exe, result["compile_cold_s"], result["kernels_built_cold"] = timed_compile(name, data, device)
        finally:
            config.set_cache_dir(None)
        result["compile_warm_s"], result["kernels_built_warm"] = _timed_compile_in_new_process(
            name, data, cache, device)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    target = devices.sim() if device == "sim" else devices.device(device)
    for h, w in SIZES:
        image = np.random.default_rng(1).uniform(0, 1, (3, h, w)).astype(np.float32)
        entry: dict = {}
        start = time.perf_counter()
        [t.numpy() for t in VirtualMachine(exe, target)(image)]
        entry["first_inference_s"] = time.perf_counter() - start
        for mode in ("per-op", "per-input"):
            vm = VirtualMachine(exe, target, dependence=mode)
            vm(image)
            vm.reset_counters()
            vm(image)
            entry[mode.replace("-", "_")] = vm.counters
        vm = VirtualMachine(exe, target)
        entry["wall_s"] = _timed(lambda: [t.numpy() for t in vm(image)], repeat)
        entry["onnxruntime_wall_s"] = _timed(lambda: session.run(None, {"image": image}), repeat)
        result[f"{h}x{w}"] = entry
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS,
                        help="graphs of --data by name (<name>.graph.onnx); default: " + " ".join(DEFAULT_MODELS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", help="directory with the .graph.onnx files and materialize.py")
    parser.add_argument("--device", default="sim", help="sim (modelled, default) or opencl[:N] (a real device)")
    args = parser.parse_args(argv)
    data = _data_dir(args.data)
    available = sorted(p.name[: -len(".graph.onnx")] for p in data.glob("*.graph.onnx"))
    unknown = [name for name in args.models if name not in available]
    if unknown:
        parser.error(f"no graph for {', '.join(unknown)} in {data} (there are: {', '.join(available)})")
    results = {name: measure(name, data, args.repeat, args.device) for name in args.models}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        print(f"{name} on {r['device']}: compile {r['compile_cold_s']:.1f} s cold ({r['kernels_built_cold']} kernels built), "
              f"{r['compile_warm_s']:.1f} s warm ({r['kernels_built_warm']} built)")
        for size in (f"{h}x{w}" for h, w in SIZES):
            e = r[size]
            print(f"  {size}: {e['wall_s']:.3f} s (onnxruntime {e['onnxruntime_wall_s']:.3f} s); "
                  f"d2h bytes per-op {e['per_op']['d2h_bytes']:,} / per-input {e['per_input']['d2h_bytes']:,}; "
                  f"syncs {e['per_input']['syncs']}")
