"""shapefn inside TVM's own VM: programs compiled by ``tvm.compile`` with
``shapefn.relax.pipeline`` run on an unmodified ``relax.VirtualMachine``, on
the CPU and on the OpenCL device, and give the results of TVM's default
pipeline (where it runs the program), of shapefn's VM and of numpy. On
OpenCL every copy and sync goes through shapefn's runtime whichever VM
makes it, so the three are compared copy for copy (``device_counters``)."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.script import ir as I
from tvm.script import relax as R

import shapefn
import shapefn.relax
from conftest import opencl

# (tvm target, TVM device, shapefn device)
CPU = ("llvm", tvm.cpu, "host")
OPENCL = pytest.param(("opencl", tvm.opencl, "opencl"), marks=opencl)
TARGETS = [CPU, OPENCL]


def _tvm_vm(mod: tvm.IRModule, target: str, device, pipeline="default"):
    return relax.VirtualMachine(tvm.compile(mod, target=target, relax_pipeline=pipeline), device(0))


def _numpy(result) -> list:
    items = result if isinstance(result, (list, tuple, tvm.ir.Array)) else [result]
    return [np.asarray(item.numpy()) for item in items]


def _run_tvm(vm, device, args):
    """Outputs and the device counters of one call (a warm-up call first)."""
    tensors = [tvm.runtime.tensor(a, device(0)) for a in args]
    vm["main"](*tensors)
    if device is tvm.opencl:
        shapefn.reset_device_counters("opencl")
    result = vm["main"](*tensors)
    counters = shapefn.device_counters("opencl") if device is tvm.opencl else None
    return _numpy(result), counters


def _run_shapefn(mod: tvm.IRModule, name: str, args):
    vm = shapefn.VirtualMachine(shapefn.compile(mod, name), name)
    vm(*args)
    if name == "opencl":
        shapefn.reset_device_counters("opencl")
    result = vm(*args)
    counters = shapefn.device_counters("opencl") if name == "opencl" else None
    return _numpy(result), counters


@I.ir_module
class Slice:
    @R.function
    def main(x: R.Tensor(("n", 8), "float32"), begin: R.Tensor((2,), "int64"), end: R.Tensor((2,), "int64"),
             strides: R.Tensor((2,), "int64")):
        return R.dynamic_strided_slice(x, begin, end, strides)


@I.ir_module
class NonZero:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")):
        return R.nonzero(R.greater(x, R.const(0.0, "float32")))


@I.ir_module
class Unique:
    @R.function
    def main(x: R.Tensor(("n",), "float32")):
        return R.unique(x, sorted=True)


@I.ir_module
class TwoFilters:
    """Two independent count-sized ops: their counts cross in one sync."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")):
        above = R.nonzero(R.greater(x, R.const(0.5, "float32")))
        below = R.nonzero(R.less(x, R.const(-0.5, "float32")))
        return above, below


@I.ir_module
class ReshapeFromTensor:
    @R.function
    def main(x: R.Tensor(("n",), "float32"), shape: R.Tensor((2,), "int64")):
        return R.reshape(x, R.tensor_to_shape(shape))


def _slice_args(rng):
    return [rng.standard_normal((10, 8)).astype("float32"), np.array([1, 0]), np.array([9, 8]), np.array([3, 2])]


CASES = {
    "strided_slice": (Slice, _slice_args, lambda x, b, e, s: [x[1:9:3, 0:8:2]]),
    "nonzero": (NonZero, lambda rng: [rng.standard_normal((64, 48)).astype("float32")],
                lambda x: [np.stack(np.nonzero(x > 0))]),
    "unique": (Unique, lambda rng: [rng.integers(0, 40, 500).astype("float32")], lambda x: [np.unique(x)]),
    "two_filters": (TwoFilters, lambda rng: [rng.standard_normal((64, 48)).astype("float32")],
                    lambda x: [np.stack(np.nonzero(x > 0.5)), np.stack(np.nonzero(x < -0.5))]),
    "reshape_from_tensor": (ReshapeFromTensor, lambda rng: [np.arange(24, dtype="float32"), np.array([4, 6])],
                            lambda x, s: [x.reshape(4, 6)]),
}


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
@pytest.mark.parametrize("case", CASES)
def test_results_match_numpy_tvm_and_shapefn_vm(case, target):
    mod, make_args, reference = CASES[case]
    kind, device, name = target
    args = make_args(np.random.default_rng(0))
    expected = reference(*args)
    ours, _ = _run_tvm(_tvm_vm(mod, kind, device, shapefn.relax.pipeline(kind)), device, args)
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
def test_pipeline_copies_what_shapefn_vm_copies(case):
    mod, make_args, _ = CASES[case]
    args = make_args(np.random.default_rng(0))
    _, ours = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl, shapefn.relax.pipeline("opencl")), tvm.opencl, args)
    _, vm = _run_shapefn(mod, "opencl", args)
    assert (ours["d2h_bytes"], ours["syncs"]) == (vm["d2h_bytes"], vm["syncs"])


