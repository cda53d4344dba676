"""shapefn inside TVM's own VM: programs compiled by ``tvm.compile`` with
``relax_vm.pipeline`` run on an unmodified ``relax.VirtualMachine``, on
the CPU and on the OpenCL device, and give the results of TVM's default
pipeline (where it runs the program), of shapefn's VM and of numpy. On
OpenCL every copy and sync goes through shapefn's runtime whichever VM
makes it, so the three are compared copy for copy (``device_counters``)."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import shapefn
from conftest import first_rows_module, opencl
from shapefn.bench.relax_vm import PROGRAMS, as_numpy
from shapefn.compiler import relax_vm

# (tvm target, TVM device, shapefn device)
CPU = ("llvm", tvm.cpu, "host")
OPENCL = pytest.param(("opencl", tvm.opencl, "opencl"), marks=opencl)
TARGETS = [CPU, OPENCL]


def _tvm_vm(mod: tvm.IRModule, target: str, device, pipeline="default"):
    """``mod`` compiled by ``tvm.compile`` (OpenCL kernels loaded by shapefn's
    runtime: ``runnable``) in TVM's VM."""
    return relax.VirtualMachine(relax_vm.runnable(tvm.compile(mod, target=target, relax_pipeline=pipeline)),
                                device(0))


def _run_tvm(vm, device, args):
    """Outputs and the device counters of one call (a warm-up call first)."""
    tensors = [tvm.runtime.tensor(a, device(0)) for a in args]
    vm["main"](*tensors)
    if device is tvm.opencl:
        shapefn.reset_device_counters("opencl")
    result = vm["main"](*tensors)
    counters = shapefn.device_counters("opencl") if device is tvm.opencl else None
    return as_numpy(result), counters


def _run_shapefn(mod: tvm.IRModule, name: str, args):
    vm = shapefn.VirtualMachine(shapefn.compile(mod, name), name)
    vm(*args)
    if name == "opencl":
        shapefn.reset_device_counters("opencl")
    result = vm(*args)
    counters = shapefn.device_counters("opencl") if name == "opencl" else None
    return as_numpy(result), counters


# The programs of ``python -m shapefn.bench relax_vm``, at 10 rows (the
# slice) or 64 rows of 64 columns.
CASES = {name: (mod, lambda rng, make=make, rows=10 if name == "strided_slice" else 64: make(rng, rows), reference)
         for name, (mod, make, reference) in PROGRAMS.items()}
BYTES_IN = 64 * 64  # the bool mask nonzero's input is


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
@pytest.mark.parametrize("case", CASES)
def test_results_match_numpy_tvm_and_shapefn_vm(case, target):
    mod, make_args, reference = CASES[case]
    kind, device, name = target
    args = make_args(np.random.default_rng(0))
    expected = reference(*args)
    ours, _ = _run_tvm(_tvm_vm(mod, kind, device, relax_vm.pipeline(kind)), device, args)
    default, _ = _run_tvm(_tvm_vm(mod, kind, device), device, args)
    vm, _ = _run_shapefn(mod, name, args)
    for got in (ours, default, vm):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)


# What crosses per call on the OpenCL device: shapefn's pipeline moves what
# shapefn's VM moves, never more than TVM's default pipeline, and for the
# count-sized ops a count where TVM copies the whole input.
@opencl
@pytest.mark.parametrize("case", CASES)
def test_pipeline_copies_what_shapefn_vm_copies_and_never_more_than_tvm_default(case):
    mod, make_args, _ = CASES[case]
    args = make_args(np.random.default_rng(0))
    _, ours = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl, relax_vm.pipeline("opencl")), tvm.opencl, args)
    _, vm = _run_shapefn(mod, "opencl", args)
    _, default = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl), tvm.opencl, args)
    assert (ours["d2h_bytes"], ours["syncs"]) == (vm["d2h_bytes"], vm["syncs"])
    assert ours["d2h_bytes"] <= default["d2h_bytes"] and ours["syncs"] <= default["syncs"]


@opencl
@pytest.mark.parametrize("case, ours, tvm_default", [
    # The mask of nonzero's shape function reads nothing: only the count
    # (8 bytes) crosses. TVM's default copies the whole input (the bool
    # mask; unique's float32 values) to the host and runs numpy there.
    ("nonzero", {"d2h_bytes": 8, "syncs": 1}, {"d2h_bytes": BYTES_IN, "syncs": 1}),
    ("unique", {"d2h_bytes": 8, "syncs": 1}, {"d2h_bytes": 64 * 8 * 4, "syncs": 1}),
    # Two counts, one sync; TVM's default syncs for each whole copy.
    ("two_filters", {"d2h_bytes": 16, "syncs": 1}, {"d2h_bytes": 2 * BYTES_IN, "syncs": 2}),
    # The target shape itself (2 x int64), in both.
    ("reshape_from_tensor", {"d2h_bytes": 16, "syncs": 1}, {"d2h_bytes": 16, "syncs": 1}),
    # Shape arithmetic runs on the host: nothing crosses, nothing waits;
    # TVM's default runs it on the device and reads the target shape back.
    ("shape_arithmetic", {"d2h_bytes": 0, "syncs": 0}, {"d2h_bytes": 16, "syncs": 1}),
])
def test_exact_copies_against_tvm_default(case, ours, tvm_default):
    mod, make_args, _ = CASES[case]
    args = make_args(np.random.default_rng(0))
    _, got = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl, relax_vm.pipeline("opencl")), tvm.opencl, args)
    _, default = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl), tvm.opencl, args)
    assert {k: got[k] for k in ours} == ours
    assert {k: default[k] for k in tvm_default} == tvm_default


