"""shapefn's OpenCL runtime (csrc/device/opencl) on a real device: devices
found, TVM tensors and kernels through its DeviceAPI and module loader,
shapefn's VM on it, counters, and the errors it gives."""
import os
import re
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import te
from tvm.s_tir import dlight

import shapefn
from conftest import opencl
from shapefn import Param, ProgramBuilder
from shapefn.compiler import hand_built as kernels
from shapefn.compiler.machine_code import kernel_cache

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

TARGET = tvm.target.Target("opencl", host="llvm")


def gpu_library(funcs: dict):
    """``funcs`` (name -> PrimFunc) with TVM's fallback GPU schedule, built
    for OpenCL and loaded back through shapefn's loader."""
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    with TARGET:
        mod = dlight.ApplyDefaultSchedule(dlight.gpu.Fallback())(mod)
    return kernel_cache.build(mod, TARGET)[0]


def affine(dtype="float32"):
    """``out = a * x + b`` over a 2-d ``x`` of any shape: scalar arguments of two types."""
    n, m = te.var("n", "int64"), te.var("m", "int64")
    x = te.placeholder((n, m), dtype, name="x")
    a = te.var("a", dtype)
    b = te.var("b", "int32")
    out = te.compute((n, m), lambda i, j: x[i, j] * a + b.astype(dtype), name="out")
    return te.create_prim_func([x, a, b, out])


@opencl
def test_devices_are_listed():
    found = shapefn.opencl_devices()
    assert found and found[0]["name"] == "opencl:0"
    for info in found:
        assert info["type"] in ("gpu", "cpu", "accelerator", "other")
        assert info["global_mem_bytes"] > 0 and info["max_work_group_size"] > 0
        assert info["sub_buffer_alignment"] > 0
    names = [d["name"] for d in shapefn.list_devices()]
    assert names[:2] == ["host", "sim"] and "opencl:0" in names
    assert shapefn.device("opencl") is shapefn.device("opencl:0")
    assert tvm.opencl(0).exist


@opencl
def test_tvm_tensors_copy_through_the_runtime_and_are_counted():
    x = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    shapefn.reset_device_counters("opencl")
    t = tvm.runtime.tensor(x, device=tvm.opencl(0))
    np.testing.assert_array_equal(t.numpy(), x)
    c = shapefn.device_counters("opencl")
    assert (c["h2d_copies"], c["h2d_bytes"], c["d2h_copies"], c["d2h_bytes"]) == (1, x.nbytes, 1, x.nbytes)
    assert c["allocations"] == 1 and c["syncs"] >= 1


@opencl
@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (0, 5), (513, 3)])
def test_compiled_kernel_runs_on_the_device(shape):
    lib = gpu_library({"affine": affine()})
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    dev = tvm.opencl(0)
    out = tvm.runtime.tensor(np.zeros(shape, np.float32), device=dev)
    shapefn.reset_device_counters("opencl")
    lib["affine"](tvm.runtime.tensor(x, device=dev), 0.5, 3, out)
    np.testing.assert_allclose(out.numpy(), x * np.float32(0.5) + np.float32(3), rtol=1e-6)
    # No work items, no launch.
    assert shapefn.device_counters("opencl")["kernel_launches"] == (1 if x.size else 0)


@opencl
def test_vm_runs_a_program_on_the_device():
    lib = gpu_library({"scale": kernels.scale()})
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), out])
    fb.ret(out)
    vm = shapefn.VirtualMachine(pb.build(library=lib), "opencl")
    for n in (4, 1000, 0):
        x = np.arange(n, dtype=np.float32)
        vm.reset_counters()
        y = vm(x)
        assert y.device == "opencl:0"
        np.testing.assert_array_equal(np.asarray(y), 3 * x)
        c = vm.counters
        counted = (c["h2d_copies"], c["h2d_bytes"], c["kernel_calls"], c["d2h_copies"], c["syncs"])
        assert counted == (1, x.nbytes, 1, 0, 0)


