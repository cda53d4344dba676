#!/usr/bin/env bash
# Runs on a machine with an NVIDIA GPU what tools/gpu_prepare.sh made in DIR:
# the SSD-lite bundle with no Python packages (first call in a fresh process,
# then the median of REPEAT calls), its outputs against onnxruntime's, a
# profiled call with device times per kernel (and one with every launch
# blocking, whose host times are device times), and PyTorch eager on the same
# image and GPU. Writes its reports (seven files) under $OUT (default
# DIR/out) and the outputs under DIR/outputs.
#
#   tools/gpu_run.sh [DIR=.gpu] [REPEAT=50]
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
repeat=${2:-50}
out=${OUT:-$dir/out}
outputs=$dir/outputs
mkdir -p "$out" "$outputs"
# (The inherited environment: the driver may be found through LD_LIBRARY_PATH.)
run() { "$dir/bundle/bin/shapefn-run" "$dir/bundle/ssdlite.sfx" --device cuda --input "$dir/image.npy" "$@"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== first call, fresh process"
if run --output-dir "$outputs/first" > "$out/first.json"; then
  echo "== $repeat calls"
  run --output-dir "$outputs/steady" --repeat "$repeat" > "$out/steady.json"
  echo "== profiled (3 calls, the last profiled)"
  run --output-dir "$outputs/profiled" --repeat 3 --profile --profile-trace "$out/trace.json" \
      > "$out/profile.json" 2> "$out/profile.txt"
  echo "exit $?"; head -30 "$out/profile.txt"
  echo "== profiled with blocking launches"
  CUDA_LAUNCH_BLOCKING=1 run --output-dir "$outputs/blocking" --repeat 2 --profile > /dev/null \
      2> "$out/profile_blocking.txt"
  echo "exit $?"; head -16 "$out/profile_blocking.txt"
  python3 - "$dir" "$out" "$outputs" <<'EOF'
import json, pathlib, sys

import numpy as np

dir, out, outputs = (pathlib.Path(p) for p in sys.argv[1:])
first, steady = (json.loads((out / f"{name}.json").read_text()) for name in ("first", "steady"))
for name in ("first", "steady", "profiled", "blocking"):
    for i in range(3):
        path = outputs / name / f"out{i}.npy"
        if not path.exists():
            print(f"{name}: no out{i}.npy")
            continue
        got, want = np.load(path), np.load(dir / f"reference{i}.npy")
        same = got.shape == want.shape and got.dtype == want.dtype
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if same and got.size else 0.0
        print(f"{name} out{i}: shape {got.shape} vs {want.shape}, max |diff| {err:.3g}")
per_call = {k: v // steady["repeat"] for k, v in steady["counters"].items() if isinstance(v, int)}
print(json.dumps({"first_call_s": first["first_call_s"], "median_call_s": steady["median_call_s"],
                  "mean_call_s": steady["mean_call_s"], "repeat": steady["repeat"],
                  "counters_per_call": per_call}, indent=1))
EOF
else
  echo "shapefn-run failed; what the runner loads:"
  ldd "$dir/bundle/bin/shapefn-run" "$dir/bundle/lib/libtvm_runtime_cuda.so"
fi
echo "== PyTorch eager, same image"
python3 shapefn/bench/torch_eager.py --model ssdlite320_mobilenet_v3_large --size 320x320 --repeat "$repeat" \
  | tee "$out/torch_eager.json"