@opencl
def test_a_slice_with_bounds_on_the_device_reads_its_extents_and_nothing_else():
    """A slice whose begin/end/strides arrive on the device: a kernel there
    computes the extents and only those cross (2 x 8 bytes, as TVM's
    default, which also computes the shape on the device), never the data
    nor the three bounds; per-op dependence copies the data too."""
    mod, make_args, _ = CASES["strided_slice"]
    args = make_args(np.random.default_rng(0))
    _, per_input = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl, relax_vm.pipeline("opencl")), tvm.opencl, args)
    _, per_op = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl, relax_vm.pipeline("opencl", "per-op")),
                         tvm.opencl, args)
    _, default = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl), tvm.opencl, args)
    assert (per_input["d2h_bytes"], per_input["syncs"]) == (16, 1) == (default["d2h_bytes"], default["syncs"])
    assert (per_op["d2h_bytes"], per_op["syncs"]) == (16 + 10 * 64 * 4, 1)


@I.ir_module
class SliceWithConstantStrides:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), begin: R.Tensor((2,), "int64"), end: R.Tensor((2,), "int64")):
        return R.dynamic_strided_slice(x, begin, end, R.const([1, 2], "int64"))


@I.ir_module
class SliceWithBoundsComputedOnTheDevice:
    """The bounds are kernels' outputs: the extents kernel fuses with the
    kernel computing ``end`` (its int64 vectors must be typed as TVM's)."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), bounds: R.Tensor((2, 2), "int64")):
        begin = R.take(bounds, R.const(0, "int64"), axis=0)
        end = R.add(R.take(bounds, R.const(1, "int64"), axis=0), R.const(1, "int64"))
        return R.dynamic_strided_slice(x, begin, end, R.const([1, 2], "int64"))


SLICES_WITH_CONSTANT_STRIDES = {
    "bounds-as-inputs": (SliceWithConstantStrides, [np.array([1, 3]), np.array([8, 40])]),
    "bounds-computed": (SliceWithBoundsComputedOnTheDevice, [np.array([[1, 3], [7, 39]])]),
}


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
@pytest.mark.parametrize("case", SLICES_WITH_CONSTANT_STRIDES)
def test_a_slice_with_constant_strides_reads_the_same_extents_under_both_vms(case, target):
    """Begin and end on the device, strides a constant: both VMs read back
    the two extents (16 bytes) in one sync, nothing else."""
    kind, device, name = target
    mod, bounds = SLICES_WITH_CONSTANT_STRIDES[case]
    x = np.arange(10 * 64, dtype="float32").reshape(10, 64)
    expected = x[1:8, 3:40:2]
    (ours,), pipeline = _run_tvm(_tvm_vm(mod, kind, device, relax_vm.pipeline(kind)), device, [x, *bounds])
    (theirs,), vm = _run_shapefn(mod, name, [x, *bounds])
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(theirs, expected)
    if kind == "opencl":
        assert (pipeline["d2h_bytes"], pipeline["syncs"]) == (vm["d2h_bytes"], vm["syncs"]) == (16, 1)


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
def test_a_zero_stride_from_the_device_is_an_error_naming_it(target):
    kind, device, name = target
    mod, make_args, _ = CASES["strided_slice"]
    x, begin, end, _ = make_args(np.random.default_rng(0))
    args = [x, begin, end, np.array([1, 0])]
    vm = _tvm_vm(mod, kind, device, relax_vm.pipeline(kind))
    with pytest.raises(ValueError, match=r"dynamic_strided_slice.*strides\[1\] is 0"):
        vm["main"](*[tvm.runtime.tensor(a, device(0)) for a in args])
    with pytest.raises(ValueError, match=r"dynamic_strided_slice.*strides\[1\] is 0"):
        shapefn.VirtualMachine(shapefn.compile(mod, name), name)(*args)


def test_count_reads_of_a_phase_are_one_call():
    lowered = relax_vm.pipeline("llvm")(CASES["two_filters"][0])
    text = lowered.script(show_meta=False)
    assert text.count("shapefn.read_counts") == 1
    assert "vm.builtin.tensor_to_shape" not in text


@tvm_ffi.register_global_func("test.relax.first_rows", override=True)
def _first_rows(data, k, out):
    out.copyfrom(data.numpy()[: int(k.numpy()[0])])


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
def test_users_shape_function_and_kernel(target):
    """A shape function registered from Python (compiled to host code by
    TVM) and a kernel emitted with ``emit_extern`` run under TVM's VM as
    under shapefn's."""
    kind, device, name = target
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    mod = first_rows_module("test.relax.first_rows")
    vm = _tvm_vm(mod, kind, device, relax_vm.pipeline(kind))
    for rows in (2, 5, 0):
        args = [data, np.array([rows], np.int64)]
        (ours,), _ = _run_tvm(vm, device, args)
        (theirs,), _ = _run_shapefn(mod, name, args)
        np.testing.assert_array_equal(ours, 2 * data[:rows] + 1)
        np.testing.assert_array_equal(theirs, ours)


