"""Seconds to a model's first detections, cold and warm: two fresh
processes in turn compile one of torchvision's detection models for a
device into one kernel cache (empty for the first) and run it twice on a
320x320 image.

    python tools/warm_start.py [--device opencl] [--data tests/data] MODEL

Prints one JSON object per process: compile seconds, kernels built, first
and second inference seconds. On OpenCL the first inference includes the
OpenCL driver's build of the programs (PoCL caches them in ~/.cache/pocl;
set POCL_CACHE_DIR to an empty directory for a cold one)."""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

_ONE_PROCESS = """
import json, pathlib, sys, time
import numpy as np
import shapefn
from shapefn.compiler.machine_code import kernel_cache
from shapefn.bench.models import materialize

data, name, device, cache = sys.argv[1:]
shapefn.set_cache_dir(cache)
module = shapefn.from_onnx(materialize(pathlib.Path(data), name))
start = time.perf_counter()
exe = shapefn.compile(module, device)
result = {"compile_s": round(time.perf_counter() - start, 1), "kernels_built": kernel_cache.stats().misses}
vm = shapefn.VirtualMachine(exe, device)
image = np.random.default_rng(0).uniform(0, 1, (3, 320, 320)).astype(np.float32)
for run in ("first_inference_s", "second_inference_s"):
    start = time.perf_counter()
    vm(image)
    result[run] = round(time.perf_counter() - start, 2)
print(json.dumps(result))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="opencl")
    parser.add_argument("--data", default=str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"))
    parser.add_argument("model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        for start in ("cold", "warm"):
            done = subprocess.run([sys.executable, "-c", _ONE_PROCESS, args.data, args.model, args.device, cache],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"the {start} process failed:\n{done.stderr[-3000:]}")
            print(json.dumps({start: json.loads(done.stdout.splitlines()[-1])}), flush=True)


if __name__ == "__main__":
    main()
