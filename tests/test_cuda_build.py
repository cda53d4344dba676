"""Builds for CUDA, checked without a GPU: the README's profiling example
and the Mask R-CNN-style mask head (SSD-lite and Faster R-CNN: in
test_models.py, with the same checks) compile for ``cuda`` into a library
whose device module holds every kernel the program invokes on the device,
as PTX compiled by the machine's nvcc; kernels run on the host are host
code; and the bytecode (every readback, copy and sync) is the ``sim``
build's. Where a CUDA GPU is present, the programs also run on it against
the ``sim`` results."""
import collections
import re

import numpy as np
import pytest
from test_onnx_mask_head import detections, mask_head_model

import shapefn
from conftest import ProfilingExample
from shapefn import cuda_ptx
from shapefn.frontend import from_onnx

HOST_SUFFIX = "_host"  # what a GPU build names the host copy of a kernel
NVCC_MISSING = "no nvcc (CUDA toolkit) on this machine: the device module keeps CUDA source"
GPU_MISSING = "no CUDA GPU on this machine: the CUDA build is checked, not run"


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


def assert_device_kernels_are_ptx(cuda):
    if cuda_ptx.nvcc() is None:
        pytest.skip(NVCC_MISSING)
    (device_module,) = [m for m in cuda.library.imports if m.kind == "cuda"]
    ptx = device_module.inspect_source("ptx")
    assert ".entry" in ptx and ".target sm_" in ptx
    entries = set(re.findall(r"\.entry (\w+)", ptx))
    host = {n for n in cuda.kernel_names if n.endswith(HOST_SUFFIX)}
    device = set(cuda.kernel_names) - host
    assert device_kernels(cuda) == device
    for name in device:
        # A kernel of several launches has entries <name>_kernel, <name>_kernel_1, ...
        assert f"{name}_kernel" in entries, name
    assert not any(e.startswith(tuple(host)) for e in entries)
    for name in host:
        assert cuda.library.implements_function(name, query_imports=False)


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
    return shapefn.compile(mod, "sim"), shapefn.compile(mod, "cuda"), calls


def test_bytecode_is_the_sim_builds(builds):
    sim, cuda, _ = builds
    assert_same_program(sim, cuda)


def test_device_kernels_are_ptx_and_host_kernels_host_code(builds):
    _, cuda, _ = builds
    assert_device_kernels_are_ptx(cuda)


def test_runs_on_a_cuda_gpu_like_sim(builds):
    sim, cuda, calls = builds
    assert_runs_on_a_cuda_gpu_like_sim(sim, cuda, calls)
