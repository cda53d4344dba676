"""Cold compile seconds of torchvision's detection models on ``host``:
``shapefn.compile(shapefn.from_onnx(model), "host")``, each model into an
empty kernel cache of its own, in one process.

    python tools/cold_compile.py [--data tests/data] MODEL...

Run it with two checkouts installed in turn to compare compilers on one
machine (docs/cpu_kernels.md)."""
from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

import shapefn
from shapefn.bench.models import materialize
from shapefn.runtime import config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"))
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    seconds = {}
    for name in args.models:
        proto = materialize(pathlib.Path(args.data), name)
        with tempfile.TemporaryDirectory() as cache:
            config.set_cache_dir(cache)
            try:
                start = time.perf_counter()
                shapefn.compile(shapefn.from_onnx(proto), "host")
                seconds[name] = round(time.perf_counter() - start, 1)
            finally:
                config.set_cache_dir(None)
    print(json.dumps({"cold_compile_s": seconds}))


if __name__ == "__main__":
    main()
