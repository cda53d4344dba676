#!/usr/bin/env bash
# Prepares DIR for tools/gpu_run.sh on a machine with an NVIDIA GPU, PyTorch
# and torchvision but no apache-tvm (the workplace's lent GPU machines): SSD-lite
# (the seed-0 weights of ../shared/models' graph) compiled for cuda with SASS for
# ARCH, as a bundle (shapefn bundle), with a seed-1 320x320 image and
# onnxruntime's outputs for it. DIR travels to the GPU machine: keep it
# git-ignored and under the device tool's 64 MiB.
#
#   tools/gpu_prepare.sh [DIR=.gpu] [ARCH=sm_90]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
arch=${2:-sm_90}
models=$(cd .. && pwd)/shared/models
mkdir -p "$dir"
python - "$dir" "$models" <<'EOF'
import pathlib, sys

import numpy as np
import onnx
import onnxruntime as ort

from shapefn.bench import torch_eager
from shapefn.bench.models import materialize

out, models = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
model = materialize(models, "ssdlite320_mobilenet_v3_large")
onnx.save(model, out / "ssdlite.onnx")
image = torch_eager.image(320, 320)  # the image bench models and torch_eager feed
np.save(out / "image.npy", image)
session = ort.InferenceSession(str(out / "ssdlite.onnx"), providers=["CPUExecutionProvider"])
for i, array in enumerate(session.run(None, {"image": image})):
    np.save(out / f"reference{i}.npy", array)
EOF
shapefn compile "$dir/ssdlite.onnx" -o "$dir/ssdlite.sfx" --device cuda --cuda-arch "$arch" --quiet
rm -rf "$dir/bundle"
shapefn bundle "$dir/ssdlite.sfx" "$dir/bundle"
rm "$dir/ssdlite.onnx" "$dir/ssdlite.sfx" "$dir/ssdlite.sfx.kernels.so"
du -sh "$dir"
