"""The VM on hand-built programs: results against numpy, exact counters of
what crossed the host/device boundary (the same on a strict sim and on a
real OpenCL device), and clear errors on bad input."""
import functools
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import shapefn
from conftest import DEVICES, device_independent, device_target, opencl
from shapefn import Label, Param, ProgramBuilder
from shapefn.bench import roi_slicing
from shapefn.compiler import hand_built as kernels

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


@pytest.fixture
def on(device):
    """The VM's device for ``device``: a strict sim (host reads of device
    memory fault there), else the device itself."""
    return shapefn.sim(strict=True) if device == "sim" else device


@pytest.fixture(scope="module")
def slice_scalar_kernels():
    """``slice_scalar_kernels(device)``: strided_slice_scalar(4) built for
    ``device``, once per device."""
    return functools.cache(lambda device: kernels.build({"strided_slice_scalar": kernels.strided_slice_scalar(4)},
                                                        device_target(device)))


def roi_program(num_rois, params, device):
    """roi_slicing's program, its kernels built for ``device``."""
    return roi_slicing.build(num_rois, params, device_target(device).kind.name)


def slice_scalar_program():
    """``main(x: f32[n, c, h, w])`` = ``x[n//2:, c//2:, h//2:, w//2:]``, the
    bounds computed in shape registers and passed to the kernel as scalars."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n", "c", "h", "w"])])
    (x,) = fb.args
    shape = fb.shape_of(x)
    two, one = fb.load_int(2), fb.load_int(1)
    begin = fb.shape_make([fb.floordiv(fb.shape_get(shape, a), two) for a in range(4)])
    strides = fb.shape_make([one] * 4)
    (out_shape,) = fb.shape_func("dyn.strided_slice", [x, begin, shape, strides])
    out = fb.alloc_tensor("device", out_shape, "float32")
    # The bounds stay in shape registers; the kernel takes them as scalars.
    fb.invoke_kernel(pb.kernel("strided_slice_scalar"), [x, out, begin, strides])
    fb.ret(out)
    return pb


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_slice_bounds_from_shape_arithmetic_copy_nothing(slice_scalar_kernels, device, on):
    vm = shapefn.VirtualMachine(slice_scalar_program().build(library=slice_scalar_kernels(device)), on)
    for shape in [(2, 3, 8, 9), (1, 1, 1, 1), (3, 2, 5, 4)]:
        data = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        vm.reset_counters()
        got = vm(data).numpy()
        n, c, h, w = shape
        np.testing.assert_array_equal(got, data[n // 2:, c // 2:, h // 2:, w // 2:])
        counters = vm.counters
        assert counters["d2h_bytes"] == 0 and counters["d2h_copies"] == 0 and counters["syncs"] == 0
        assert counters["h2d_bytes"] == data.nbytes  # the input upload only
        assert counters["shape_func_calls"] == 1 and counters["kernel_calls"] == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_rois", [1, 7])
def test_roi_slicing_device_bounds_copy_only_the_bounds(num_rois, device, on):
    fmap, rois = roi_slicing.make_inputs(num_rois, (3, 8, 20, 24), seed=num_rois)
    exe = roi_program(num_rois, "device", device)
    vm = shapefn.VirtualMachine(exe, on)
    got = vm(fmap, rois)
    for g, ref in zip(got, roi_slicing.reference(fmap, rois), strict=True):
        np.testing.assert_array_equal(g.numpy(), ref)
    c = vm.counters
    # Per slice: begin, end, strides (4 int64 each) cross, in one sync.
    assert c["d2h_copies"] == 3 * num_rois
    assert c["d2h_bytes"] == 3 * 4 * 8 * num_rois
    assert c["syncs"] == num_rois
    assert c["h2d_bytes"] == fmap.nbytes + rois.nbytes
    assert c["shape_func_calls"] == num_rois and c["kernel_calls"] == 2 * num_rois


@pytest.mark.parametrize("device", DEVICES)
def test_roi_slicing_host_bounds_copy_nothing_back(device, on):
    fmap, rois = roi_slicing.make_inputs(5, (2, 4, 16, 16), seed=3)
    vm = shapefn.VirtualMachine(roi_program(5, "host", device), on)
    got = vm(fmap, rois)
    for g, ref in zip(got, roi_slicing.reference(fmap, rois), strict=True):
        np.testing.assert_array_equal(g.numpy(), ref)
    c = vm.counters
    assert c["d2h_bytes"] == 0 and c["d2h_copies"] == 0 and c["syncs"] == 0
    assert c["h2d_bytes"] == fmap.nbytes  # rois stay on the host


@pytest.mark.parametrize("device", DEVICES)
def test_per_op_mode_copies_the_whole_sliced_tensor(device, on):
    fmap, rois = roi_slicing.make_inputs(4, (2, 4, 16, 16), seed=4)
    exe = roi_program(4, "device", device)
    per_op = shapefn.VirtualMachine(exe, on, dependence="per-op")
    per_input = shapefn.VirtualMachine(exe, on, dependence="per-input")
    a, b = per_op(fmap, rois), per_input(fmap, rois)
    for x, y, want in zip(a, b, roi_slicing.reference(fmap, rois), strict=True):
        np.testing.assert_array_equal(x.numpy(), want)
        np.testing.assert_array_equal(y.numpy(), want)
    assert per_op.counters["d2h_bytes"] == 4 * (fmap.nbytes + 3 * 32)
    assert per_op.counters["d2h_copies"] == 4 * 4
    assert per_input.counters["d2h_bytes"] == 4 * 3 * 32


def nonzero_program(batched_counts: bool = False):
    """``main(x: float32[n])`` -> indices of non-zeros (int64 [1, count]),
    with the count-sized convention: upper-bound buffer, count read back."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    (upper,) = fb.shape_func("relax.nonzero", [x])
    out = fb.alloc_tensor("device", upper, "int64")
    count = fb.alloc_tensor("device", fb.shape([]), "int64")
    fb.invoke_kernel(pb.kernel("nonzero_1d"), [x, out, count])
    if batched_counts:
        # Two counts waiting on the same device work: one readback, one sync.
        out2 = fb.alloc_tensor("device", upper, "int64")
        count2 = fb.alloc_tensor("device", fb.shape([]), "int64")
        fb.invoke_kernel(pb.kernel("nonzero_1d"), [x, out2, count2])
        n1, n2 = fb.reg(), fb.reg()
        fb.readback([n1, n2], [count, count2])
        exact = fb.view(out, fb.shape([1, n1]))
        exact2 = fb.view(out2, fb.shape([1, n2]))
        fb.ret(fb.make_tuple([exact, exact2]))
    else:
        n = fb.reg()
        fb.readback([n], [count])
        fb.ret(fb.view(out, fb.shape([1, n])))
    return pb


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("values", [[0, 1.5, 0, 2, 3, 0], [0, 0, 0], [4.0], []])
def test_nonzero_reads_back_only_the_count(kernel_libs, device, on, values):
    vm = shapefn.VirtualMachine(nonzero_program().build(library=kernel_libs(device)), on)
    x = np.array(values, np.float32)
    got = vm(x).numpy()
    np.testing.assert_array_equal(got, np.stack(np.nonzero(x)))
    c = vm.counters
    assert c["d2h_bytes"] == 8 and c["d2h_copies"] == 1 and c["syncs"] == 1


