"""Builds for CUDA, checked without a GPU: the profiling example of docs/profiling.md
and the Mask R-CNN-style mask head (whole detectors' builds are made for the
GPU machine, tools/gpu_prepare.sh: one nvcc run of minutes each on two cores)
compile for ``cuda`` into a library whose device module is
a fatbin made by the machine's nvcc, holding machine code (SASS) of every
kernel the program invokes on the device for each architecture asked and
PTX for newer GPUs, as NVIDIA's ``cuobjdump`` lists them; kernels run on the
host are host code; and the bytecode (every readback, copy and sync) is the
``sim`` build's. Where a CUDA GPU is present, the programs also run on it
against the ``sim`` results.

Which architectures: the default list, a target's ``arch``, ``cuda_archs``;
each build for other architectures is a kernel cache entry of its own.
The program builds are for one architecture (each one more costs a ptxas
run over every kernel); one test builds for the default list."""
import collections
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import tvm
from test_onnx_mask_head import detections, mask_head_model

import shapefn
from conftest import ProfilingExample
from shapefn.compiler.machine_code import cuda_fatbin, kernel_cache
from shapefn.frontend import from_onnx

HOST_SUFFIX = "_host"  # what a GPU build names the host copy of a kernel
NVCC_MISSING = "no nvcc (CUDA toolkit) on this machine: the device module keeps CUDA source"
GPU_MISSING = "no CUDA GPU on this machine: the CUDA build is checked, not run"
CUOBJDUMP_MISSING = "no cuobjdump (pip install nvidia-cuda-cuobjdump, in tests/requirements.txt)"
DEFAULT = ["sm_80", "sm_86", "sm_89", "sm_90"]


def one_architecture() -> list[str] | None:
    """The oldest architecture this nvcc compiles for: its PTX runs on every
    newer GPU (the tests that run a build), and one ptxas run per build
    keeps CI's compiles short. None (the default) without nvcc, which then
    compiles nothing."""
    compiler = cuda_fatbin.nvcc()
    return [cuda_fatbin.supported_architectures(compiler)[0]] if compiler else None


