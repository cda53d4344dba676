#!/usr/bin/env bash
# Prepares DIR for tools/gpu_run.sh on a machine with an NVIDIA GPU, PyTorch
# and torchvision but no apache-tvm (the workplace's lent GPU machines): each
# MODEL of ../shared/models (seed-0 weights) compiled for cuda with SASS for
# ARCH, in one bundle (shapefn bundle: DIR/bundle/bin, DIR/bundle/lib, and
# DIR/bundle/MODEL.sfx with its kernel library), with a seed-1 320x320 image
# and onnxruntime's outputs for it (DIR/MODEL.reference<i>.npy). DIR travels
# to the GPU machine: keep it git-ignored and under the device tool's 64 MiB
# (split a larger executable and join it there).
#
#   tools/gpu_prepare.sh [DIR=.gpu] [ARCH=sm_90] [MODEL...=ssdlite320_mobilenet_v3_large]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
arch=${2:-sm_90}
shift $(( $# < 2 ? $# : 2 ))
models=("${@:-ssdlite320_mobilenet_v3_large}")
graphs=$(cd .. && pwd)/shared/models
mkdir -p "$dir"
rm -rf "$dir/bundle"
for model in "${models[@]}"; do
  python - "$dir" "$graphs" "$model" <<'PY'
import pathlib, sys

import numpy as np
import onnx
import onnxruntime as ort

from shapefn.bench import torch_eager
from shapefn.bench.models import materialize

out, graphs, name = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
onnx.save(materialize(graphs, name), out / f"{name}.onnx")
image = torch_eager.image(320, 320)  # the image bench models and torch_eager feed
np.save(out / "image.npy", image)
session = ort.InferenceSession(str(out / f"{name}.onnx"), providers=["CPUExecutionProvider"])
for i, array in enumerate(session.run(None, {"image": image})):
    np.save(out / f"{name}.reference{i}.npy", array)
PY
  shapefn compile "$dir/$model.onnx" -o "$dir/$model.sfx" --device cuda --cuda-arch "$arch" --quiet
  rm -rf "$dir/one"
  shapefn bundle "$dir/$model.sfx" "$dir/one" > /dev/null
  if [ -d "$dir/bundle" ]; then
    mv "$dir/one/$model.sfx" "$dir/one/$model.sfx.kernels.so" "$dir/bundle/"
  else
    mv "$dir/one" "$dir/bundle"
  fi
  rm -rf "$dir/one" "$dir/$model.onnx" "$dir/$model.sfx" "$dir/$model.sfx.kernels.so"
done
du -ah "$dir" | sort -k2
