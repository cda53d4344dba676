"""The models benchmark and PyTorch eager's timing beside it
(shapefn/bench/models.py, torch_eager.py), without a GPU and without torch:
a tiny model's JSON has every documented key (and PyTorch's only on CUDA),
``--device cuda`` without a GPU says so and exits with status 0, PyTorch is
fed the images shapefn is, and torch_eager.py runs as a plain file with
neither TVM nor shapefn importable."""
import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from test_cli import positive_model

import shapefn
from shapefn.bench import models, torch_eager

DATA = pathlib.Path(__file__).parent / "data"
TORCH_EAGER = pathlib.Path(torch_eager.__file__)
RESULT_KEYS = {"device", "compile_cold_s", "kernels_built_cold", "compile_warm_s", "kernels_built_warm",
               "onnxruntime_threads", "calls"}
CALL_KEYS = {"inputs", "first_inference_s", "per_op", "per_input", "wall_s", "onnxruntime_wall_s", "ratio", "ratios"}
TORCH_KEYS = {"torch_eager_wall_s", "torch_eager_first_inference_s", "torch_eager_ratio"}


def test_a_models_json_has_every_key_and_no_pytorch_figures_off_cuda():
    calls = [[np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)] for n in (3, 5)]
    result = models.measure_model("positive", positive_model(), calls, repeat=2, device="sim")
    json.dumps(result)
    assert set(result) == RESULT_KEYS and result["device"] == "sim"
    assert [call["inputs"] for call in result["calls"]] == ["3x4", "5x4"]
    for call in result["calls"]:
        assert set(call) == CALL_KEYS
        assert len(call["ratios"]) == 2
        assert call["per_input"]["kernel_calls"] > 0


# (Not "benchmark": pytest-benchmark, where installed, owns that fixture name.)
@pytest.mark.parametrize("name", ["models", "copy_elimination"])
def test_cuda_without_a_gpu_is_said_on_one_line_and_exits_0(name):
    if shapefn.tvm_device_exists("cuda"):
        pytest.skip("this machine has a CUDA GPU")
    proc = subprocess.run([sys.executable, "-m", "shapefn.bench", name, "--device", "cuda", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{name}: no CUDA GPU found (TVM's CUDA runtime reaches no device 'cuda'): nothing measured"]


def test_pytorch_is_fed_the_images_shapefn_is():
    _, calls = models.load("ssdlite320_mobilenet_v3_large", DATA)
    for (image,), (height, width) in zip(calls, models.SIZES, strict=True):
        np.testing.assert_array_equal(image, torch_eager.image(height, width))


def test_every_torchvision_graph_has_its_builder():
    graphs = [p.name[: -len(".graph.onnx")] for p in DATA.glob("*.graph.onnx")
              if p.name[: -len(".graph.onnx")] not in models.TRANSFORMERS + models.RECOGNIZERS]
    assert len(graphs) >= len(torch_eager.BUILDER_KWARGS)
    for graph in graphs:
        assert torch_eager.builder_name(graph) == graph.removesuffix("_op17"), graph
    assert torch_eager.builder_name("silero_vad") is None
    assert all(torch_eager.builder_name(name) is None for name in models.TRANSFORMERS + models.RECOGNIZERS)


def run_without_tvm_or_shapefn(*args):
    """torch_eager.py run as a plain file where importing tvm, tvm_ffi or
    shapefn fails (as on a machine without them)."""
    blocked = "import sys; sys.modules.update(tvm=None, tvm_ffi=None, shapefn=None); "
    run = f"import runpy; sys.argv = {[str(TORCH_EAGER), *args]!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    return subprocess.run([sys.executable, "-c", blocked + run], capture_output=True, text=True, timeout=120)


def test_torch_eager_runs_as_a_file_without_tvm_or_shapefn():
    proc = run_without_tvm_or_shapefn("--help")
    assert proc.returncode == 0, proc.stderr
    assert "--model" in proc.stdout and "--size" in proc.stdout


@pytest.mark.parametrize("args, says", [
    (["--model", "nonsense", "--size", "320x320"], "no torchvision builder for 'nonsense'"),
    (["--model", "ssdlite320_mobilenet_v3_large", "--size", "320"], "not a size: '320'"),
])
def test_torch_eager_usage_errors_exit_2(args, says):
    proc = run_without_tvm_or_shapefn(*args)
    assert proc.returncode == 2
    assert says in proc.stderr


def test_torch_eager_without_torch_says_so_and_exits_2():
    absent = [package for package in ("torch", "torchvision") if importlib.util.find_spec(package) is None]
    if not absent:
        pytest.skip("torch and torchvision are installed here")
    proc = run_without_tvm_or_shapefn("--model", "ssdlite320_mobilenet_v3_large", "--size", "320x320")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"torch_eager: {absent[0]} is not installed: nothing measured\n"
