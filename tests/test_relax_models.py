"""torchvision's SSD-lite and Faster R-CNN (the weight-free graphs of
tests/data, imported by ``shapefn.from_onnx``) compiled by ``tvm.compile``
with ``shapefn.relax.pipeline`` and run by TVM's ``relax.VirtualMachine``
on the OpenCL device: detections match onnxruntime's, and an inference
copies and waits exactly as under shapefn's VM (TVM's own importer and
default pipeline cannot run these models)."""
import numpy as np
import pytest
import tvm
from test_models import DATA, image, match_detections
from tvm import relax

import shapefn
import shapefn.relax
from conftest import opencl
from shapefn.bench.models import materialize

pytestmark = pytest.mark.model

MODELS = ["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"]


class Compiled:
    """Each model imported once, compiled once per target."""

    def __init__(self):
        self.protos, self.vms = {}, {}

    def proto(self, name):
        if name not in self.protos:
            self.protos[name] = materialize(DATA, name)
        return self.protos[name]

    def vm(self, name, target):
        if (name, target) not in self.vms:
            ex = tvm.compile(shapefn.from_onnx(self.proto(name)), target=target,
                             relax_pipeline=shapefn.relax.pipeline(target))
            self.vms[name, target] = relax.VirtualMachine(ex, tvm.cpu() if target == "llvm" else tvm.opencl())
        return self.vms[name, target]


@pytest.fixture(scope="module")
def compiled():
    return Compiled()


def _reference(proto, x):
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in proto.graph.output], session.run(None, {"image": x})))


# On OpenCL only (the real device; each model takes minutes to compile with
# tvm.compile): the CPU path is tested on every data-dependent op in
# test_relax_pipeline.py.
@opencl
@pytest.mark.parametrize("target", ["opencl"])
@pytest.mark.parametrize("name", MODELS)
def test_detections_match_onnxruntime_under_tvm_vm(compiled, name, target):
    proto = compiled.proto(name)
    vm = compiled.vm(name, target)
    device = tvm.cpu() if target == "llvm" else tvm.opencl()
    for size in [(320, 320), (256, 384)]:
        x = image(size)
        result = vm["main"](tvm.runtime.tensor(x, device))
        names = [o.name for o in proto.graph.output]
        got = dict(zip(names, (np.asarray(t.numpy()) for t in result)))
        want = _reference(proto, x)
        assert len(want["boxes"]) > 0
        assert match_detections(got, want) == 0


def _counted(run) -> dict:
    """What the second of two calls of ``run`` moves and waits for on the device."""
    run()
    shapefn.reset_device_counters("opencl")
    run()
    counters = shapefn.device_counters("opencl")
    return {key: counters[key] for key in ("d2h_copies", "d2h_bytes", "syncs")}


@opencl
@pytest.mark.parametrize("name", MODELS)
def test_copies_and_syncs_equal_shapefn_vms(compiled, name):
    """Under TVM's VM with shapefn's pipeline an inference copies to the
    host exactly what shapefn's VM copies (counts and shape values only,
    never a tensor of data: at most 8 int64s per copy) and waits as often:
    shape arithmetic runs on the host in both."""
    x = image((320, 320))
    vm = compiled.vm(name, "opencl")
    on_device = tvm.runtime.tensor(x, tvm.opencl())
    ours = _counted(lambda: vm["main"](on_device))
    theirs = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(compiled.proto(name)), "opencl"), "opencl")
    expected = _counted(lambda: theirs(x))
    assert ours == expected
    assert ours["d2h_copies"] > 0
    assert ours["d2h_bytes"] <= 64 * ours["d2h_copies"]