@pytest.mark.parametrize("device", DEVICES)
def test_readbacks_waiting_on_the_same_work_share_one_sync(kernel_libs, device, on):
    vm = shapefn.VirtualMachine(nonzero_program(batched_counts=True).build(library=kernel_libs(device)), on)
    x = np.array([1, 0, 2, 0, 0, 3], np.float32)
    a, b = vm(x)
    np.testing.assert_array_equal(a.numpy(), np.stack(np.nonzero(x)))
    np.testing.assert_array_equal(b.numpy(), np.stack(np.nonzero(x)))
    assert vm.counters["syncs"] == 1 and vm.counters["d2h_bytes"] == 16


@pytest.mark.parametrize("device", DEVICES)
def test_python_te_shape_function_gets_only_what_its_mask_says(on, tmp_path):
    shapefn.set_cache_dir(tmp_path)
    try:
        @shapefn.register_shape_func("test.vm.take_first", [False, True], level=10, override=True)
        def take_first(data, k):
            return [k[0], data.shape[1]]

        pb = ProgramBuilder()
        fb = pb.function("main", [Param("data", "float32", ["n", "m"]), Param("k", "int64", [1])])
        data, k = fb.args
        (shape,) = fb.shape_func("test.vm.take_first", [data, k])
        fb.ret(shape)
        vm = shapefn.VirtualMachine(pb.build(), on)
        big = np.zeros((1000, 3), np.float32)
        for kk in (2, 7):
            vm.reset_counters()
            assert vm(big, np.array([kk], np.int64)) == (kk, 3)
            # Only k's 8 bytes cross; the 12 kB data tensor never does.
            assert vm.counters["d2h_bytes"] == 8
            assert vm.counters["shape_func_calls"] == 1
    finally:
        shapefn.set_cache_dir(None)


