#!/usr/bin/env python3
"""Export torchvision's detection family as weight-free ONNX graphs (this folder's *.graph.onnx).

Needs torch and torchvision (not part of shapefn's test install; use a separate venv):

    python -m venv /work/venv-torch
    /work/venv-torch/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx numpy
    /work/venv-torch/bin/python tests/data/export_torchvision.py [--out tests/data] [--full DIR] [NAME ...]

Each model is torchvision's own builder, ``torchvision.models.detection.<name>(weights=None,
weights_backbone=None, **KWARGS)``, randomly initialised under ``torch.manual_seed(0)``, in
``.eval()``, exported with the TorchScript exporter (``dynamo=False``, ``do_constant_folding=True``;
constant folding merges every (Frozen)BatchNorm into its Conv) with input ``image`` float32
``[3, H, W]`` (H, W dynamic, values in [0, 1]) and outputs of dynamic length ``N``. The full
export is then stripped by ``strip.py`` (float initializers of more than 64 elements lose their
data); ``materialize.py`` refills them with deterministic random values (seed 0 in the tests).

Files: ``<name>.graph.onnx`` is opset 11, ``<name>_op17.graph.onnx`` opset 17 (the naming of
``/work/shared/models``). Opsets a model is exported at are in ``OPSETS``.

Sizes and counts are cut from torchvision's defaults so that one inference of each graph on
shapefn's sim takes seconds, not minutes (tests/test_torchvision_models.py runs them in CI, on 2
cores), through the builders' own keyword arguments (``MODELS``): the graphs stay torchvision's.

* Input size: ``min_size=224, max_size=288`` for the ResNet-50 FPN models. They resize internally
  (GeneralizedRCNNTransform) so that the short side is ``min_size`` and the long side at most
  ``max_size``, then pad to a multiple of 32. The defaults (800 / 1333) would turn a 256x320 input
  into 800x1000; with 224 / 288 it is scaled by 0.875 to 224x280 (padded to 224x288), so the
  check sizes still go through a real resize, and the coarsest FPN level (stride 128) keeps 2x3
  cells. Against 320 / 512 (an earlier export: 320x400, padded to 320x416), 2.1x fewer pixels: a
  strict-sim inference of RetinaNet takes 3.5-4.7 s instead of 5.9-6.2, FCOS 2.9-4.0 s instead of
  4.9-5.2 (opset 11, the same shapefn). SSD300 always resizes to a fixed 300x300 (its builder takes
  no sizes).
* Keypoint and Mask R-CNN: ``rpn_pre_nms_top_n_test=500`` (proposals per FPN level into the RPN's
  NMS; default 1000) and ``rpn_post_nms_top_n_test=200`` (proposals out of it; default 1000): the box
  head (RoIAlign, then 12544x1024 and 1024x1024 fully connected layers) runs on every proposal.
  ``box_detections_per_img`` (default 100) is 20 for Mask R-CNN and 5 for Keypoint R-CNN: their
  heads run on every detection, Mask R-CNN's four 256-channel 3x3 convolutions at 14x14 (~1 GFLOP
  a detection), Keypoint R-CNN's eight 512-channel ones (~7 GFLOP a detection). With the defaults
  (and 320 / 512) one inference on sim took 194 s (Keypoint) and 115 s (Mask); with 20 detections
  Keypoint R-CNN still took 27 s, 20 of them in its head's convolutions; with these values 6.4-7.5 s
  (Keypoint) and 9.3-11.4 s (Mask), still several objects an image with keypoints and masks.

Score thresholds: torchvision's defaults for the one-stage models (RetinaNet 0.05, FCOS 0.2, SSD
0.01; detections per image 300 / 100 / 200) and ``box_score_thresh=0.0`` for the R-CNNs (default
0.05; 0.0 as for the Faster R-CNN graph in this folder). The graphs are run with materialize.py's
weights (seed 0), not torch's init, and with those every model returns its full detection count at
both check sizes (256x320, 320x256; onnxruntime 1.32):

    model (opset 11 / 17)   N     scores            labels         notes
    retinanet_resnet50_fpn  300   0.859-0.924       7-8 / 12-15    at 256x320 1 / 2 boxes of zero area
    fcos_resnet50_fpn       100   0.839-0.906       2 / 7-9        op17: 63-71 boxes of zero area
    ssd300_vgg16            200   0.056-0.126       16-19          (op11 and op17 weights are identical)
    keypointrcnn_...        5     0.533-0.933       1              keypoints [N,17,3], keypoints_scores [N,17]
    maskrcnn_resnet50_fpn   20    0.198-0.309       2 / 1          masks [N,1,H,W] at the input's size

Scores are close together (RetinaNet's and FCOS's smallest relative gap between two scores ~1e-7):
compare detections as sets, with tolerances, not by rank. Degenerate (zero-area) boxes are real
outputs of FCOS and RetinaNet (clipped to the image, no small-box filter), not an export error.

RetinaNet and FCOS: torch initialises the classifier bias to -log(99), so torch's own model finds
nothing above score_thresh; ``build`` zeroes that bias so that the export check below compares
non-empty sets. The bias is stripped, so the graph files are byte-identical either way (checked).
Both opsets export for every model; the export is deterministic (same bytes on a re-run).

``--no-check`` skips saving torch's outputs: by default the torch model is run at the two check
sizes (not the trace size) and its outputs saved next to the full export (``DIR/<file>.torch.npz``)
for comparing onnxruntime on the full export with torch (a script with onnxruntime does that).
"""
import argparse
import json
import pathlib
import sys

