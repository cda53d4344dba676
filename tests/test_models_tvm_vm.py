"""Faster R-CNN (test_models.py's model on a real device) compiled by
``tvm.compile`` with ``relax_vm.pipeline`` for OpenCL and run on TVM's
``relax.VirtualMachine`` (TVM's own importer and default pipeline cannot run
it): its detections match onnxruntime's at both sizes, and an inference
copies to the host and waits exactly what shapefn's VM does (the counts
test_models.py asserts of it, ``MOVED``). A file of its own: ``tvm.compile``
builds every kernel serially and without a cache, and PoCL builds the
OpenCL programs, minutes on two cores, so this compile runs on a worker
other than test_models.py's."""
import numpy as np
import pytest
import tvm
from test_models import MOVED, ON_OPENCL, SIZES, SYNCS, TVM_DEVICES, Compiled, image, match_detections

import shapefn
from conftest import opencl

pytestmark = [pytest.mark.model, opencl]


@pytest.fixture(scope="module")
def compiled():
    return Compiled()


def _counted(run) -> dict:
    """What the second of two calls of ``run`` moves and waits for on the device."""
    run()
    shapefn.reset_device_counters("opencl")
    run()
    counters = shapefn.device_counters("opencl")
    return {key: counters[key] for key in ("d2h_copies", "d2h_bytes", "syncs")}


@pytest.mark.parametrize("name", [ON_OPENCL])
def test_detections_match_onnxruntime_under_tvm_vm(compiled, name):
    session, names = compiled.session(name)
    vm = compiled.tvm_vm(name, "opencl")
    for size in SIZES:
        x = image(size)
        result = vm["main"](tvm.runtime.tensor(x, TVM_DEVICES["opencl"]()))
        got = dict(zip(names, (np.asarray(t.numpy()) for t in result)))
        want = dict(zip(names, session.run(None, {"image": x})))
        assert len(want["boxes"]) > 0
        assert match_detections(got, want) == 0


@pytest.mark.parametrize("name", [ON_OPENCL])
def test_tvm_vm_copies_and_waits_as_shapefn_vm(compiled, name):
    """Under TVM's VM with shapefn's pipeline an inference copies to the
    host exactly what shapefn's VM copies (counts and shape values, never a
    tensor of data: 8 bytes per copy) and waits as often: shape arithmetic
    runs on the host in both."""
    x = image(SIZES[0])
    vm, on_device = compiled.tvm_vm(name), tvm.runtime.tensor(x, tvm.opencl())
    ours = _counted(lambda: vm["main"](on_device))
    assert ours == MOVED[name]
    assert ours["syncs"] == SYNCS[name]