def storage_program(offset: int):
    """``main(x: f32[n])``: ``3 * x`` written into a device storage at byte ``offset``."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    shape = fb.shape_of(x)
    nbytes = fb.emit("add", fb.emit("mul", fb.tensor_dim(x, 0), fb.load_int(4)), fb.load_int(offset))
    storage = fb.alloc_storage("device", nbytes)
    out = fb.tensor_in_storage(storage, fb.load_int(offset), shape, "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), out])
    fb.ret(out)
    return pb.build(library=gpu_library({"scale": kernels.scale()}))


@opencl
def test_tensors_inside_a_storage_are_passed_as_sub_buffers():
    alignment = shapefn.opencl_devices()[0]["sub_buffer_alignment"]
    vm = shapefn.VirtualMachine(storage_program(alignment), "opencl")
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(vm(x).numpy(), 3 * x)


@opencl
def test_a_misaligned_kernel_argument_is_refused():
    alignment = shapefn.opencl_devices()[0]["sub_buffer_alignment"]
    vm = shapefn.VirtualMachine(storage_program(4), "opencl")
    with pytest.raises(ValueError, match=f"tensor_in_storage: offset 4 on device 'opencl:0', which places tensors "
                                         f"at multiples of {alignment} bytes"):
        vm(np.arange(10, dtype=np.float32))


def module_bytes(source: str, kernel: str = "k", arg_types=((3, 64),), tags=("blockIdx.x", "threadIdx.x")) -> bytes:
    """A module as TVM's OpenCL codegen serialises it."""
    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    info = string(kernel) + struct.pack("<Q", len(arg_types))
    info += b"".join(struct.pack("<BBH", code, bits, 1) for code, bits in arg_types)
    info += struct.pack("<Q", len(tags)) + b"".join(string(t) for t in tags)
    info += struct.pack("<Q", len(arg_types)) + b"\0" * 4 * len(arg_types)
    return string("cl") + struct.pack("<Q", 1) + string(kernel) + info + string(source)


LOAD = "ffi.Module.load_from_bytes.opencl"


@opencl
def test_a_kernel_that_does_not_build_reports_the_build_log():
    source = "__kernel void k(__global float* a) { a[0] = undefined_name; }"
    module = tvm_ffi.get_global_func(LOAD)(module_bytes(source))
    with pytest.raises(RuntimeError, match=r"building the OpenCL program of kernels k .*failed(.|\n)*undefined_name"):
        module["k"](None, 1, 1)


def test_a_malformed_module_is_refused():
    load = tvm_ffi.get_global_func(LOAD)
    with pytest.raises(ValueError, match="not a device module of TVM"):
        load(module_bytes("x")[:-3])
    with pytest.raises(ValueError, match="launch parameter 'vthread'"):
        load(module_bytes("x", tags=("vthread",)))
    with pytest.raises(ValueError, match="format 'xclbin'"):
        load(struct.pack("<Q", 6) + b"xclbin" + module_bytes("x")[10:])


@pytest.mark.parametrize("environment, reason", [
    ({"SHAPEFN_OPENCL_LIBRARY": "/nonexistent/libOpenCL.so.1"}, "ICD loader .*could not be opened.*install"),
    ({"OCL_ICD_VENDORS": "/nonexistent", "OPENCL_VENDOR_PATH": "/nonexistent"}, "no platform.*install"),
])
def test_without_an_opencl_driver_shapefn_imports_and_says_what_to_install(environment, reason, tmp_path):
    script = textwrap.dedent("""
        import shapefn, tvm
        assert shapefn.opencl_devices() == []
        assert not tvm.opencl(0).exist
        print(shapefn.opencl_unavailable_reason())
        try:
            shapefn.device("opencl")
        except ValueError as e:
            print("ValueError", e)
    """)
    env = {**os.environ, **environment}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    if environment.get("OCL_ICD_VENDORS") and "no platform" not in done.stdout and done.returncode == 0:
        pytest.skip("this ICD loader finds drivers without OCL_ICD_VENDORS")
    assert done.returncode == 0, done.stderr
    reason_line, error_line = done.stdout.strip().splitlines()[-2:]
    assert re.search(reason, reason_line), reason_line
    assert error_line.startswith("ValueError no OpenCL device: ") and re.search(reason, error_line)


