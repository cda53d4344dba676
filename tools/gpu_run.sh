#!/usr/bin/env bash
# Runs on a machine with an NVIDIA GPU what tools/gpu_prepare.sh made in DIR:
# the SSD-lite bundle with no Python packages (first call in a fresh process,
# then the median of REPEAT calls), its outputs against onnxruntime's, one
# profiled call with device times per kernel, and PyTorch eager on the same
# image and GPU. Writes its reports under $OUT (default DIR/out).
#
#   tools/gpu_run.sh [DIR=.gpu] [REPEAT=50]
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
repeat=${2:-50}
out=${OUT:-$dir/out}
mkdir -p "$out"
run() { env -i PATH=/usr/bin:/bin "$dir/bundle/bin/shapefn-run" "$dir/bundle/ssdlite.sfx" --device cuda \
          --input "$dir/image.npy" "$@"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== first call, fresh process"
run --output-dir "$out/first" > "$out/first.json" || { echo "shapefn-run failed"; exit 1; }
echo "== $repeat calls"
run --output-dir "$out/steady" --repeat "$repeat" > "$out/steady.json"
echo "== profiled (3 calls, the last profiled)"
run --output-dir "$out/profiled" --repeat 3 --profile --profile-trace "$out/trace.json" \
    > "$out/profile.json" 2> "$out/profile.txt"
head -40 "$out/profile.txt"
python3 - "$dir" "$out" <<'EOF'
import json, pathlib, sys

import numpy as np

dir, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
first, steady = (json.loads((out / f"{name}.json").read_text()) for name in ("first", "steady"))
for name in ("first", "steady", "profiled"):
    for i in range(3):
        got, want = np.load(out / name / f"out{i}.npy"), np.load(dir / f"reference{i}.npy")
        assert got.shape == want.shape and got.dtype == want.dtype, (name, i, got.shape, want.shape)
        if got.dtype.kind == "f":
            err = float(np.max(np.abs(got - want))) if got.size else 0.0
            assert err < 1e-3, (name, i, err)
        else:
            assert np.array_equal(got, want), (name, i)
print("outputs equal onnxruntime's (boxes and scores within 1e-3, labels identical)")
per_call = {k: v // steady["repeat"] for k, v in steady["counters"].items() if isinstance(v, int)}
print(json.dumps({"first_call_s": first["first_call_s"], "median_call_s": steady["median_call_s"],
                  "mean_call_s": steady["mean_call_s"], "repeat": steady["repeat"],
                  "counters_per_call": per_call}, indent=1))
EOF
echo "== PyTorch eager, same image"
python3 shapefn/bench/torch_eager.py --model ssdlite320_mobilenet_v3_large --size 320x320 --repeat "$repeat" \
  | tee "$out/torch_eager.json"
