"""Faster R-CNN (test_models.py's model) compiled by ``tvm.compile`` with
``relax_vm.pipeline`` for the CPU (shapefn's host target, at the
optimization level conftest.py sets) and run on TVM's ``relax.VirtualMachine``
(TVM's own importer and default pipeline cannot run it): its detections
match onnxruntime's at both sizes.

On the CPU, for CI's time: for OpenCL, ``tvm.compile`` builds every kernel
serially and without a cache and PoCL then builds each OpenCL program, four
minutes of one core for this model, and a real device adds nothing a whole
model shows that test_relax_pipeline.py does not: there, programs of every
data-dependent kind run under TVM's VM on OpenCL and copy to the host copy
for copy what shapefn's VM copies, and shapefn's VM runs this model on
OpenCL (test_models.py). A file of its own, so that this compile runs on a
worker other than test_models.py's."""
import numpy as np
import pytest
import tvm
from test_models import ON_OPENCL, SIZES, Compiled, image, match_detections

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def compiled():
    return Compiled()


@pytest.mark.parametrize("name", [ON_OPENCL])
def test_detections_match_onnxruntime_under_tvm_vm(compiled, name):
    session, names = compiled.session(name)
    vm = compiled.tvm_vm(name)
    for size in SIZES:
        x = image(size)
        result = vm["main"](tvm.runtime.tensor(x, tvm.cpu()))
        got = dict(zip(names, (np.asarray(t.numpy()) for t in result)))
        want = dict(zip(names, session.run(None, {"image": x})))
        assert len(want["boxes"]) > 0
        assert match_detections(got, want) == 0