def affine_program():
    """``main(x) = 2 x + 1`` on the device, a kernel of an OpenCL library."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n", "m"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("affine"), [x, fb.load_int(2), fb.load_int(1), out])
    fb.ret(out)
    return pb.build(library=gpu_library({"affine": affine()}))


@opencl
def test_vms_in_threads_share_the_device():
    exe = affine_program()
    errors = []

    def work(seed):
        try:
            vm = shapefn.VirtualMachine(exe, "opencl")
            rng = np.random.default_rng(seed)
            for _ in range(30):
                x = rng.standard_normal(rng.integers(1, 50, size=2)).astype(np.float32)
                np.testing.assert_array_equal(vm(x).numpy(), 2 * x + 1)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    run_in_threads(work, seeds=range(4))
    assert not errors, errors


@opencl
def test_profiled_calls_are_ordered_with_the_devices_other_work():
    """A profiled call's commands go to the device's profiling queue: it
    still reads what an unprofiled call left queued, later calls read what it
    wrote, and the runtime counts the same work as for an unprofiled call.
    Calls in other threads, profiled or not, share the device meanwhile."""
    exe = affine_program()
    vm = shapefn.VirtualMachine(exe, "opencl")
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    vm(x)  # warm: the kernel is built
    shapefn.reset_device_counters("opencl")
    y = vm(x)  # queued, not waited for
    unprofiled = shapefn.device_counters("opencl")
    shapefn.reset_device_counters("opencl")
    report = vm.profile(y)  # reads y on the other queue
    assert shapefn.device_counters("opencl") == {**unprofiled, "h2d_copies": 0, "h2d_bytes": 0}
    z = vm(report.outputs)  # reads what the profiled call wrote
    np.testing.assert_array_equal(z.numpy(), 2 * (2 * (2 * x + 1) + 1) + 1)
    assert [e.time_source for e in report.events if e.track == "device"] == ["device"]

    errors = []

    def work(seed):
        try:
            vm = shapefn.VirtualMachine(exe, "opencl")
            rng = np.random.default_rng(seed)
            for i in range(20):
                x = rng.standard_normal(rng.integers(1, 50, size=2)).astype(np.float32)
                y = vm.profile(x).outputs if (seed + i) % 2 else vm(x)
                np.testing.assert_array_equal(y.numpy(), 2 * x + 1)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    run_in_threads(work, seeds=range(4))
    assert not errors, errors


@opencl
def test_a_host_kernel_given_device_memory_fails_instead_of_reading_it():
    """A kernel compiled for the CPU, called on OpenCL tensors (what a GPU
    build without device kernels would do): refused, never a silent read."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), out])
    fb.ret(out)
    library = kernels.build({"scale": kernels.scale()})
    # The executable says its kernels are CPU code: the VM refuses the device.
    with pytest.raises(ValueError, match="compiled for the CPU .* cannot run on device 'opencl:0'"):
        shapefn.VirtualMachine(pb.build(library=library), "opencl")
    # Where nothing says so (device_code ""), the kernel's own check refuses.
    vm = shapefn.VirtualMachine(pb.build(library=library, device_code=""), "opencl")
    with pytest.raises(ValueError, match=r"kernel 'scale' failed: ValueError: .*device_type"):
        vm(np.arange(4, dtype=np.float32))


def run_in_threads(work, seeds) -> None:
    """``work(seed)`` for each seed, each in a thread of its own, all at once."""
    threads = [threading.Thread(target=work, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
