#!/usr/bin/env bash
# Runs on a machine with an NVIDIA GPU what tools/gpu_prepare.sh made in DIR,
# for each DIR/bundle/MODEL.sfx, with no Python packages of ours: the first
# call in a fresh process, the median of REPEAT calls, the outputs against
# onnxruntime's, a profiled call with device times per kernel (and one with
# every launch blocking, whose host times are device times), and PyTorch
# eager on the same model, image and GPU. Prints a summary per model and
# packs every report into $OUT/reports.tar.gz (OUT defaults to DIR/out); the
# outputs go to DIR/outputs.
#
#   tools/gpu_run.sh [DIR=.gpu] [REPEAT=50]
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
repeat=${2:-50}
out=${OUT:-$dir/out}
reports=$dir/reports
mkdir -p "$out" "$reports"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader \
  | tee "$reports/gpu.txt"
for sfx in "$dir"/bundle/*.sfx; do
  model=$(basename "$sfx" .sfx)
  r=$reports/$model
  o=$dir/outputs/$model
  mkdir -p "$r" "$o"
  run() { "$dir/bundle/bin/shapefn-run" "$sfx" --device cuda --input "$dir/image.npy" "$@"; }
  echo "=== $model: first call, fresh process"
  if run --output-dir "$o/first" > "$r/first.json"; then
    run --output-dir "$o/steady" --repeat "$repeat" > "$r/steady.json"
    run --output-dir "$o/profiled" --repeat 3 --profile --profile-trace "$r/trace.json" \
        > "$r/profile.json" 2> "$r/profile.txt"
    echo "-- profiled (device time per kernel, the last of 3 calls)"; head -12 "$r/profile.txt" | cut -c1-140
    CUDA_LAUNCH_BLOCKING=1 run --output-dir "$o/blocking" --repeat 2 --profile > /dev/null \
        2> "$r/profile_blocking.txt"
    echo "-- blocking launches"; head -12 "$r/profile_blocking.txt" | cut -c1-140
    python3 - "$dir" "$model" "$r" "$o" <<'PY'
import json, pathlib, sys

import numpy as np

dir, model, r, o = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
first, steady = (json.loads((r / f"{name}.json").read_text()) for name in ("first", "steady"))
for name in ("first", "steady", "profiled", "blocking"):
    for want_path in sorted(dir.glob(f"{model}.reference*.npy")):
        i = want_path.name.removeprefix(f"{model}.reference").removesuffix(".npy")
        got_path = o / name / f"out{i}.npy"
        if not got_path.exists():
            print(f"{name}: no out{i}.npy")
            continue
        got, want = np.load(got_path), np.load(want_path)
        same = got.shape == want.shape and got.dtype == want.dtype
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if same and got.size else 0.0
        print(f"{name} out{i}: shape {got.shape} vs {want.shape}, max |diff| {err:.3g}")
per_call = {k: v // steady["repeat"] for k, v in steady["counters"].items() if isinstance(v, int)}
print(json.dumps({"model": model, "first_call_s": first["first_call_s"], "median_call_s": steady["median_call_s"],
                  "mean_call_s": steady["mean_call_s"], "repeat": steady["repeat"],
                  "counters_per_call": per_call}))
PY
  else
    echo "shapefn-run failed; what the runner loads:"
    ldd "$dir/bundle/bin/shapefn-run" "$dir/bundle/lib/libtvm_runtime_cuda.so"
  fi
  echo "-- PyTorch eager, same image"
  python3 shapefn/bench/torch_eager.py --model "$model" --size 320x320 --repeat "$repeat" | tee "$r/torch_eager.json"
done
tar czf "$out/reports.tar.gz" -C "$reports" .
