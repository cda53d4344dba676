"""PyTorch eager's time for torchvision's detection models on a CUDA GPU,
the figure ``python -m shapefn.bench models --device cuda`` prints beside
shapefn's.

The model is torchvision's own builder with random weights (nothing is
downloaded) and the keyword arguments the ONNX graphs of tests/data were
exported with (``BUILDER_KWARGS``; tests/data/export_torchvision.py), in
``.eval()`` on the GPU; the input is the image shapefn's benchmark feeds
(``image``). One call is ``model([image])`` under ``torch.no_grad()`` with
its outputs copied to the host, as shapefn's figure includes copying its
outputs back; the time is the median of ``repeat`` calls, each waited for
(``torch.cuda.synchronize``), after a first call (``first_inference_s``)
and ``warmup`` more. The weights are torch's initialisation, not the
graphs' (materialize.py, seed 0): the layers are the same, but the number
of candidate boxes reaching NMS may differ.

This file imports only the standard library, numpy, torch and torchvision
(no TVM, nothing of shapefn), so it also runs where shapefn is not
installed, as a plain file, printing one JSON object:

    python shapefn/bench/torch_eager.py --model ssdlite320_mobilenet_v3_large --size 320x320 --repeat 50

(``python -m shapefn.bench.torch_eager ...`` is the same where shapefn is
installed.) Exit status 2 when torch, torchvision or a CUDA GPU is missing.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import time

import numpy as np

_FPN_SIZE = {"min_size": 224, "max_size": 288}
_RPN = {"rpn_pre_nms_top_n_test": 500, "rpn_post_nms_top_n_test": 200}
#: Each model's builder arguments, as exported to the graphs of tests/data.
BUILDER_KWARGS = {
    "ssdlite320_mobilenet_v3_large": {},
    "fasterrcnn_mobilenet_v3_large_320_fpn": {"box_score_thresh": 0.0},
    "retinanet_resnet50_fpn": {"score_thresh": 0.05, **_FPN_SIZE},
    "fcos_resnet50_fpn": {"score_thresh": 0.2, **_FPN_SIZE},
    "ssd300_vgg16": {"score_thresh": 0.01},
    "keypointrcnn_resnet50_fpn": {"box_score_thresh": 0.0, "box_detections_per_img": 5, **_RPN, **_FPN_SIZE},
    "maskrcnn_resnet50_fpn": {"box_score_thresh": 0.0, "box_detections_per_img": 20, **_RPN, **_FPN_SIZE},
}
# torch initialises their classifier bias to -log(99): every score ~0.01,
# nothing past the score threshold. The export zeroed it (its graph holds no
# value for it); so does this, or NMS would have nothing to do.
_PRIOR_BIAS_ZEROED = ("retinanet_resnet50_fpn", "fcos_resnet50_fpn")


def builder_name(model: str) -> str | None:
    """The torchvision builder of a graph of tests/data (``<builder>`` or
    ``<builder>_op17``), or None for a model that is not one."""
    name = re.sub(r"_op\d+$", "", model)
    return name if name in BUILDER_KWARGS else None


def image(height: int, width: int) -> np.ndarray:
    """The float32 [3, height, width] image in [0, 1) the models are fed
    (seed 1, as the tests and the export checks draw it)."""
    return np.random.default_rng(1).uniform(0, 1, (3, height, width)).astype(np.float32)


def missing() -> str:
    """Why the timing cannot run here, or "" when it can."""
    for package in ("torch", "torchvision"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed"
    import torch

    return "" if torch.cuda.is_available() else "torch finds no CUDA GPU"


def measure(model: str, height: int, width: int, repeat: int = 50, warmup: int = 5, gpu: int = 0) -> dict:
    """PyTorch eager's seconds per call of torchvision's ``model`` on
    ``image(height, width)`` on CUDA GPU ``gpu`` (see the module's doc)."""
    import torch
    import torchvision

    name = builder_name(model)
    if name is None:
        raise ValueError(f"no torchvision builder for {model!r}; there are {', '.join(BUILDER_KWARGS)}")
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    torch.manual_seed(0)
    net = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **BUILDER_KWARGS[name])
    if name in _PRIOR_BIAS_ZEROED:
        torch.nn.init.zeros_(net.head.classification_head.cls_logits.bias)
    net = net.eval().cuda(gpu)
    x = torch.from_numpy(image(height, width)).cuda(gpu)

    def call() -> float:
        start = time.perf_counter()
        for detections in net([x]):
            for value in detections.values():
                value.cpu()
        torch.cuda.synchronize(gpu)
        return time.perf_counter() - start

    with torch.no_grad():
        first = call()
        for _ in range(warmup):
            call()
        times = [call() for _ in range(repeat)]
    return {"model": model, "inputs": f"3x{height}x{width}", "torch_eager_wall_s": statistics.median(times),
            "torch_eager_first_inference_s": first, "repeat": repeat, "gpu": torch.cuda.get_device_name(gpu),
            "torch": torch.__version__, "torchvision": torchvision.__version__}


def _size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (HEIGHTxWIDTH, e.g. 320x320)")
    return int(match[1]), int(match[2])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="torch_eager.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help=f"one of {', '.join(BUILDER_KWARGS)} (or <name>_op17)")
    parser.add_argument("--size", type=_size, action="append", required=True, metavar="HxW",
                        help="the image's height and width, e.g. 320x320 (repeatable)")
    parser.add_argument("--repeat", type=int, default=50, help="timed calls (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="calls after the first, not timed (default 5)")
    args = parser.parse_args(argv)
    if builder_name(args.model) is None:
        parser.error(f"no torchvision builder for {args.model!r}; there are {', '.join(BUILDER_KWARGS)}")
    why = missing()
    if why:
        parser.exit(2, f"torch_eager: {why}: nothing measured\n")
    print(json.dumps([measure(args.model, h, w, args.repeat, args.warmup) for h, w in args.size], indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