def test_shape_function_errors_reach_the_caller():
    vm = _tvm_vm(CASES["reshape_from_tensor"][0], "llvm", tvm.cpu, relax_vm.pipeline("llvm"))
    x = tvm.runtime.tensor(np.arange(24, dtype="float32"))
    with pytest.raises(ValueError, match="reshape"):
        vm["main"](x, tvm.runtime.tensor(np.array([5, 7])))


def test_bad_dependence_is_refused():
    with pytest.raises(ValueError, match="dependence must be"):
        relax_vm.pipeline("llvm", dependence="sometimes")


@opencl
def test_readme_example_runs(tmp_path):
    """The README's example (CPU and OpenCL), run as a reader would: from a
    file of its own (TVMScript reads its source)."""
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### Using shapefn with TVM's VM", 1)[1]
    script = tmp_path / "example.py"
    script.write_text(section.split("```python\n", 1)[1].split("```", 1)[0])
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]


@I.ir_module
class BranchOnSize:
    @R.function
    def main(x: R.Tensor(("n",), "float32")):
        size = R.shape_to_tensor(R.shape_of(x))
        long = R.greater(R.take(size, R.const(0, "int64"), axis=0), R.const(4, "int64"))
        if long:
            out = R.multiply(x, R.const(2.0, "float32"))
        else:
            out = R.add(x, R.const(1.0, "float32"))
        return out


@opencl
def test_a_condition_computed_from_a_shape_is_read_on_the_host():
    """An If whose condition comes from a shape: the host computes it and
    TVM's VM reads it there, with no copy and no wait; TVM's default
    computes it on the device and reads it back."""
    ours = _tvm_vm(BranchOnSize, "opencl", tvm.opencl, relax_vm.pipeline("opencl"))
    default = _tvm_vm(BranchOnSize, "opencl", tvm.opencl)
    for n in (3, 8):
        x = np.arange(n, dtype="float32")
        (got,), counted = _run_tvm(ours, tvm.opencl, [x])
        np.testing.assert_array_equal(got, x * 2 if n > 4 else x + 1)
        assert (counted["d2h_bytes"], counted["syncs"]) == (0, 0)
        (theirs,), counted = _run_tvm(default, tvm.opencl, [x])
        np.testing.assert_array_equal(theirs, got)
        assert (counted["d2h_bytes"], counted["syncs"]) == (1, 1)


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
def test_positive_entries_gathered_by_nonzero(target):
    """``take(x, nonzero(x > 0))``: TVM's ``RewriteDataflowReshape`` asked
    every kernel whether it reshapes and failed on shapefn's ``nonzero``
    (not written as blocks)."""
    tvm_target, device, _ = target
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            index = bb.emit(relax.op.nonzero(bb.emit(relax.op.greater(x, relax.const(0.0, "float32")))))
            out = bb.emit_output(relax.op.take(x, index, axis=0))
        bb.emit_func_output(out)
    vm = _tvm_vm(bb.get(), tvm_target, device, relax_vm.pipeline(tvm_target))
    values = np.array([1.5, -2, 3, 0, 5, np.nan, -np.inf, np.inf], np.float32)
    (got,), _ = _run_tvm(vm, device, [values])
    np.testing.assert_array_equal(got, values[None, values > 0])


@pytest.mark.parametrize("value", [np.zeros(0, np.int64), np.zeros((2, 0), np.int32), np.array([3, -1], np.int64)])
def test_host_constant_kernels_write_their_values_empty_ones_included(value):
    """The kernels that put constants on the host for host shape kernels
    (``host_shapes._constant_kernel``): an empty constant (what folding
    ``Slice(Shape(x), 0, 0)`` leaves, in Faster R-CNN) has no element to
    choose from."""
    from shapefn.compiler.relax_vm.host_shapes import _constant_kernel

    kernel = tvm.compile(tvm.IRModule({"main": _constant_kernel(value)}), target="llvm")
    out = tvm.runtime.tensor(np.full(value.shape, 7, value.dtype))
    kernel["main"](out)
    np.testing.assert_array_equal(out.numpy(), value)