@opencl
@pytest.mark.parametrize("case, ours, tvm_default", [
    # The mask of nonzero's shape function reads nothing: only the count
    # (8 bytes) crosses. TVM's default copies the whole bool input
    # (64 x 48 bytes) to the host and runs numpy there.
    ("nonzero", {"d2h_bytes": 8, "syncs": 1}, {"d2h_bytes": 64 * 48, "syncs": 1}),
    ("unique", {"d2h_bytes": 8, "syncs": 1}, {"d2h_bytes": 500 * 4, "syncs": 1}),
    # Two counts, one sync; TVM's default syncs for each whole copy.
    ("two_filters", {"d2h_bytes": 16, "syncs": 1}, {"d2h_bytes": 2 * 64 * 48, "syncs": 2}),
    # The target shape itself (2 x int64), in both.
    ("reshape_from_tensor", {"d2h_bytes": 16, "syncs": 1}, {"d2h_bytes": 16, "syncs": 1}),
])
def test_exact_copies_against_tvm_default(case, ours, tvm_default):
    mod, make_args, _ = CASES[case]
    args = make_args(np.random.default_rng(0))
    _, got = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl, shapefn.relax.pipeline("opencl")), tvm.opencl, args)
    _, default = _run_tvm(_tvm_vm(mod, "opencl", tvm.opencl), tvm.opencl, args)
    assert {k: got[k] for k in ours} == ours
    assert {k: default[k] for k in tvm_default} == tvm_default


@opencl
def test_slice_parameters_are_read_and_nothing_else():
    """A slice whose begin/end/strides arrive on the device: the shape
    function reads those three (3 x 2 x 8 bytes) in one sync, never the
    data; per-op dependence copies the data too."""
    args = _slice_args(np.random.default_rng(0))
    _, per_input = _run_tvm(_tvm_vm(Slice, "opencl", tvm.opencl, shapefn.relax.pipeline("opencl")), tvm.opencl, args)
    _, per_op = _run_tvm(_tvm_vm(Slice, "opencl", tvm.opencl, shapefn.relax.pipeline("opencl", "per-op")),
                         tvm.opencl, args)
    assert (per_input["d2h_bytes"], per_input["syncs"]) == (48, 1)
    assert (per_op["d2h_bytes"], per_op["syncs"]) == (48 + 10 * 8 * 4, 1)


def test_count_reads_of_a_phase_are_one_call():
    lowered = shapefn.relax.pipeline("llvm")(TwoFilters)
    text = lowered.script(show_meta=False)
    assert text.count("shapefn.read_counts") == 1
    assert "vm.builtin.tensor_to_shape" not in text


@tvm_ffi.register_global_func("test.relax.first_rows", override=True)
def _first_rows(data, k, out):
    out.copyfrom(data.numpy()[: int(k.numpy()[0])])


def _user_op_module():
    shapefn.register_shape_func("test.relax.first_rows", [False, True], override=True,
                                shape_func=lambda data, k: [k[0], data.shape[1]])
    n = tirx.Var("n", "int64")
    data = relax.Var("data", relax.TensorType([n, 3], "float32"))
    k = relax.Var("k", relax.TensorType([1], "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [data, k]):
        doubled = bb.emit(relax.op.multiply(data, relax.const(2.0, "float32")))
        rows = shapefn.emit_extern(bb, "test.relax.first_rows", [doubled, k], out_ndim=2, out_dtype="float32")
        bb.emit_func_output(bb.emit(relax.op.add(rows, relax.const(1.0, "float32"))))
    return bb.get()


@pytest.mark.parametrize("target", TARGETS, ids=["cpu", "opencl"])
def test_users_shape_function_and_kernel(target):
    """A shape function registered from Python (compiled to host code by
    TVM) and a kernel emitted with ``emit_extern`` run under TVM's VM as
    under shapefn's."""
    kind, device, name = target
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    mod = _user_op_module()
    vm = _tvm_vm(mod, kind, device, shapefn.relax.pipeline(kind))
    for rows in (2, 5, 0):
        args = [data, np.array([rows], np.int64)]
        (ours,), _ = _run_tvm(vm, device, args)
        (theirs,), _ = _run_shapefn(mod, name, args)
        np.testing.assert_array_equal(ours, 2 * data[:rows] + 1)
        np.testing.assert_array_equal(theirs, ours)


def test_shape_function_errors_reach_the_caller():
    vm = _tvm_vm(ReshapeFromTensor, "llvm", tvm.cpu, shapefn.relax.pipeline("llvm"))
    x = tvm.runtime.tensor(np.arange(24, dtype="float32"))
    with pytest.raises(ValueError, match="reshape"):
        vm["main"](x, tvm.runtime.tensor(np.array([5, 7])))


def test_bad_dependence_is_refused():
    with pytest.raises(ValueError, match="dependence must be"):
        shapefn.relax.pipeline("llvm", dependence="sometimes")
