"""Writes tests/data/onnx_backend_expected_failures.txt: the cases of ONNX's
conformance suite (those tests/test_onnx_backend_suite.py runs) that
shapefn does not pass on sim, each with its reason (the first line of its
error; "wrong answer:" where the outputs differ from the reference), and
prints the counts.

    python tools/onnx_expected_failures.py [pytest options, e.g. -n 2]

Run it after a change that makes cases pass (the suite then reports them
as unexpected successes) and review the difference: a case must never
move from passing to the list without a reason.
"""
from __future__ import annotations

import collections
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIST = ROOT / "tests" / "data" / "onnx_backend_expected_failures.txt"
HEADER = """\
# Cases of ONNX's conformance suite shapefn does not pass on sim, and why
# (tests/test_onnx_backend_suite.py; written by tools/onnx_expected_failures.py).
# "wrong answer" marks outputs that differ from ONNX's reference: each one is a bug.
"""


# Cases whose reference outputs are random draws (numpy's generator):
# shapefn draws its own, from the node's seed.
RANDOM = ("test_training_dropout",)
# Cases whose reference outputs are further from the exact result than the
# suite's tolerance (test_onnx_signal.py checks shapefn's against the exact
# transform, computed in double precision).
IMPRECISE_REFERENCE = {
    "test_dft_inverse": "ONNX's reference (numpy's single-precision FFT) gives 1.9e-07 where the exact inverse "
                        "transform is 0 (shapefn: 6e-15); the suite's atol is 1e-07",
}


def reason(name: str, message: str) -> str:
    """One line saying why case ``name`` failed."""
    text = message.strip()
    mismatch = "Not equal to tolerance" in text or "Mismatched elements" in text
    if name.startswith(RANDOM) and mismatch:
        return "random by definition: shapefn's mask comes from the seed, the reference's from numpy's generator"
    imprecise = next((why for case, why in IMPRECISE_REFERENCE.items() if name.startswith(case)), None)
    if imprecise and mismatch:
        return "imprecise reference: " + imprecise
    if "Not equal to tolerance" in text or "Mismatched elements" in text or "Arrays are not equal" in text \
            or "Items are not equal" in text or "nan location mismatch" in text:
        return "wrong answer: " + " ".join(text.split())[:160]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "failed")
    return re.sub(r"\s+", " ", first)[:200]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="shapefn-onnx-suite-") as tmp:
        module = pathlib.Path(tmp) / "test_suite_unlisted.py"
        # The suite's module with an empty list: every case runs as a test.
        source = (ROOT / "tests" / "test_onnx_backend_suite.py").read_text()
        listed = 'pathlib.Path(__file__).parent / "data" / "onnx_backend_expected_failures.txt"'
        module.write_text(source.replace(listed, 'pathlib.Path(__file__).parent / "empty.txt"'))
        (pathlib.Path(tmp) / "empty.txt").write_text("")
        report = pathlib.Path(tmp) / "report.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        f"--junitxml={report}", str(module), *argv], cwd=tmp, check=False)
        failures, counts = {}, collections.Counter()
        for case in ET.parse(report).iter("testcase"):
            if not case.get("name", "").endswith("_cpu"):
                continue  # (the module's own checks)
            failed = [c for c in case if c.tag in ("failure", "error")]
            counts["failed" if failed else "passed"] += 1
            if failed:
                failures[case.get("name")] = reason(case.get("name"), failed[0].get("message") or failed[0].text or "")
    LIST.write_text(HEADER + "".join(f"{name}\t{why}\n" for name, why in sorted(failures.items())))
    wrong = sum(why.startswith("wrong answer") for why in failures.values())
    print(f"{counts['passed']} passed, {counts['failed']} failed ({wrong} wrong answers); wrote {LIST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