def cuobjdump() -> str:
    """NVIDIA's cuobjdump: on the PATH or from the nvidia-cuda-cuobjdump
    wheel; a test that needs it skips without it, but fails in CI."""
    found = shutil.which("cuobjdump")
    if found is None and (nvidia := importlib.util.find_spec("nvidia")) is not None:
        candidates = [pathlib.Path(d) / "cu13" / "bin" / "cuobjdump" for d in nvidia.submodule_search_locations or []]
        found = next((str(c) for c in candidates if c.exists()), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(CUOBJDUMP_MISSING)
        pytest.skip(CUOBJDUMP_MISSING)
    return found


def fatbin_contents(cuda) -> dict:
    """What the device module of executable ``cuda`` holds, by cuobjdump:
    ``sass`` {architecture: kernel names}, ``ptx`` [architectures]."""
    if cuda_fatbin.nvcc() is None:
        pytest.skip(NVCC_MISSING)
    (device_module,) = [m for m in cuda.library.imports if m.kind == "cuda"]
    assert list(device_module.get_write_formats()) == ["fatbin"]
    tool = cuobjdump()
    with tempfile.TemporaryDirectory(prefix="shapefn-test-") as directory:
        path = os.path.join(directory, "kernels.fatbin")
        device_module.write_to_file(path, "fatbin")

        def listing(option):
            return subprocess.run([tool, option, path], capture_output=True, text=True, check=True).stdout

        elf, ptx, text = listing("--list-elf"), listing("--list-ptx"), listing("--list-text")
        ptx_code = listing("--dump-ptx")
    sass = {arch: set() for arch in re.findall(r"\.(sm_\w+)\.cubin$", elf, re.M)}
    # "SASS text section 3 : x-multiply33_kernel.sm_80.elf.bin"
    for name, arch in re.findall(r": x-(\w+)\.(sm_\w+)\.elf\.bin$", text, re.M):
        sass[arch].add(name)
    entries = dict(re.findall(r"\.entry (\w+)\((.*?)\n\}", ptx_code, re.S))
    return {"sass": sass, "ptx": re.findall(r"\.(sm_\w+)\.ptx$", ptx, re.M), "ptx_entries": entries}


def profiling_example():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    return ProfilingExample, [(x, np.array([3, 5], np.int64))]


def mask_head():
    return from_onnx(mask_head_model()), [list(detections(12, 10, 12))]


PROGRAMS = {"profiling_example": profiling_example, "mask_head": mask_head}


def device_kernels(exe) -> set[str]:
    """Kernels the bytecode calls with a tensor allocated on the device or
    read from a device constant (every kernel that touches device memory)."""
    on_device, kernels = set(), set()
    for line in exe.as_text().splitlines():
        if m := re.match(r"\s*\d+: alloc_tensor (%\d+), @device", line):
            on_device.add(m[1])
        elif m := re.match(r"\s*\d+: (?:move|view) (%\d+), (%\d+)", line):
            if m[2] in on_device:
                on_device.add(m[1])
        elif m := re.match(r"\s*\d+: invoke_kernel kernel#(\d+), \[(.*)\]", line):
            if set(m[2].split(", ")) & on_device:
                kernels.add(exe.kernel_names[int(m[1])])
    return kernels


# Host arithmetic on sizes and the loading of constants: a CPU build
# legalizes convolutions (depthwise ones too) and matmuls by constants into
# packed kernels (compiler/kernels/cpu_conv.py, cpu_depthwise.py), whose
# weights and output sizes are written in other terms than a GPU build's.
SIZE_ARITHMETIC = {"add", "sub", "mul", "floordiv", "floormod", "min", "max", "shape_build", "load_const",
                   "load_int"}


def instruction_profile(exe) -> collections.Counter:
    """What each function's bytecode does, as counts of its instructions
    with their device slots and readback widths (but ``SIZE_ARITHMETIC``):
    TVM orders the size parameters of some kernels differently from one
    compile to the next, so two builds of a model differ in register
    numbers, not in these."""
    profile = collections.Counter()
    for line in exe.as_text().splitlines():
        if m := re.match(r"\s*\d+: (\w+)(.*)", line):
            mnemonic, operands = m[1], m[2]
            if mnemonic in SIZE_ARITHMETIC:
                continue
            key = [mnemonic, *re.findall(r"@\w+", operands)]
            if mnemonic == "readback":
                key.append(operands.count("%") // 2)
            profile[tuple(key)] += 1
        else:
            profile[line.split("(")[0]] += 1  # a function's header
    return profile


def assert_same_program(sim, cuda):
    # The same readbacks (and widths), copies, allocations per device and
    # kernel calls: the same transfers and syncs per call.
    # (Not the kernels' names or how many there are: TVM numbers and merges
    # identical kernels differently from one compile to the next.)
    assert instruction_profile(cuda) == instruction_profile(sim)


def assert_device_kernels_are_sass(cuda, archs):
    """Executable ``cuda``'s fatbin has SASS of every kernel it invokes on
    the device for each of ``archs`` (and no other), PTX for the oldest, and
    nothing of its host kernels, which are host code; every kernel is
    parallel."""
    contents = fatbin_contents(cuda)
    assert sorted(contents["sass"]) == sorted(archs)
    assert contents["ptx"] == [archs[0]]
    host = {n for n in cuda.kernel_names if n.endswith(HOST_SUFFIX)}
    device = set(cuda.kernel_names) - host
    assert device_kernels(cuda) == device
    for arch, entries in contents["sass"].items():
        for name in device:
            # A kernel of several launches has entries <name>_kernel, <name>_kernel_1, ...
            assert f"{name}_kernel" in entries, (arch, name)
        assert not any(e.startswith(tuple(host)) for e in entries)
    for name in host:
        assert cuda.library.implements_function(name, query_imports=False)
    # No serial device kernel: every entry reads a thread or block index
    # (TVM drops the index of a one-thread launch, as in a host loop of them).
    assert contents["ptx_entries"]
    serial = [e for e, body in contents["ptx_entries"].items() if "%tid." not in body and "%ctaid." not in body]
    assert not serial, serial


def assert_runs_on_a_cuda_gpu_like_sim(sim, cuda, calls):
    if not shapefn.tvm_device_exists("cuda"):
        pytest.skip(GPU_MISSING)
    for args in calls:
        want_vm, got_vm = shapefn.VirtualMachine(sim, "sim"), shapefn.VirtualMachine(cuda, "cuda")
        want, got = want_vm(*args), got_vm(*args)
        want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
        for key in ("d2h_copies", "d2h_bytes", "syncs", "kernel_calls", "shape_func_calls"):
            assert got_vm.counters[key] == want_vm.counters[key], key


@pytest.fixture(scope="module", params=list(PROGRAMS))
def builds(request):
    mod, calls = PROGRAMS[request.param]()
    return shapefn.compile(mod, "sim"), shapefn.compile(mod, "cuda", cuda_archs=one_architecture()), calls


def test_bytecode_is_the_sim_builds(builds):
    sim, cuda, _ = builds
    assert_same_program(sim, cuda)


def test_device_kernels_are_sass_and_host_kernels_host_code(builds):
    _, cuda, _ = builds
    assert_device_kernels_are_sass(cuda, one_architecture())


def test_runs_on_a_cuda_gpu_like_sim(builds):
    sim, cuda, calls = builds
    assert_runs_on_a_cuda_gpu_like_sim(sim, cuda, calls)


def this_gpu() -> list[str]:
    gpu = tvm.cuda(0)
    return [f"sm_{gpu.compute_version.replace('.', '')}"] if gpu.exist else []


def test_by_default_sass_is_for_the_usual_gpus_and_this_machines():
    mod, _ = profiling_example()
    cuda = shapefn.compile(mod, "cuda")
    assert_device_kernels_are_sass(cuda, sorted(set(DEFAULT + this_gpu()), key=lambda a: int(a[3:])))


def test_a_targets_arch_is_the_one_built_for():
    # (One that is not what TVM fills in: this machine's GPU's, if any.)
    arch = next(a for a in ("sm_86", "sm_89") if a != tvm.target.Target({"kind": "cuda"}).attrs["arch"])
    mod, _ = profiling_example()
    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")
    assert_device_kernels_are_sass(shapefn.compile(mod, "cuda", target=target), [arch])


def test_a_build_for_other_architectures_is_another_cache_entry():
    mod, _ = profiling_example()
    exe = {arch: shapefn.compile(mod, "cuda", cuda_archs=[arch]) for arch in ("sm_86", "sm_89")}
    if cuda_fatbin.nvcc() is None:
        pytest.skip(NVCC_MISSING)
    assert exe["sm_86"]._library_path != exe["sm_89"]._library_path
    for arch, built in exe.items():
        assert sorted(fatbin_contents(built)["sass"]) == [arch]


@pytest.mark.parametrize("archs, error, says", [
    (["sm90"], ValueError, "not a CUDA architecture: 'sm90'"),
    ([], ValueError, "cuda_archs is empty"),
    ("sm_90", TypeError, r"a list of architectures, e.g. \['sm_90'\]"),
])
def test_bad_architectures_fail_before_compiling(archs, error, says, monkeypatch):
    monkeypatch.setattr(kernel_cache, "build", lambda *args, **kwargs: pytest.fail("kernels were built"))
    mod, _ = profiling_example()
    with pytest.raises(error, match=says):
        shapefn.compile(mod, "cuda", cuda_archs=archs)


def test_an_architecture_nvcc_cannot_compile_for_is_named():
    compiler = cuda_fatbin.nvcc()
    if compiler is None:
        pytest.skip(NVCC_MISSING)
    mod, _ = profiling_example()
    with pytest.raises(cuda_fatbin.CudaCompileError, match=r"cannot compile for sm_50; it supports sm_\d+"):
        shapefn.compile(mod, "cuda", cuda_archs=["sm_50"])


def test_cuda_archs_on_another_device_is_an_error():
    mod, _ = profiling_example()
    with pytest.raises(ValueError, match="cuda_archs is for CUDA builds; this one is for llvm"):
        shapefn.compile(mod, "sim", cuda_archs=["sm_90"])


def test_one_front_end_run_for_every_general_architecture():
    assert cuda_fatbin.gencode_flags(["sm_80", "sm_90", "sm_90a"]) == [
        "-gencode", "arch=compute_80,code=[sm_80,sm_90,compute_80]",
        "-gencode", "arch=compute_90a,code=sm_90a"]