@pytest.mark.parametrize("device", DEVICES)
def test_control_flow_calls_and_tuples(on):
    """sum(0..n-1) by a loop of if/goto, in a callee; returned in a tuple."""
    pb = ProgramBuilder()
    main = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = main.args
    n = main.shape_get(main.shape_of(x), 0)
    summed = main.reg()
    main.emit("call", summed, "loop_sum", [x])
    main.ret(main.make_tuple([summed, n]))

    fn = pb.function("loop_sum", [Param("x", "float32", ["n"])])
    (xx,) = fn.args
    count = fn.shape_get(fn.shape_of(xx), 0)
    i, acc, one = fn.load_int(0), fn.load_int(0), fn.load_int(1)
    top, done = Label(), Label()
    fn.place(top)
    fn.emit("if", fn.lt(i, count), done)
    fn.emit("add", acc, acc, i)
    fn.emit("add", i, i, one)
    fn.goto(top)
    fn.place(done)
    fn.ret(acc)
    vm = shapefn.VirtualMachine(pb.build(), on)
    for n_ in (0, 1, 10):
        assert vm(np.zeros(n_, np.float32)) == (sum(range(n_)), n_)


def hand_built(program, device, kernel_libs, slice_scalar_kernels):
    """One of this file's programs for ``device`` and argument lists for it."""
    rng = np.random.default_rng(0)
    if program.startswith("roi"):
        num_rois, params = 3, program.removeprefix("roi_")
        return (roi_program(num_rois, params, device),
                [roi_slicing.make_inputs(num_rois, (2, 4, 16, 16), seed=s) for s in (1, 2)])
    library = kernel_libs(device)
    if program == "slice_scalar":
        return (slice_scalar_program().build(library=slice_scalar_kernels(device)),
                [[rng.standard_normal(shape).astype(np.float32)] for shape in [(2, 3, 8, 9), (1, 1, 1, 1)]])
    if program.startswith("nonzero"):
        return (nonzero_program(program == "nonzero_batched").build(library=library),
                [[np.array(v, np.float32)] for v in ([0, 1.5, 0, 2], [])])
    x = np.arange(5, dtype=np.float32)
    return scale_program().build(library=library), [[x, x]]


@opencl
@pytest.mark.parametrize("program", ["slice_scalar", "roi_device", "roi_host", "nonzero", "nonzero_batched", "scale"])
def test_hand_built_programs_count_the_same_on_sim_and_opencl(kernel_libs, slice_scalar_kernels, program):
    runs = {}
    for device in ("sim", "opencl"):
        exe, calls = hand_built(program, device, kernel_libs, slice_scalar_kernels)
        vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
        runs[device] = []
        for args in calls:
            vm.reset_counters()
            out = vm(*args)
            runs[device].append(([o.numpy() for o in (out if isinstance(out, tuple) else (out,))], vm.counters))
    for i, ((sim_out, sim_counters), (opencl_out, opencl_counters)) in enumerate(
            zip(runs["sim"], runs["opencl"], strict=True)):
        assert device_independent(opencl_counters) == device_independent(sim_counters), f"call {i}"
        for a, b in zip(sim_out, opencl_out, strict=True):
            np.testing.assert_array_equal(b, a)


