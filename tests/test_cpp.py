"""Runs the C++ unit tests (csrc/tests, GoogleTest): the verifier, the
interpreter per instruction family, the executable file, the memory pool,
the OpenCL runtime's address map, the registry, the built-in shape functions
and the profiler's placement of device times. ``shapefn_cpp_tests`` is built
and installed beside shapefn's extension modules when GoogleTest is found at
build time; each of its failing tests fails here by name."""
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import opencl
from shapefn import _core

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

BINARY = os.path.join(os.path.dirname(_core.__file__), "shapefn_cpp_tests")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not os.path.exists(BINARY):
        pytest.fail(f"{BINARY} was not built: install GoogleTest (apt-get install libgtest-dev) "
                    "and reinstall shapefn")
    xml = tmp_path_factory.mktemp("gtest") / "report.xml"
    run = subprocess.run([BINARY, f"--gtest_output=xml:{xml}"], capture_output=True, text=True, timeout=300)
    assert xml.exists(), f"shapefn_cpp_tests wrote no report (exit code {run.returncode}):\n{run.stdout}{run.stderr}"
    return run, ET.parse(xml).getroot()


def test_cpp_unit_tests_pass(report):
    run, root = report
    failed = [f"{case.get('classname')}.{case.get('name')}: {failure.get('message')}"
              for case in root.iter("testcase") for failure in case.iter("failure")]
    assert not failed, "failing C++ tests:\n" + "\n".join(failed)
    assert run.returncode == 0, run.stdout + run.stderr


# OpenCLAddressMap needs an OpenCL device (it skips without one, as the
# opencl marker makes this check do).
@pytest.mark.parametrize("suite", ["Verifier", "Registry", "StridedSlice", "Reshape", "TopK", "Broadcast",
                                   "BroadcastTo", "Tile", "Full", "Arange", "InterpreterMoves", "InterpreterShapes",
                                   "InterpreterAlloc", "InterpreterKernels", "InterpreterShapeFuncs",
                                   "InterpreterReadback", "InterpreterControl", "ExecutableIO", "MemoryPool",
                                   pytest.param("OpenCLAddressMap", marks=opencl)])
def test_cpp_suite_ran(report, suite):
    _, root = report
    ran = [case for case in root.iter("testcase") if case.get("classname") == suite and case.get("result") != "skipped"]
    assert ran, f"no C++ test of suite {suite} ran"
