"""torchvision's SSD-lite and Faster R-CNN (weight-free graphs from
tests/data, materialized with a fixed seed), each compiled once per device
and run at 320x320 and 256x384, against onnxruntime. Detections are matched
as sets (random weights can tie scores).

Each behaviour once, for CI's time (a compile of a detector for OpenCL and
PoCL's build of its programs take minutes on two cores): both models on a
strict sim; Faster R-CNN, the model with more kinds of kernels (RoI align,
per-level NMS), also on OpenCL, and on TVM's ``relax.VirtualMachine`` on
the CPU (test_models_tvm_vm.py, a file of its own so that the two compiles
run on two workers). The CUDA build's checks run on the programs of
test_cuda_build.py (a whole detector's build is one nvcc run of minutes on
two cores); a CUDA GPU, where there is one, runs both models here. SSD-lite's
GPU schedules are not checked here: its kernels are SSD300's
(test_torchvision_models.py)."""
import pathlib
import re

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from test_cuda_build import GPU_MISSING, assert_runs_on_a_cuda_gpu_like_sim, one_architecture
from tvm import relax

import shapefn
from conftest import DEVICE_INDEPENDENT_COUNTERS, opencl
from shapefn.bench.models import materialize
from shapefn.compiler import relax_vm
from shapefn.compiler.schedules.target_schedule import host_target
from shapefn.frontend import from_onnx

pytestmark = pytest.mark.model

DATA = pathlib.Path(__file__).parent / "data"
SIZES = [(320, 320), (256, 384)]
# Host waits per inference: one per phase whose sizes depend on device data
# computed after the previous phase's sizes were known (see docs/bench/README.md, Detection models).
SYNCS = {"ssdlite320_mobilenet_v3_large": 2, "fasterrcnn_mobilenet_v3_large_320_fpn": 7}


def match_detections(got: dict, want: dict) -> int:
    """How many reference detections have no equal-label detection with box
    and score within 1e-3 relative (each matched at most once)."""
    assert len(got["boxes"]) == len(want["boxes"])
    used = np.zeros(len(got["boxes"]), bool)
    unmatched = 0
    for box, score, label in zip(want["boxes"], want["scores"], want["labels"]):
        candidates = np.flatnonzero(
            ~used & (got["labels"] == label) & np.isclose(got["scores"], score, rtol=1e-3, atol=1e-6)
            & np.all(np.isclose(got["boxes"], box, rtol=1e-3, atol=1e-3), axis=1))
        if len(candidates) == 0:
            unmatched += 1
            continue
        used[candidates[0]] = True
    return unmatched


MODELS = ["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"]
# The model that runs on a real device (the docstring says why one).
ON_OPENCL = "fasterrcnn_mobilenet_v3_large_320_fpn"


class Compiled:
    """Each model compiled once per device (on first use), with its
    onnxruntime session."""

    def __init__(self):
        self.protos, self.sessions, self.executables = {}, {}, {}

    def session(self, name):
        if name not in self.sessions:
            self.protos[name] = materialize(DATA, name)
            self.sessions[name] = ort.InferenceSession(self.protos[name].SerializeToString(),
                                                       providers=["CPUExecutionProvider"])
        return self.sessions[name], [o.name for o in self.protos[name].graph.output]

    def executable(self, name, device):
        if (name, device) not in self.executables:
            self.session(name)
            options = {"cuda_archs": one_architecture()} if device == "cuda" else {}
            self.executables[name, device] = shapefn.compile(from_onnx(self.protos[name]), device, **options)
        return self.executables[name, device]

    def vm(self, name, device):
        exe = self.executable(name, device)
        return shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)

    def tvm_vm(self, name):
        """The model compiled by ``tvm.compile`` with ``relax_vm.pipeline``
        for the CPU (shapefn's host target), on TVM's ``relax.VirtualMachine``."""
        key = (name, "tvm.compile")
        if key not in self.executables:
            self.session(name)
            target = host_target()
            self.executables[key] = relax_vm.runnable(tvm.compile(
                from_onnx(self.protos[name]), target=target, relax_pipeline=relax_vm.pipeline(target)))
        return relax.VirtualMachine(self.executables[key], tvm.cpu())