def test_shape_arithmetic_matches_python():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["a", "b"])])
    (x,) = fb.args
    s = fb.shape_of(x)
    a, b = fb.shape_get(s, 0), fb.shape_get(s, 1)
    neg = fb.sub(fb.load_int(0), a)
    ops = ["add", "sub", "mul", "floordiv", "floormod", "min", "max", "lt", "eq"]
    results = [fb.emit(op, neg, b) for op in ops]
    fb.ret(fb.shape_make(results))
    vm = shapefn.VirtualMachine(pb.build(), "host")
    py = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q,
          "floordiv": lambda p, q: p // q, "floormod": lambda p, q: p % q, "min": min, "max": max,
          "lt": lambda p, q: int(p < q), "eq": lambda p, q: int(p == q)}
    for a_, b_ in [(7, 3), (6, 4), (1, 7), (5, 5)]:
        got = vm(np.zeros((a_, b_), np.float32))
        assert got == tuple(py[op](-a_, b_) for op in ops)


@pytest.mark.parametrize("device", DEVICES)
def test_floordiv_by_zero_and_overflow_raise(on):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    n = fb.shape_get(fb.shape_of(x), 0)
    fb.ret(fb.floordiv(fb.load_int(10), n))
    vm = shapefn.VirtualMachine(pb.build(), on)
    assert vm(np.zeros(3, np.float32)) == 3
    with pytest.raises(ValueError, match="floordiv by zero"):
        vm(np.zeros(0, np.float32))

    pb = ProgramBuilder()
    fb = pb.function("main", [])
    fb.ret(fb.mul(fb.load_int(1 << 62), fb.load_int(4)))
    with pytest.raises(ValueError, match="overflows int64"):
        shapefn.VirtualMachine(pb.build(), on)()


