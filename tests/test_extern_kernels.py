"""Kernels a user writes in Python: registered with tvm-ffi, emitted with
``shapefn.emit_extern``, given tensors every tvm-ffi callee can use
(DLPack export included) on every device: numpy views where the memory is
the host's (host, sim), copies anywhere (OpenCL too)."""
import numpy as np
import pytest
import tvm_ffi

import shapefn
from conftest import DEVICES, first_rows_module, opencl

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

kept = []


@tvm_ffi.register_global_func("test.extern.first_rows_numpy", override=True)
def first_rows_numpy(data, k, out):
    """The first k rows of data, through numpy views of the VM's memory."""
    rows = int(np.from_dlpack(k)[0])
    np.from_dlpack(out)[...] = np.from_dlpack(data)[:rows]


@tvm_ffi.register_global_func("test.extern.first_rows_copies", override=True)
def first_rows_copies(data, k, out):
    """The same through copies (what a kernel does with device tensors)."""
    out.copyfrom(data.numpy()[: int(k.numpy()[0])])


@tvm_ffi.register_global_func("test.extern.first_rows_keeping", override=True)
def first_rows_keeping(data, k, out):
    """Keeps its arguments after the call: they must stay valid."""
    kept.append((data, data.numpy()))
    first_rows_copies(data, k, out)


def program(kernel: str, device: str):
    return shapefn.VirtualMachine(shapefn.compile(first_rows_module(kernel), device), device)


@pytest.mark.parametrize("device", ["host", "sim"])
def test_python_kernel_reads_and_writes_through_dlpack(device):
    vm = program("test.extern.first_rows_numpy", device)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    for rows in (2, 5, 0):
        np.testing.assert_array_equal(vm(data, np.array([rows], np.int64)).numpy(), 2 * data[:rows] + 1)


@opencl
def test_numpy_cannot_view_opencl_memory_and_the_vm_goes_on():
    """An OpenCL buffer is not host memory: numpy refuses the tensors, and
    the kernel's error reaches the caller, naming why, call after call."""
    vm = program("test.extern.first_rows_numpy", "opencl")
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"kernel 'test.extern.first_rows_numpy' failed: .*"
                                               r"Unsupported device in DLTensor"):
            vm(data, np.array([2], np.int64))


@pytest.mark.parametrize("device", ["host", *DEVICES])
def test_python_kernel_copying_its_tensors(device):
    vm = program("test.extern.first_rows_copies", device)
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(vm(data, np.array([4], np.int64)).numpy(), 2 * data[:4] + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_a_tensor_kept_by_the_kernel_outlives_the_call(device):
    vm = program("test.extern.first_rows_keeping", device)
    kept.clear()
    inputs = [np.full((4, 3), v, np.float32) for v in (1.0, 2.0, 3.0)]
    for x in inputs:
        np.testing.assert_array_equal(vm(x, np.array([2], np.int64)).numpy(), 2 * x[:2] + 1)
    # Later calls did not reuse the memory the kernel still holds.
    for (tensor, seen), x in zip(kept, inputs, strict=True):
        np.testing.assert_array_equal(tensor.numpy(), seen)
        np.testing.assert_array_equal(seen, 2 * x)
    kept.clear()
