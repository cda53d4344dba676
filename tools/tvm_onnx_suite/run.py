#!/usr/bin/env python3
"""Runs TVM's own ONNX frontend tests twice -- as written (TVM's importer,
``tvm.compile``, ``relax.VirtualMachine``) and through shapefn
(``shapefn.from_onnx`` + ``shapefn.compile(..., "sim")`` in place of the
test file's ``check_correctness`` and ``run_in_tvm``) -- and prints both
counts.

    python tools/tvm_onnx_suite/run.py TVM_CHECKOUT/tests/python/relax/test_frontend_onnx.py [-- PYTEST_ARGS]

The test file is copied beside this directory's conftest.py into a
temporary directory (nothing of TVM's is kept in this repository).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def run(workdir: Path, through_shapefn: bool, extra: list[str]) -> str:
    env = {**os.environ, "SHAPEFN_SUITE": "1" if through_shapefn else "0"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_frontend_onnx.py", *extra], cwd=workdir, env=env, capture_output=True, text=True)
    return done.stdout


def summary(output: str) -> str:
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return lines[-1].strip("= ") if lines else "(no summary)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("test_file", type=Path, help="apache/tvm tests/python/relax/test_frontend_onnx.py")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. -k unique)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tvm-onnx-suite-") as workdir:
        workdir = Path(workdir)
        shutil.copy(args.test_file, workdir / "test_frontend_onnx.py")
        shutil.copy(Path(__file__).with_name("conftest.py"), workdir / "conftest.py")
        tvm_out = run(workdir, False, args.pytest_args)
        shapefn_out = run(workdir, True, args.pytest_args)
    failed = [line for line in shapefn_out.splitlines() if line.startswith("FAILED")]
    print("TVM (relax.VirtualMachine):", summary(tvm_out))
    print("shapefn (sim):             ", summary(shapefn_out))
    for line in failed:
        print("  " + line)


if __name__ == "__main__":
    main()
