"""ONNX's conformance runner over TVM's own VM with shapefn's pipeline: one
node test per operator, imported by ``shapefn.frontend.from_onnx``, built
by ``tvm.compile(..., relax_pipeline=relax_vm.pipeline("llvm"))`` and
run on an unmodified ``relax.VirtualMachine`` — what the pipeline covers,
measured by the suite that measures shapefn's VM.

The sample is, for each operator with a single-node test that shapefn's VM
passes (not listed in ``data/onnx_backend_expected_failures.txt``), the
first such test by name. Cases that fail only under TVM's VM are listed in
``PIPELINE_FAILURES`` with the reason; as in the whole suite, a listed case
that passes fails the run until it is taken off. The kernels' target is
shapefn's host target (``CPU``: at the optimization level conftest.py sets
for every test's host kernels)."""
import collections
import functools
import re
import warnings

import numpy as np
import onnx
import onnx.backend.test
import onnx.backend.test.loader
import pytest
import tvm
from onnx.backend.base import Backend, BackendRep
from test_onnx_backend_suite import expected_failures
from tvm import relax

from shapefn.compiler import relax_vm
from shapefn.compiler.schedules.target_schedule import host_target
from shapefn.frontend import from_onnx
from shapefn.frontend.onnx.sequence_inputs import is_sequence

pytestmark = pytest.mark.model  # (a compile per case: not under the sanitizer)

CPU = host_target()
# Sample cases that fail under TVM's VM only, and why.
_WINDOW = ("TVM's VMShapeLower: 'PrimExpr T.int64(4) * arange_0 has not been computed' (a window's length from a"
           " Range whose size a shape function gives, scaled, reaches a shape before VMShapeLower computes it)")
PIPELINE_FAILURES: dict[str, str] = {
    "test_blackmanwindow": _WINDOW,
    "test_hammingwindow": _WINDOW,
    "test_hannwindow": _WINDOW,
}


@functools.cache
def sample() -> list[str]:
    """One passing single-node case per operator, by name."""
    passing_elsewhere = expected_failures()
    by_operator = collections.defaultdict(list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the case generators' own overflows)
        cases = onnx.backend.test.loader.load_model_tests(kind="node")
    for case in cases:
        nodes = case.model.graph.node if case.model is not None else []
        if len(nodes) == 1 and f"{case.name}_cpu" not in passing_elsewhere:
            by_operator[nodes[0].op_type].append(case.name)
    return sorted(min(names) for names in by_operator.values())


class RelaxVMRep(BackendRep):
    """Compiled at its first run: sequence inputs (lists) are imported for
    the lengths given, as shapefn's backend imports them."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        initializers = {i.name for i in model.graph.initializer}
        self.inputs = [i.name for i in model.graph.input if i.name not in initializers]
        self.sequences = [is_sequence(o) for o in model.graph.output]

    def run(self, inputs, **kwargs):
        args = [inputs[n] for n in self.inputs] if isinstance(inputs, dict) else list(inputs)
        lengths = {n: len(a) for n, a in zip(self.inputs, args, strict=True) if isinstance(a, list)}
        mod = from_onnx(self.model, sequence_lengths=lengths)
        library = tvm.compile(mod, target=CPU, relax_pipeline=relax_vm.pipeline(CPU))
        flat = [item for a in args for item in (a if isinstance(a, list) else [a])]
        result = relax.VirtualMachine(library, tvm.cpu())["main"](*[tvm.runtime.tensor(np.asarray(a)) for a in flat])
        items = [result] if len(self.sequences) == 1 else list(result)
        return tuple([t.numpy() for t in item] if sequence else item.numpy()
                     for item, sequence in zip(items, self.sequences, strict=True))


class RelaxVMBackend(Backend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return RelaxVMRep(model)

    @classmethod
    def supports_device(cls, device):
        return device == "CPU"


def _suite() -> None:
    runner = onnx.backend.test.BackendTest(RelaxVMBackend, __name__)
    included = {f"{name}_cpu" for name in sample()}
    runner.include("|".join(rf"^{re.escape(name)}$" for name in sorted(included)))
    for name in PIPELINE_FAILURES:
        runner.xfail(rf"^{re.escape(name)}_cpu$")
    for case in runner.test_cases.values():
        for name in [n for n in vars(case) if n.startswith("test_") and n not in included]:
            delattr(case, name)
        case.__name__ = case.__qualname__ = "RelaxVM" + case.__name__
        globals()[case.__name__] = case


_suite()


def test_the_sample_covers_every_operator_shapefn_passes():
    """The sample is not empty and lists each operator once; every listed
    pipeline failure is in it and has a reason."""
    names = sample()
    assert len(names) >= 140, len(names)
    assert set(PIPELINE_FAILURES) <= set(names)
    assert all(reason.strip() for reason in PIPELINE_FAILURES.values())