def scale_program():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"]), Param("y", "float32", ["n"])])
    x, y = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(2), out])
    fb.ret(out)
    return pb


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise_clear_errors(kernel_libs, device, on):
    vm = shapefn.VirtualMachine(scale_program().build(library=kernel_libs(device)), on)
    ok = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="takes 2 arguments, got 1"):
        vm(ok)
    with pytest.raises(TypeError, match="must have dtype float32, got int32"):
        vm(ok, np.ones(3, np.int32))
    with pytest.raises(ValueError, match="must have rank 1, got rank 2"):
        vm(ok, np.ones((3, 1), np.float32))
    with pytest.raises(ValueError, match="'n' is 3"):
        vm(ok, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="numpy array"):
        vm(ok, "not a tensor")
    with pytest.raises(KeyError, match="nope"):
        vm["nope"]


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_failure_reaches_the_user_and_vm_stays_usable(kernel_libs, device, on):
    # The scale kernel takes a float scalar; an int register is passed, which
    # TVM's argument check rejects at run time.
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "int64")  # wrong dtype for the kernel
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(2), out])
    fb.ret(out)
    bad = shapefn.VirtualMachine(pb.build(library=kernel_libs(device)), on)
    with pytest.raises(TypeError, match="kernel 'scale' failed: TypeError: Mismatched out.dtype"):
        bad(np.ones(3, np.float32))
    good = shapefn.VirtualMachine(scale_program().build(library=kernel_libs(device)), on)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(good(x, x).numpy(), 2 * x)
    with pytest.raises(TypeError):
        bad(np.ones(3, np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_unknown_kernel_is_named_when_the_vm_is_created(on):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", [2])])
    fb.invoke_kernel(pb.kernel("missing.kernel"), [fb.args[0]])
    fb.ret(fb.args[0])
    with pytest.raises(KeyError, match="missing.kernel"):
        shapefn.VirtualMachine(pb.build(), on)


@pytest.mark.parametrize("device", DEVICES)
def test_negative_shape_from_program_raises(on):
    pb = ProgramBuilder()
    fb = pb.function("main", [])
    fb.ret(fb.alloc_tensor("device", fb.shape([2, -3]), "float32"))
    with pytest.raises(ValueError, match="negative dimension"):
        shapefn.VirtualMachine(pb.build(), on)()


@pytest.mark.parametrize("device", DEVICES)
def test_constants_upload_once_at_creation(on):
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    pb = ProgramBuilder()
    fb = pb.function("main", [])
    fb.ret(fb.load_const(pb.constant(table)))
    vm = shapefn.VirtualMachine(pb.build(), on)
    assert vm.constant_counters["h2d_bytes"] == table.nbytes
    for _ in range(3):
        np.testing.assert_array_equal(vm().numpy(), table)
    assert vm.counters["h2d_bytes"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_stay_on_the_device_and_feed_later_calls(kernel_libs, device, on):
    vm = shapefn.VirtualMachine(scale_program().build(library=kernel_libs(device)), on)
    x = np.arange(5, dtype=np.float32)
    y = vm(x, x)
    assert y.device == {"sim": "sim", "opencl": "opencl:0"}[device] and y.shape == (5,) and y.dtype == "float32"
    vm.reset_counters()
    z = vm(y, y)  # already on the device: no upload
    assert vm.counters["h2d_bytes"] == 0
    np.testing.assert_array_equal(np.asarray(z), 4 * x)
    np.testing.assert_array_equal(np.from_dlpack(z), 4 * x)


@pytest.mark.parametrize("device", DEVICES)
def test_recursion_depth_is_bounded(on):
    pb = ProgramBuilder()
    fb = pb.function("main", [])
    r = fb.reg()
    fb.emit("call", r, "main", [])
    fb.ret(r)
    with pytest.raises(RuntimeError, match="call depth"):
        shapefn.VirtualMachine(pb.build(), on)()


def endless_loop_program():
    pb = ProgramBuilder()
    fb = pb.function("main", [])
    top = Label()
    fb.place(top)
    fb.goto(top)
    return pb.build()


@pytest.mark.parametrize("device", DEVICES)
def test_instruction_budget_stops_a_runaway_call(on):
    vm = shapefn.VirtualMachine(endless_loop_program(), on, max_instructions=10_000)
    with pytest.raises(RuntimeError, match="budget of 10000 instructions"):
        vm()
    assert 10_000 < vm.counters["instructions"] <= 10_002


def test_ctrl_c_interrupts_a_running_call(tmp_path):
    code = textwrap.dedent("""
        import shapefn, sys
        from shapefn import Label, ProgramBuilder
        pb = ProgramBuilder()
        fb = pb.function("main", [])
        top = Label()
        fb.place(top)
        fb.goto(top)
        vm = shapefn.VirtualMachine(pb.build(), "host")
        print("running", flush=True)
        try:
            vm()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "running"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert "interrupted" in out


def test_a_match_cast_that_does_not_hold_is_an_error(sim):
    """A Relax match_cast is checked when it runs: a size that differs from
    its literal raises, naming both (a view of the wrong shape would
    otherwise give a wrong answer silently). Which sizes are checked:
    tests/test_pass_codegen.py."""
    import tvm
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Cast:
        @R.function
        def main(x: R.Tensor(("n",), "float32")):
            a = R.match_cast(x, R.Tensor((3,), "float32"))
            return R.reshape(a, R.shape([1, 3]))

    vm = shapefn.VirtualMachine(shapefn.compile(Cast, "sim"), sim)
    np.testing.assert_array_equal(vm(np.arange(3, dtype=np.float32)).numpy(), [[0, 1, 2]])
    with pytest.raises(ValueError, match=r"a tensor of size 5 along axis 0 where the program expects 3 \(shape \[5\]"):
        vm(np.ones(5, np.float32))
