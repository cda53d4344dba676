"""shapefn bundle: a folder that runs a saved executable with no Python
packages. Bundles of sim, host and opencl builds, moved to a fresh folder and
run with an empty environment, must give the outputs and counters of the
installed runner; every library they load must come from the bundle or the
operating system; a cuda bundle must carry TVM's CUDA runtime and everything
it needs but the driver."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tvm
from test_runner import DynamicSlice, installed_runner, run_ok, save_inputs

import shapefn
from conftest import opencl
from shapefn import ExecutableFormatError
from shapefn.runtime.bundle import bundle

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

# What the operating system provides (glibc and the C++ runtime; the
# sanitizers' runtimes, which a build with SHAPEFN_SANITIZE=ON links).
SYSTEM_LIBRARIES = ("linux-vdso", "libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux",
                    "libstdc++.so", "libgcc_s.so", "libasan.so", "libubsan.so")
# An empty environment but for the PATH of system tools, which PoCL needs (it
# links the kernels it compiles with the system's ld), and the sanitizers'
# settings where tools/sanitize-pytest runs the tests.
BARE_ENVIRONMENT = {"PATH": "/usr/bin:/bin",
                    **{k: os.environ[k] for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS") if k in os.environ}}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``saved(device)``: the dynamic-slice model compiled for ``device`` and saved."""
    paths = {}

    def get(device):
        if device not in paths:
            paths[device] = tmp_path_factory.mktemp(f"saved-{device}") / "slice.sfx"
            shapefn.compile(DynamicSlice, "sim" if device == "host" else device).save(paths[device])
        return paths[device]

    return get


def moved_bundle(exe, tmp_path):
    """The bundle of ``exe``, written and then moved to another folder, so
    nothing in it can point back to where it was made."""
    made = bundle(exe, tmp_path / "made")
    moved = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(made.directory, moved, symlinks=True)
    shutil.rmtree(made.directory)
    return made, moved


def loaded_libraries(path, env):
    """{name: resolved path or "not found"} per ldd, for the ELF file ``path``."""
    listing = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env, check=True).stdout
    found = {}
    for line in listing.splitlines():
        name, _, where = line.strip().partition(" => ")
        found[name.split()[0]] = where.split(" (")[0] if where else name
    return found


def foreign(libraries, bundle_dir, allowed=()):
    """The libraries that come neither from the bundle nor from the system."""
    return {name: where for name, where in libraries.items()
            if not where.startswith(str(bundle_dir)) and not os.path.basename(name).startswith(SYSTEM_LIBRARIES)
            and name not in allowed}


@pytest.mark.parametrize("device", ["sim", "host", pytest.param("opencl", marks=opencl)])
def test_a_moved_bundle_runs_in_an_empty_environment_as_the_installed_runner(saved, tmp_path, device):
    exe = saved(device)
    made, moved = moved_bundle(exe, tmp_path)
    assert made.files == sorted(["bin/shapefn-run", "lib/libshapefn_core.so", "lib/libtvm_ffi.so",
                                 "lib/libtvm_runtime.so", "slice.sfx", "slice.sfx.kernels.so"])
    x, offset = np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32), np.array([2, 3], np.int64)
    inputs = save_inputs(tmp_path, [x, offset])
    args = ["--device", device, "--output-dir", "OUT", "--repeat", "2", "--input", inputs[0], "--input", inputs[1]]

    bundled = subprocess.run([str(moved / "bin" / "shapefn-run"), str(moved / "slice.sfx"), *args],
                             cwd=tmp_path, capture_output=True, text=True, env=BARE_ENVIRONMENT, timeout=300)
    assert bundled.returncode == 0, bundled.stderr
    assert not foreign(loaded_libraries(moved / "bin" / "shapefn-run", BARE_ENVIRONMENT), moved)

    installed = installed_runner()
    (tmp_path / "OUT").rename(tmp_path / "bundled")
    report = run_ok(installed, [exe, *args], tmp_path)
    bundled_report = json.loads(bundled.stdout)
    assert bundled_report["counters"] == report["counters"]
    assert bundled_report["constant_counters"] == report["constant_counters"]
    for name in report["outputs"]:
        np.testing.assert_array_equal(np.load(tmp_path / "bundled" / name), np.load(tmp_path / "OUT" / name))
    y = x[offset[0] + 1:, offset[1] + 1:]
    np.testing.assert_array_equal(np.load(tmp_path / "bundled" / "out0.npy"), y)  # numpy's answer