import numpy as np
import onnx
import torch
import torchvision

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import strip  # noqa: E402  (this folder's strip.py)

# Smaller than torchvision's 800 / 1333 so that an inference is affordable in CI (docstring).
SIZE = {"min_size": 224, "max_size": 288}
# The R-CNNs' proposals and detections, cut so that their heads are affordable (docstring).
RPN = {"rpn_pre_nms_top_n_test": 500, "rpn_post_nms_top_n_test": 200}
RCNN_OUT = ["boxes", "labels", "scores"]
ONE_STAGE_OUT = ["boxes", "scores", "labels"]

# Builder keyword arguments (on top of weights=None, weights_backbone=None) and output names, in
# the order of the dict each model returns.
MODELS = {
    "retinanet_resnet50_fpn": (dict(score_thresh=0.05, **SIZE), ONE_STAGE_OUT),
    "fcos_resnet50_fpn": (dict(score_thresh=0.2, **SIZE), ONE_STAGE_OUT),
    "ssd300_vgg16": (dict(score_thresh=0.01), ONE_STAGE_OUT),
    "keypointrcnn_resnet50_fpn": (dict(box_score_thresh=0.0, box_detections_per_img=5, **RPN, **SIZE),
                                  RCNN_OUT + ["keypoints", "keypoints_scores"]),
    "maskrcnn_resnet50_fpn": (dict(box_score_thresh=0.0, box_detections_per_img=20, **RPN, **SIZE),
                              RCNN_OUT + ["masks"]),
}
OPSETS = {name: (11, 17) for name in MODELS}
PRIOR_BIAS_ZEROED = ("retinanet_resnet50_fpn", "fcos_resnet50_fpn")
# Trace input (neither of the check sizes, so a size baked in by tracing shows up in the checks).
TRACE_SIZE = (288, 352)
CHECK_SIZES = [(256, 320), (320, 256)]


def build(name):
    kwargs, outs = MODELS[name]
    torch.manual_seed(0)
    model = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **kwargs)
    head = getattr(model, "head", None)
    if name in PRIOR_BIAS_ZEROED:
        # torch's init sets the classifier bias to -log(99) (every score ~0.01): the torch model
        # would find nothing at score_thresh and the export check would compare two empty sets.
        # The bias is stripped from the graph file, so the file does not depend on its value.
        torch.nn.init.zeros_(head.classification_head.cls_logits.bias)
    return model.eval(), outs


def image(size, seed=1):
    return torch.from_numpy(np.random.default_rng(seed).uniform(0, 1, (3, *size)).astype(np.float32))


def dynamic_axes(outs):
    axes = {"image": {1: "H", 2: "W"}, **{o: {0: "N"} for o in outs}}
    if "masks" in outs:  # [N, 1, H, W]: pasted at the input's size
        axes["masks"] = {0: "N", 2: "H", 3: "W"}
    return axes


def file_name(name, opset):
    return f"{name}.graph.onnx" if opset == 11 else f"{name}_op17.graph.onnx"


def export(name, opset, out_dir, full_dir, check):
    model, outs = build(name)
    full = full_dir / file_name(name, opset).replace(".graph.onnx", ".onnx")
    with torch.no_grad():
        torch.onnx.export(model, ([image(TRACE_SIZE)],), str(full), dynamo=False, opset_version=opset,
                          do_constant_folding=True, input_names=["image"], output_names=outs,
                          dynamic_axes=dynamic_axes(outs))
    proto = onnx.load(str(full))
    n = strip.strip_model(proto)
    graph = out_dir / file_name(name, opset)
    onnx.save(proto, str(graph))
    info = {"file": graph.name, "opset": opset, "stripped": n, "bytes": graph.stat().st_size,
            "full_bytes": full.stat().st_size, "kwargs": MODELS[name][0], "outputs": outs}
    if check:
        saved = {}
        with torch.no_grad():
            for size in CHECK_SIZES:
                (det,) = model([image(size)])
                for o in outs:
                    saved[f"{size[0]}x{size[1]}/{o}"] = det[o].numpy()
        np.savez(str(full).replace(".onnx", ".torch.npz"), **saved)
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"models (default all: {', '.join(MODELS)})")
    ap.add_argument("--out", default=str(HERE), help="where the graph-only files go (default: this folder)")
    ap.add_argument("--full", default="/tmp/tv_export/full", help="where the full exports go")
    ap.add_argument("--opset", type=int, action="append", help="only these opsets (default: OPSETS)")
    ap.add_argument("--no-check", dest="check", action="store_false", help="do not save torch outputs")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    out_dir, full_dir = pathlib.Path(args.out), pathlib.Path(args.full)
    out_dir.mkdir(parents=True, exist_ok=True)
    full_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names or MODELS:
        for opset in args.opset or OPSETS[name]:
            try:
                info = export(name, opset, out_dir, full_dir, args.check)
            except Exception as e:  # report and go on with the next one
                info = {"file": file_name(name, opset), "opset": opset, "error": f"{type(e).__name__}: {e}"}
            print(json.dumps({"name": name, **info}), flush=True)


if __name__ == "__main__":
    main()
