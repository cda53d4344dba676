"""shapefn.compile on Relax modules, against TVM's own Relax VM on CPU, each
program run on a strict sim and on a real OpenCL device with the same
counters."""
import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R
from tvm.script import tirx as T

import shapefn
from conftest import DEVICES, opencl, run_on_devices


@pytest.fixture
def on(device):
    """The VM's device for ``device``: a strict sim (host reads of device
    memory fault there), else the device itself."""
    return shapefn.sim(strict=True) if device == "sim" else device


def relax_reference(mod):
    """TVM's Relax VM on CPU, as a callable on numpy arrays."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())

    def run(*args):
        out = vm["main"](*[tvm.runtime.tensor(a) for a in args])
        return _numpy(out)

    return run


def _numpy(value):
    if isinstance(value, (tuple, list)) or type(value).__name__ == "Array":
        return tuple(_numpy(v) for v in value)
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(value)


def assert_same(got, want):
    got, want = _numpy(got), _numpy(want)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def mlp(batch):
    """The 1024-512-256-128 dense + bias MLP; ``batch`` an int or a symbolic var."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([batch, 1024], "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for a, b in [(1024, 512), (512, 256), (256, 128)]:
                w = relax.const((rng.standard_normal((a, b)) * 0.03).astype("float32"))
                bias = relax.const(rng.standard_normal(b).astype("float32"))
                h = bb.emit(relax.op.add(relax.op.matmul(h, w), bias))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_mlp_matches_static_and_relax(device, on):
    dynamic = mlp(tvm.tirx.Var("n", "int64"))
    vm = shapefn.VirtualMachine(shapefn.compile(dynamic, device), on)
    reference = relax_reference(dynamic)
    counts = {}
    for n in (1, 7, 64):
        x = np.random.default_rng(n).standard_normal((n, 1024)).astype("float32")
        static = mlp(n)
        static_vm = shapefn.VirtualMachine(shapefn.compile(static, device), on)
        vm.reset_counters()
        got = vm(x)
        assert_same(got, reference(x))
        assert_same(static_vm(x), got)
        counts[n] = (vm.counters["instructions"], static_vm.counters["instructions"])
    for dyn, stat in counts.values():
        assert dyn <= 1.2 * stat, counts


@tvm.script.ir_module
class SliceFromShapeArithmetic:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")):
        s = R.shape_to_tensor(R.shape_of(x))
        half = R.floor_divide(s, R.const(2, "int64"))
        ones = R.ones(R.shape([2]), "int64")
        return R.dynamic_strided_slice(x, half, s, ones)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 1)])
def test_slice_bounds_from_shape_arithmetic_never_leave_the_host(device, on, shape):
    vm = shapefn.VirtualMachine(shapefn.compile(SliceFromShapeArithmetic, device), on)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    assert_same(vm(x), relax_reference(SliceFromShapeArithmetic)(x))
    assert vm.counters["d2h_bytes"] == 0 and vm.counters["syncs"] == 0


@tvm.script.ir_module
class SliceFromDeviceBounds:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), offset: R.Tensor((2,), "int64")):
        begin = R.add(offset, R.const(1, "int64"))  # computed on the device
        end = R.shape_to_tensor(R.shape_of(x))
        strides = R.ones(R.shape([2]), "int64")
        return R.dynamic_strided_slice(x, begin, end, strides)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", [[0, 1], [2, -3], [-9, 7]])
def test_slice_bounds_from_the_device_copy_only_the_bounds(device, on, offset):
    exe = shapefn.compile(SliceFromDeviceBounds, device)
    x = np.random.default_rng(1).standard_normal((5, 6)).astype("float32")
    off = np.array(offset, np.int64)
    want = relax_reference(SliceFromDeviceBounds)(x, off)
    per_input = shapefn.VirtualMachine(exe, on)
    assert_same(per_input(x, off), want)
    assert per_input.counters["d2h_bytes"] == off.nbytes  # begin: 2 x int64
    assert per_input.counters["syncs"] == 1
    per_op = shapefn.VirtualMachine(exe, on, dependence="per-op")
    assert_same(per_op(x, off), want)
    assert per_op.counters["d2h_bytes"] == x.nbytes + off.nbytes  # the sliced tensor, whole
    assert shapefn.VirtualMachine(shapefn.compile(SliceFromDeviceBounds, device, dependence="per-op"),
                                  on).dependence == "per-op"


