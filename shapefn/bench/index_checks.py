"""What checking indices read from data costs a whole model per inference
(docs/guarantees.md#indices-from-data): each model compiled twice in one
process, with its index checks and with every checked index clamped
instead (``index_checks.without_checks``, as TVM's VM has them), and both
timed interleaved on the same inputs.

``python -m shapefn.bench index_checks [--models NAME ...] [--device host]
[--repeat N] [--json]`` prints per model the median and minimum seconds per
inference of each build, their ratio, and how many kernels check indices.
"""
from __future__ import annotations

import argparse
import contextlib
import json

import numpy as np

from .. import VirtualMachine
from .. import compile as compile_model
from ..compiler.passes import index_checks
from ..frontend import from_onnx
from . import models, timing

DEFAULT_MODELS = ["ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"]


@contextlib.contextmanager
def _unchecked():
    """Compiles in the scope clamp every checked index and check nothing."""
    checks_of, materialize = index_checks.checks_of, index_checks.materialize
    index_checks.checks_of = lambda func: []
    index_checks.materialize = lambda func, name="", whats=None: index_checks.without_checks(func)
    try:
        yield
    finally:
        index_checks.checks_of, index_checks.materialize = checks_of, materialize


def measure(name: str, repeat: int, device: str) -> dict:
    proto, calls = models.load(name, models._data_dir(None))
    return measure_model(name, proto, calls, repeat, device)


def measure_model(name: str, proto, calls: list, repeat: int, device: str) -> dict:
    """The figures of ``proto`` run on ``calls[0]``."""
    mod = from_onnx(proto)
    checked = compile_model(mod, device)
    with _unchecked():
        unchecked = compile_model(mod, device)
    vms = {"checked": VirtualMachine(checked, device), "unchecked": VirtualMachine(unchecked, device)}
    for a, b in zip(_outputs(vms["checked"](*calls[0])), _outputs(vms["unchecked"](*calls[0]))):  # (the same answers)
        np.testing.assert_array_equal(a, b)
    sites = len(checked._core.check_sites)

    def call(vm):
        return lambda: _outputs(vm(*calls[0]))

    times = timing.interleaved({k: call(vm) for k, vm in vms.items()}, repeat=repeat)["wall"]
    median, minimum = timing.summarize(times, {k: 1.0 for k in vms})
    return {"model": name, "device": device, "check_sites": sites, "checked_s": median["checked"],
            "unchecked_s": median["unchecked"], "checked_min_s": minimum["checked"],
            "unchecked_min_s": minimum["unchecked"], "ratio": median["checked"] / median["unchecked"]}


def _outputs(result) -> list:
    """A call's results read back (which verifies their checks)."""
    return [t.numpy() for t in (result if isinstance(result, tuple) else (result,))]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench index_checks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--device", default="host")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    results = [measure(name, args.repeat, args.device) for name in args.models]
    if args.json:
        print(json.dumps({"index_checks": results}, indent=1))
        return
    for r in results:
        print(f"{r['model']} on {r['device']}: checked {r['checked_s'] * 1e3:.2f} ms, unchecked "
              f"{r['unchecked_s'] * 1e3:.2f} ms (median of {args.repeat}; ratio {r['ratio']:.3f}), "
              f"{r['check_sites']} check sites")