@pytest.fixture(scope="module")
def compiled():
    return Compiled()


def image(size):
    return np.random.default_rng(1).uniform(0, 1, (3, *size)).astype(np.float32)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name, device", [(name, "sim") for name in MODELS]
                         + [pytest.param(ON_OPENCL, "opencl", marks=opencl)])
def test_detections_match_onnxruntime(compiled, name, size, device):
    session, names = compiled.session(name)
    vm = compiled.vm(name, device)
    x = image(size)
    got = dict(zip(names, (t.numpy() for t in vm(x))))
    want = dict(zip(names, session.run(None, {"image": x})))
    assert len(want["boxes"]) > 0
    assert got["labels"].dtype == want["labels"].dtype
    assert match_detections(got, want) == 0
    # Only counts and shape values cross (8 bytes each), never a feature map;
    # independent counts share a sync.
    assert vm.counters["d2h_bytes"] == 8 * vm.counters["d2h_copies"]
    assert vm.counters["syncs"] == SYNCS[name]


# What one inference at 320x320 copies to the host and waits for (counted):
# counts and shape values only, 8 bytes each.
MOVED = {ON_OPENCL: {"d2h_copies": 8, "d2h_bytes": 64, "syncs": 7}}


@opencl
@pytest.mark.parametrize("name", [ON_OPENCL])
def test_an_inference_moves_the_same_on_sim_and_opencl(compiled, name):
    x = image(SIZES[0])
    counters = {}
    for device in ("sim", "opencl"):
        vm = compiled.vm(name, device)
        vm(x)
        counters[device] = {k: vm.counters[k] for k in DEVICE_INDEPENDENT_COUNTERS}
    assert counters["opencl"] == counters["sim"]
    assert {k: counters["sim"][k] for k in MOVED[name]} == MOVED[name]


# Per inference at 320x320 at most (counted; docs/compiler.md, "Fusion"):
# the operations between control flow fused, host-computed values uploaded
# inside fused kernels, storage taken per fused kernel.
FUSED = {"ssdlite320_mobilenet_v3_large": {"kernel_calls": 590, "h2d_copies": 6, "allocations": 871},
         "fasterrcnn_mobilenet_v3_large_320_fpn": {"kernel_calls": 264, "h2d_copies": 11, "allocations": 294}}


@pytest.mark.parametrize("name", MODELS)
def test_an_inference_runs_fused(compiled, name):
    vm = compiled.vm(name, "sim")
    x = image(SIZES[0])
    vm(x)
    vm.reset_counters()
    vm(x)
    over = {key: (vm.counters[key], most) for key, most in FUSED[name].items() if vm.counters[key] > most}
    assert not over, over


@opencl
@pytest.mark.parametrize("name", [ON_OPENCL])
def test_opencl_build_has_no_serial_kernel(compiled, name):
    """Every OpenCL kernel reads a work-item or work-group index: none runs
    its loops in one work-item (the CUDA builds' PTX is checked the same way)."""
    (device,) = compiled.executable(name, "opencl")._library.imports
    kernels = re.findall(r"__kernel\s+void\s+(\w+)\s*\(([^{]*)\)\s*\{(.*?)(?=__kernel\s+void|\Z)",
                         device.inspect_source(), re.S)
    assert kernels
    serial = [kernel for kernel, _, body in kernels if not re.search(r"get_(local|group|global)_id", body)]
    assert not serial, serial


@pytest.mark.parametrize("name", MODELS)
def test_cuda_build_runs_on_a_gpu_like_sim(compiled, name):
    if not shapefn.tvm_device_exists("cuda"):
        pytest.skip(GPU_MISSING)
    assert_runs_on_a_cuda_gpu_like_sim(compiled.executable(name, "sim"), compiled.executable(name, "cuda"),
                                       [(image(SIZES[0]),)])