@tvm.script.ir_module
class ControlFlow:
    @R.function
    def helper(x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")):
        return R.multiply(x, y)

    @R.function
    def main(x: R.Tensor(("n",), "float32"), flag: R.Tensor((), "bool")):
        cls = ControlFlow
        if flag:
            r = R.nn.relu(x)
        else:
            r = cls.helper(x, x)
        return (r, R.shape_of(x), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flag", [True, False])
def test_if_tuples_and_calls(device, on, flag):
    vm = shapefn.VirtualMachine(shapefn.compile(ControlFlow, device), on)
    x = np.array([-1.5, 2.0, 3.0], np.float32)
    cond = np.array(flag)
    r, shape, same = vm(x, cond)
    np.testing.assert_array_equal(r.numpy(), np.maximum(x, 0) if flag else x * x)
    assert shape == x.shape
    np.testing.assert_array_equal(same.numpy(), x)
    assert vm.counters["d2h_bytes"] == 1  # the condition, to decide the branch


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_executable_saves_and_loads(device, on, tmp_path):
    exe = shapefn.compile(SliceFromDeviceBounds, device)
    exe.save(tmp_path / "slice.sfx")
    loaded = shapefn.Executable.load(tmp_path / "slice.sfx")
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    off = np.array([1, 2], np.int64)
    got = shapefn.VirtualMachine(loaded, on)(x, off)
    assert_same(got, shapefn.VirtualMachine(exe, on)(x, off))
    assert_same(got, relax_reference(SliceFromDeviceBounds)(x, off))


@pytest.mark.parametrize("device", DEVICES)
def test_constants_are_uploaded_once(device, on):
    vm = shapefn.VirtualMachine(shapefn.compile(mlp(2), device), on)
    weights = (1024 * 512 + 512 + 512 * 256 + 256 + 256 * 128 + 128) * 4
    assert vm.constant_counters["h2d_bytes"] == weights
    x = np.ones((2, 1024), np.float32)
    vm(x)
    vm(x)
    assert vm.counters["h2d_bytes"] == 2 * x.nbytes


def test_host_device_runs_without_transfers():
    vm = shapefn.VirtualMachine(shapefn.compile(SliceFromDeviceBounds, "host"), "host")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    off = np.array([0, 1], np.int64)
    assert_same(vm(x, off), relax_reference(SliceFromDeviceBounds)(x, off))
    c = vm.counters
    assert c["d2h_bytes"] == c["h2d_bytes"] == c["syncs"] == 0


def test_compile_rejects_bad_arguments():
    with pytest.raises(TypeError, match="IRModule"):
        shapefn.compile("not a module")
    with pytest.raises(ValueError, match="dependence"):
        shapefn.compile(SliceFromDeviceBounds, dependence="sometimes")


@pytest.mark.parametrize("device", DEVICES)
def test_user_extern_op_gets_only_the_values_its_mask_names(first_rows_op, device, on):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([tvm.tirx.Var("n", "int64"), 8], "float32"))
    k = relax.Var("k", relax.TensorType([1], "int64"))
    with bb.function("main", [x, k]):
        bb.emit_func_output(shapefn.emit_extern(bb, "test.first_rows", [x, k], out_ndim=2, out_dtype="float32"))
    vm = shapefn.VirtualMachine(shapefn.compile(bb.get(), device), on)
    data = np.random.default_rng(0).standard_normal((10, 8)).astype(np.float32)
    for count in (3, 0, 10):
        vm.reset_counters()
        np.testing.assert_array_equal(vm(data, np.array([count], np.int64)).numpy(), data[:count] * 2)
        # k's 8 bytes cross; the data tensor never does.
        assert vm.counters["d2h_bytes"] == 8 and vm.counters["d2h_copies"] == 1


@tvm.script.ir_module
class HandWrittenExtern:
    @R.function
    def main(x: R.Tensor(("n", 8), "float32"), k: R.Tensor((1,), "int64")):
        rows = T.int64()
        cols = T.int64()
        shape = R.call_pure_packed("shapefn.shape_func", R.str("test.first_rows"), R.shape([]), x, k,
                                   ty_args=R.Shape(ndim=2))
        _ = R.match_cast(shape, R.Shape([rows, cols]))
        return R.call_dps_packed("test.first_rows", (x, k), out_ty=R.Tensor((rows, cols), "float32"))


@pytest.mark.parametrize("device", DEVICES)
def test_extern_op_written_in_tvmscript(first_rows_op, device, on):
    vm = shapefn.VirtualMachine(shapefn.compile(HandWrittenExtern, device), on)
    data = np.arange(24, dtype=np.float32).reshape(3, 8)
    np.testing.assert_array_equal(vm(data, np.array([2], np.int64)).numpy(), data[:2] * 2)
    assert vm.counters["d2h_bytes"] == 8


def matmul_chain(depth):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([tvm.tirx.Var("n", "int64"), 256], "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        h = x
        for _ in range(depth):
            h = bb.emit(relax.op.matmul(h, relax.const((rng.standard_normal((256, 256)) * 0.06).astype("float32"))))
        bb.emit_func_output(h)
    return bb.get()


@pytest.mark.parametrize("device", DEVICES)
def test_intermediate_buffers_are_reused(device, on):
    depth = 8
    mod = matmul_chain(depth)
    vm = shapefn.VirtualMachine(shapefn.compile(mod, device), on)
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    before = vm.pool_high_water_bytes()
    for _ in range(3):
        got = vm(x)
    assert_same(got, relax_reference(mod)(x))
    # Each buffer is freed after its last use and its block reused: at most
    # the input copy, two live intermediates and the output at any time.
    assert vm.pool_high_water_bytes() - before <= 4 * x.nbytes < depth * x.nbytes


@pytest.mark.parametrize("device", DEVICES)
def test_arguments_may_be_tvm_tensors_and_results_export_through_dlpack(device, on):
    vm = shapefn.VirtualMachine(shapefn.compile(SliceFromDeviceBounds, device), on)
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    off = np.array([1, 2], np.int64)
    got = vm(tvm.runtime.tensor(x), tvm.runtime.tensor(off))
    want = relax_reference(SliceFromDeviceBounds)(x, off)
    np.testing.assert_array_equal(np.from_dlpack(got), want)
    np.testing.assert_array_equal(np.asarray(got), want)


def _rng_inputs(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


MAIN_PROGRAMS = {  # name: (module, argument lists)
    "dynamic_mlp": (mlp(tvm.tirx.Var("n", "int64")), [_rng_inputs(1, (1, 1024)), _rng_inputs(2, (64, 1024))]),
    "slice_from_shape_arithmetic": (SliceFromShapeArithmetic, [_rng_inputs(3, (4, 6)), _rng_inputs(4, (1, 1))]),
    "slice_from_device_bounds": (SliceFromDeviceBounds, [
        [*_rng_inputs(5, (5, 6)), np.array(offset, np.int64)] for offset in ([0, 1], [2, -3], [-9, 7])]),
    "matmul_chain": (matmul_chain(3), [_rng_inputs(6, (5, 256)), _rng_inputs(7, (0, 256))]),
}


@opencl
@pytest.mark.parametrize("name", MAIN_PROGRAMS)
def test_main_programs_count_the_same_on_sim_and_opencl(name):
    mod, calls = MAIN_PROGRAMS[name]
    results = run_on_devices(mod, calls)  # asserts the counters equal
    reference = relax_reference(mod)
    for runs in results.values():
        for args, (got, _) in zip(calls, runs, strict=True):
            assert_same(got, reference(*args))


def test_compile_pauses_the_garbage_collector_and_restores_it():
    import gc

    from shapefn.compiler.compile import gc_paused

    seen = []
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with pytest.raises(ZeroDivisionError), gc_paused():
                seen.append(gc.isenabled())
                1 / 0  # noqa: B018 - an error inside must restore the state too
            assert gc.isenabled() == enabled
        finally:
            gc.enable()
    assert seen == [False, False]
