"""ONNX's whole conformance suite through ``shapefn.frontend.onnx.backend`` on
``sim``: every node test, and the ``simple``, ``pytorch-converted`` and
``pytorch-operator`` models the ``onnx`` package ships (not the ``real``
models, which it downloads), by ONNX's own runner
(``onnx.backend.test.BackendTest``) with the suite's tolerances.

The cases shapefn does not pass are listed, each with its reason, in
``data/onnx_backend_expected_failures.txt`` (written by
``tools/onnx_expected_failures.py``). A listed case that fails is an
expected failure; one that passes fails the run ("unexpected success")
until it is taken off the list, so the list only shrinks. The sample on
``opencl`` is test_onnx_backend.py's."""
import pathlib
import re

import onnx.backend.test
import pytest

import shapefn.frontend.onnx.backend

pytestmark = pytest.mark.model  # (a compile per case: not under the sanitizer)

EXPECTED_FAILURES = pathlib.Path(__file__).parent / "data" / "onnx_backend_expected_failures.txt"
# The runner's categories this module runs (``real`` models are downloaded).
CATEGORIES = ("NodeModel", "SimpleModel", "PyTorchConvertedModel", "PyTorchOperatorModel")


def expected_failures() -> dict[str, str]:
    """Case name -> why it fails, from the list (``name<TAB>reason`` lines)."""
    listed = {}
    for line in EXPECTED_FAILURES.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, reason = line.partition("\t")
            listed[name] = reason
    return listed


def _suite() -> None:
    runner = onnx.backend.test.BackendTest(shapefn.frontend.onnx.backend, __name__)
    runner.include(r"_cpu$")
    for name in expected_failures():
        runner.xfail(rf"^{re.escape(name)}$")
    for category in [c for c in runner._test_items if c not in CATEGORIES]:
        del runner._test_items[category]
    for case in runner.test_cases.values():
        # (only the CPU cases: ONNX's runner would list the others as skipped)
        for name in [n for n in vars(case) if n.startswith("test_") and not n.endswith("_cpu")]:
            delattr(case, name)
        case.__name__ = case.__qualname__ = "Suite" + case.__name__
        globals()[case.__name__] = case


_suite()


def test_expected_failures_name_cases_of_the_suite():
    """Every listed case exists (a renamed case would otherwise leave a
    stale entry that expects nothing) and has a reason."""
    cases = {name for case in globals().values() if isinstance(case, type) for name in vars(case)
             if name.startswith("test_")}
    listed = expected_failures()
    assert set(listed) <= cases, sorted(set(listed) - cases)[:10]
    assert all(reason.strip() for reason in listed.values())