def test_a_cuda_bundle_carries_the_cuda_runtime_and_all_it_needs_but_the_driver(saved, tmp_path):
    exe = saved("cuda")
    made, moved = moved_bundle(exe, tmp_path)
    assert {"bin/shapefn-run", "lib/libtvm_runtime_cuda.so", "slice.sfx", "slice.sfx.kernels.so"} <= set(made.files)
    assert any("libcuda.so.1" in note for note in made.notes)
    # The CUDA runtime travels where this machine has one (a toolkit, or PyPI's
    # nvidia-cuda-runtime); else the bundle says the target must provide it.
    carries_cudart = "lib/libcudart.so.13" in made.files
    assert carries_cudart or any("libcudart.so.13" in note for note in made.notes)
    allowed = ("libcuda.so.1",) if carries_cudart else ("libcuda.so.1", "libcudart.so.13")
    for path in (moved / "bin" / "shapefn-run", moved / "lib" / "libtvm_runtime_cuda.so"):
        assert not foreign(loaded_libraries(path, BARE_ENVIRONMENT), moved, allowed), path
    if not tvm.cuda().exist:  # the runner opens the CUDA runtime and asks for the driver, named
        x = save_inputs(tmp_path, [np.ones((3, 4), np.float32), np.zeros(2, np.int64)])
        proc = subprocess.run([str(moved / "bin" / "shapefn-run"), str(moved / "slice.sfx"), "--device", "cuda",
                               "--input", x[0], "--input", x[1], "--output-dir", "out"],
                              cwd=tmp_path, capture_output=True, text=True, env=BARE_ENVIRONMENT, timeout=120)
        assert proc.returncode == 1 and "no NVIDIA driver (libcuda.so.1" in proc.stderr, proc.stderr


def test_bundle_size_is_its_files(saved, tmp_path):
    made = bundle(saved("sim"), tmp_path / "b")
    assert made.size_bytes == sum((made.directory / name).stat().st_size for name in made.files)
    assert str(made).startswith(f"bundle: {made.directory} ({len(made.files)} files")


def test_bad_bundles_are_refused(saved, tmp_path):
    with pytest.raises(FileNotFoundError, match="no executable at"):
        bundle(tmp_path / "absent.sfx", tmp_path / "b")
    (tmp_path / "junk.sfx").write_bytes(b"not an executable")
    with pytest.raises(ExecutableFormatError, match="not a shapefn executable"):
        bundle(tmp_path / "junk.sfx", tmp_path / "b")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("someone's data")
    with pytest.raises(FileExistsError, match="is not an empty folder"):
        bundle(saved("sim"), full)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    alone = tmp_path / "alone" / "slice.sfx"
    alone.parent.mkdir()
    shutil.copy(saved("sim"), alone)  # without its kernel library
    with pytest.raises(FileNotFoundError, match=r"kernel library .*slice\.sfx\.kernels\.so of .* is missing"):
        bundle(alone, tmp_path / "b2")
    assert not (tmp_path / "b2").exists()


def test_the_command_writes_a_bundle_and_refuses_a_folder_in_use(saved, tmp_path):
    command = [sys.executable, "-m", "shapefn.cli", "bundle"]
    proc = subprocess.run([*command, str(saved("sim")), str(tmp_path / "b")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"bundle: {tmp_path / 'b'}") and (tmp_path / "b" / "bin" / "shapefn-run").is_file()
    proc = subprocess.run([*command, str(saved("sim")), str(tmp_path / "b")], capture_output=True, text=True)
    assert proc.returncode == 2 and "is not an empty folder" in proc.stderr
