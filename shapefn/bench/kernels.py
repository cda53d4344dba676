"""The detection models' hottest kernels alone: shapefn on ``host`` against
onnxruntime (CPU provider, the same thread count) running the same one-op
ONNX model, and for matmuls numpy's BLAS too.

Each case is a layer of a torchvision detection model at 320x320 (ROI
heads at a fixed number of ROIs), imported with its batch and image sizes
symbolic, as in the models (the mask head's image size is static there, and
here: ``STATIC_SIZES``). Timings are medians of ``--repeat`` interleaved
repetitions; ``ratio`` is shapefn's time over onnxruntime's, and ``gflops``
each runtime's rate. Outputs are checked against onnxruntime's first.

onnxruntime runs with as many intra-op threads as TVM's thread pool has
(``--threads`` overrides it for onnxruntime only): shapefn sizes the pool
to the CPUs the process may use unless ``TVM_NUM_THREADS`` chooses
(``host_threads.py``).

onnxruntime runs with its worker threads' spin-waiting off: left on, they
keep spinning for a while after each run, and with as many threads as cores
they take the cores from the shapefn call timed next (on 2 cores that
doubled shapefn's times: a mask head convolution took 58-83 ms interleaved
and 27 ms alone), while onnxruntime itself, one op per run, was as fast
without it.

``python -m shapefn.bench kernels [--repeat 20] [--threads N] [--json] [--only NAME ...]``
"""
from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ..compiler.compile import compile as compile_relax
from ..frontend import from_onnx
from ..runtime import host_threads
from ..runtime.vm import VirtualMachine
from . import timing

# Convolutions whose height and width are static in the models (the mask
# head reads RoIAlign's fixed-size output); the others' are symbolic.
STATIC_SIZES = {"maskrcnn_mask_head_3x3"}
# name -> (what, N, C, H, W, O, kernel, stride, pad, group): convolutions
CONVOLUTIONS = {
    "maskrcnn_mask_head_3x3": ("Mask R-CNN mask head, 16 ROIs", 16, 256, 14, 14, 256, 3, 1, 1, 1),
    "resnet50_stem_7x7": ("ResNet-50 stem", 1, 3, 320, 320, 64, 7, 2, 3, 1),
    "resnet50_layer1_3x3": ("ResNet-50 layer1 3x3", 1, 64, 80, 80, 64, 3, 1, 1, 1),
    "resnet50_layer1_1x1": ("ResNet-50 layer1 expansion", 1, 64, 80, 80, 256, 1, 1, 0, 1),
    "resnet50_layer3_3x3": ("ResNet-50 layer3 3x3", 1, 256, 20, 20, 256, 3, 1, 1, 1),
    "fpn_3x3": ("FPN output 3x3", 1, 256, 40, 40, 256, 3, 1, 1, 1),
    "mobilenetv3_1x1": ("MobileNetV3 pointwise", 1, 40, 40, 40, 120, 1, 1, 0, 1),
    "mobilenetv3_depthwise_3x3": ("MobileNetV3 depthwise 3x3", 1, 72, 80, 80, 72, 3, 1, 1, 72),
    "mobilenetv3_depthwise_5x5_s2": ("MobileNetV3 depthwise 5x5 stride 2", 1, 72, 80, 80, 72, 5, 2, 2, 72),
}
# name -> (what, N, K, M): x [N, K] @ W[M, K]^T + b (ONNX Gemm, transB)
MATMULS = {
    "box_head_fc6": ("Faster R-CNN box head fc6, 150 ROIs", 150, 256 * 7 * 7, 1024),
    "box_head_fc7": ("Faster R-CNN box head fc7, 150 ROIs", 150, 1024, 1024),
}


def _model(nodes, x_shape, inits):
    graph = helper.make_graph(nodes, "kernel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def conv_case(n, c, h, w, o, k, stride, pad, group, rng, *, static=False):
    weight = (rng.standard_normal((o, c // group, k, k)) / np.sqrt(c // group * k * k)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32) * 0.1
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[stride] * 2,
                            pads=[pad] * 4, group=group)
    size = [h, w] if static else ["H", "W"]
    model = _model([conv, helper.make_node("Relu", ["c"], ["y"])], ["N", c, *size], {"w": weight, "b": bias})
    out_hw = ((h + 2 * pad - k) // stride + 1) * ((w + 2 * pad - k) // stride + 1)
    return model, rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32), 2 * n * o * (c // group) * k * k * out_hw


def matmul_case(n, k, m, rng):
    weight = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32) * 0.1
    gemm = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    model = _model([gemm], ["N", k], {"w": weight, "b": bias})
    return model, rng.uniform(-1, 1, (n, k)).astype(np.float32), 2 * n * k * m, weight, bias


def measure(name, model, x, flops, *, threads, repeat, reference=None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # (module docstring)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    vm = VirtualMachine(compile_relax(from_onnx(model), "host"), "host")
    want = session.run(None, {"x": x})[0]
    got = vm(x).numpy()
    error = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
    cases = {"shapefn": lambda: vm(x), "onnxruntime": lambda: session.run(None, {"x": x})}
    if reference is not None:
        cases["numpy"] = reference
    for fn in cases.values():  # warm: first calls build caches
        fn()
    times = timing.interleaved(cases, repeat=repeat)["wall"]
    row = {"flops": flops, "max_relative_error": error}
    for runtime, samples in times.items():
        seconds = statistics.median(samples)
        row[f"{runtime}_ms"] = seconds * 1e3
        row[f"{runtime}_gflops"] = flops / seconds / 1e9
    row["ratio"] = row["shapefn_ms"] / row["onnxruntime_ms"]
    row["ratios"] = [s / o for s, o in zip(times["shapefn"], times["onnxruntime"])]
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None,
                        help="onnxruntime's intra-op threads (default: as many as TVM's thread pool)")
    parser.add_argument("--only", nargs="*", default=None, help="kernel names (default: all)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    tvm_threads = host_threads.pool_threads()
    if args.threads is None:
        args.threads = tvm_threads
    rng = np.random.default_rng(0)
    rows = {}
    names = args.only or [*CONVOLUTIONS, *MATMULS]
    for name in names:
        if name in CONVOLUTIONS:
            what, *shape = CONVOLUTIONS[name]
            model, x, flops = conv_case(*shape, rng, static=name in STATIC_SIZES)
            row = measure(name, model, x, flops, threads=args.threads, repeat=args.repeat)
        elif name in MATMULS:
            what, *shape = MATMULS[name]
            model, x, flops, weight, bias = matmul_case(*shape, rng)
            transposed = np.ascontiguousarray(weight.T)
            row = measure(name, model, x, flops, threads=args.threads, repeat=args.repeat,
                          reference=lambda x=x, w=transposed, b=bias: x @ w + b)
        else:
            raise SystemExit(f"unknown kernel {name!r}; known: {', '.join([*CONVOLUTIONS, *MATMULS])}")
        rows[name] = {"what": what, **row}
        if not args.json:
            extra = f"  numpy {row['numpy_ms']:8.2f} ms" if "numpy_ms" in row else ""
            print(f"{name:30s} shapefn {row['shapefn_ms']:8.2f} ms ({row['shapefn_gflops']:6.1f} GF/s)  "
                  f"onnxruntime {row['onnxruntime_ms']:8.2f} ms ({row['onnxruntime_gflops']:6.1f} GF/s){extra}  "
                  f"ratio {row['ratio']:5.2f}", flush=True)
    if args.json:
        print(json.dumps({"threads": args.threads, "tvm_threads": tvm_threads, "repeat": args.repeat,
                          "kernels": rows}, indent=1))
