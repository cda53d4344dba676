"""vm.profile: per-op counts and bytes against the program and the VM's
counters, the sim's modelled copy times, OpenCL's device times,
the Chrome trace, and that profiling changes neither results nor later
calls. Programs run on sim and on opencl."""
import json
import re

import numpy as np
import pytest
import tvm
from tvm.script import relax as R
from tvm.script import tirx as T

import shapefn
from conftest import DEVICES, device_independent, opencl
from shapefn import Label, Param, ProgramBuilder
from shapefn.compiler import hand_built

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


@pytest.fixture(scope="module")
def models(first_rows_op):
    """``models(device)``: a small dynamic model compiled for ``device`` (once
    per device): a device-computed slice bound (read back for a native shape
    function), a nonzero (its count read back), and a user op whose shape
    function is Python (compiled with TVM) taking the first k rows, doubled."""
    @tvm.script.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor(("n", "m"), "float32"), offset: R.Tensor((2,), "int64"),
                 k: R.Tensor((1,), "int64")):
            rows = T.int64()
            cols = T.int64()
            y = R.multiply(x, R.const(2.0, "float32"))
            begin = R.add(offset, R.const(1, "int64"))  # on the device: read back for the shape
            end = R.shape_to_tensor(R.shape_of(x))
            s = R.dynamic_strided_slice(y, begin, end, R.ones(R.shape([2]), "int64"))
            nz = R.nonzero(s)
            shape = R.call_pure_packed("shapefn.shape_func", R.str("test.first_rows"), R.shape([]),
                                       y, k, ty_args=R.Shape(ndim=2))
            _ = R.match_cast(shape, R.Shape([rows, cols]))
            first = R.call_dps_packed("test.first_rows", (y, k), out_ty=R.Tensor((rows, cols), "float32"))
            return (s, nz, first)

    compiled = {}

    def exe(device):
        if device not in compiled:
            compiled[device] = shapefn.compile(Model, device)
        return compiled[device]

    return exe


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def exe(models, device):
    """The model compiled for the test's device."""
    return models(device)


def default(device):
    """A VM's device: a new default sim, or the named device."""
    return shapefn.sim() if device == "sim" else device


def model_args(seed=0):
    x = np.random.default_rng(seed).standard_normal((6, 5)).astype(np.float32)
    x[x < 0] = 0
    return x, np.array([1, 0], np.int64), np.array([3], np.int64)


def model_reference(x, offset, k):
    y = x * 2
    s = y[offset[0] + 1:, offset[1] + 1:]
    return s, np.stack(np.nonzero(s)), 2 * y[:k[0]]  # the user op doubles its rows


def static_counts(exe, mnemonic, table):
    """{name: how often `mnemonic` names it} in straight-line code."""
    counts = {}
    for index in re.findall(rf"{mnemonic} \w+#(\d+)", exe.as_text()):
        name = table[int(index)]
        counts[name] = counts.get(name, 0) + 1
    return counts


def rows_of(report, kind):
    counts = {}
    for r in report.rows:
        if r["kind"] == kind:
            counts[r["name"]] = counts.get(r["name"], 0) + r["count"]
    return counts


def as_tuple(outputs):
    return tuple(o.numpy() for o in outputs)


def test_each_kernel_and_shape_function_counted_as_often_as_it_ran(exe, device):
    report = shapefn.VirtualMachine(exe, default(device)).profile(*model_args())
    assert "goto" not in exe.as_text() and " if " not in exe.as_text()  # straight-line: each runs once
    assert rows_of(report, "kernel") == static_counts(exe, "invoke_kernel", exe.kernel_names)
    assert sum(rows_of(report, "kernel").values()) == report.counters["kernel_calls"]
    shape_funcs = {r["name"]: r["detail"] for r in report.rows if r["kind"] == "shape_func"}
    # (nonzero's shape is known from its input's type: no shape function runs)
    assert shape_funcs == {"relax.dynamic_strided_slice": "native", "test.first_rows": "tvm"}
    assert sum(r["count"] for r in report.rows if r["kind"] == "shape_func") == report.counters["shape_func_calls"]


def test_kernel_in_a_loop_counted_per_execution(kernel_libs, device):
    # scale runs n times, from one invoke_kernel instruction in a loop.
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    n = fb.shape_get(fb.shape_of(x), 0)
    i, one = fb.load_int(0), fb.load_int(1)
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    top, done = Label(), Label()
    fb.place(top)
    fb.emit("if", fb.lt(i, n), done)
    fb.invoke_kernel(pb.kernel("scale"), [x, one, out])
    fb.emit("add", i, i, one)
    fb.goto(top)
    fb.place(done)
    fb.ret(out)
    vm = shapefn.VirtualMachine(pb.build(library=kernel_libs(device)), default(device))
    for size in (0, 1, 7):
        report = vm.profile(np.ones(size, np.float32))
        np.testing.assert_array_equal(report.outputs.numpy(), np.ones(size, np.float32))
        assert rows_of(report, "kernel") == ({"scale": size} if size else {})
        assert report.counters["kernel_calls"] == size


def test_bytes_and_copies_equal_the_vm_counters(models, exe, device):
    vm = shapefn.VirtualMachine(exe, default(device))
    x, offset, k = model_args()
    vm.reset_counters()
    report = vm.profile(x, offset, k)
    totals, counters = report.totals, vm.counters
    for name in ("d2h_copies", "d2h_bytes", "h2d_copies", "h2d_bytes", "syncs", "kernel_calls",
                 "shape_func_calls", "allocations"):
        assert totals[name] == counters[name] == report.counters[name], name
    # What the program moves: the inputs up; the slice's begin (2 int64),
    # nonzero's count and the user op's k back, each read on its own sync.
    assert totals["h2d_bytes"] == x.nbytes + offset.nbytes + k.nbytes
    assert totals["d2h_bytes"] == 16 + 8 + 8 and totals["syncs"] == 3
    assert totals["readbacks"] == 1 and totals["readback_bytes"] == 8
    assert totals["pool_allocations"] + totals["device_allocations"] == counters["allocations"]
    copies = [r for r in report.rows if r["kind"] == "copy"]
    assert sum(r["modelled_us"] for r in copies) * 1e-6 == pytest.approx(counters["modelled_transfer_s"])
    if device != "sim":  # the same work as on sim
        on_sim = shapefn.VirtualMachine(models("sim"), shapefn.sim())
        on_sim(x, offset, k)
        assert device_independent(counters) == device_independent(on_sim.counters)


def test_sim_copies_take_their_modelled_time_on_the_device_track(models):
    exe = models("sim")
    # The device track of a sim is its cost model's timeline, not a clock:
    # every assertion below holds by construction of the model, whatever the
    # machine's speed (nothing here is wall time).
    latency, bandwidth = 0.5, 1e6  # far beyond anything measured: the timeline is the model's
    report = shapefn.VirtualMachine(exe, shapefn.sim(latency_s=latency, bandwidth_bytes_per_s=bandwidth)).profile(
        *model_args())
    device = [e for e in report.events if e.track == "device"]
    copies = [e for e in device if e.category == "copy"]
    assert len(copies) == report.counters["h2d_copies"] + report.counters["d2h_copies"]
    for e in copies:
        assert e.time_source == "modelled"
        assert e.duration_ns == pytest.approx((latency + e.bytes / bandwidth) * 1e9, abs=1)
    # The stream runs one thing at a time.
    for a, b in zip(device, device[1:]):
        assert b.start_ns >= a.start_ns + a.duration_ns
    # A sync returns only when everything issued before it is done.
    for sync in (e for e in report.events if e.category == "sync"):
        end = sync.start_ns + sync.duration_ns
        assert all(e.start_ns + e.duration_ns <= end for e in device if e.start_ns < sync.start_ns)
        assert sync.modelled_ns > 0
    assert report.totals["modelled_wait_us"] >= 3 * latency * 1e6 * 0.99


def profiled_as_unprofiled(vm, args):
    """The report of a profiled call after a warm one (kernels built, pools
    filled); asserts that it counted what an unprofiled call counts."""
    vm(*args)
    vm.reset_counters()
    vm(*args)
    unprofiled = vm.counters
    vm.reset_counters()
    report = vm.profile(*args)
    assert report.counters == vm.counters == unprofiled
    return report


def test_tvm_device_work_is_timed_by_tvms_device_timer(models):
    """TVM's CPU DeviceAPI stands in for CUDA: each kernel and copy is timed
    through the timer TVM registers for the device (``runtime.timer.cpu``
    here, ``runtime.timer.cuda``'s CUDA events on a GPU), called through
    TVM's virtual interface, as on CUDA; nothing is modelled."""
    args = model_args()
    report = profiled_as_unprofiled(shapefn.VirtualMachine(models("sim"), "cpu"), args)
    for got, want in zip(as_tuple(report.outputs), model_reference(*args), strict=True):
        np.testing.assert_array_equal(got, want)
    device = [e for e in report.events if e.track == "device"]
    assert {e.category for e in device} == {"copy", "kernel"}
    assert all(e.time_source == "device" and e.duration_ns >= 0 for e in device)
    for a, b in zip(device, device[1:]):  # the timer gives durations: placed one after another
        assert b.start_ns >= a.start_ns + a.duration_ns
    assert all(e.modelled_ns == 0 for e in report.events)
    assert report.totals["d2h_bytes"] == report.counters["d2h_bytes"] == 32


@opencl
def test_opencl_kernels_and_copies_are_timed_on_the_device(models):
    """On OpenCL each kernel launch and copy has its execution time from the
    device's profiling events (``device``) on the device track: positive,
    inside the call's span, in the order issued, never before the host
    issued it; syncs are the host's wait (measured), and profiling adds no
    sync or copy to the call."""
    args = model_args()
    report = profiled_as_unprofiled(shapefn.VirtualMachine(models("opencl"), "opencl"), args)
    for got, want in zip(as_tuple(report.outputs), model_reference(*args), strict=True):
        np.testing.assert_array_equal(got, want)
    assert report.device == "opencl:0"
    host = [e for e in report.events if e.track == "host"]
    device = [e for e in report.events if e.track == "device"]
    assert {e.category for e in device} == {"copy", "kernel"}
    assert all(e.time_source == "device" and e.duration_ns > 0 and e.measured_ns == 0 for e in device)
    # One device event per kernel launched and copy issued on the device, in
    # the order issued (kernels placed on the host have none).
    issued = [e for e in host if e.category in ("copy", "kernel") and e.device == "opencl:0"]
    assert [(e.category, e.name) for e in device] == [(e.category, e.name) for e in issued]
    call = report.call
    for twin, e in zip(issued, device, strict=True):
        assert twin.start_ns <= e.start_ns and e.start_ns + e.duration_ns <= call.duration_ns
    for a, b in zip(device, device[1:]):  # an in-order queue runs one command at a time
        assert b.start_ns >= a.start_ns + a.duration_ns
    # The call's timeline holds its device work; its measured time is the host's.
    assert call.measured_ns <= call.duration_ns
    syncs = [e for e in host if e.category == "sync"]
    assert len(syncs) == report.counters["syncs"] == 3
    assert all(e.time_source == "measured" and e.duration_ns == e.measured_ns for e in syncs)
    # A readback's copy is done when its sync returns.
    for sync in syncs:
        before = [e for e, twin in zip(device, issued, strict=True) if twin.start_ns < sync.start_ns]
        assert all(e.start_ns + e.duration_ns <= sync.start_ns + sync.duration_ns for e in before)
    assert all(e.modelled_ns == 0 for e in report.events)
    assert report.totals["device_us"] == pytest.approx(sum(e.duration_ns for e in device) / 1e3)
    rows = {(r["kind"], r["name"], r["device"]): r for r in report.rows}
    for e in issued:
        assert rows[(e.category, e.name, e.device)]["device_us"] > 0
    assert all(r["device_us"] is None for r in report.rows if r["device"] == "host")
    assert "device: execution on the device by its own clock" in report.configuration["timing"]
    assert "host_call" not in report.configuration["timing"]


@opencl
def test_failed_opencl_profiled_call_leaves_later_calls_untimed(models):
    """A profiled call that fails halfway stops its device timing: the next
    calls, profiled or not, run and are timed as their own."""
    vm = shapefn.VirtualMachine(models("opencl"), "opencl")
    x, offset, k = model_args()
    with pytest.raises(ValueError, match="negative dimension"):
        vm.profile(x, offset, np.array([-1], np.int64))
    vm.reset_counters()
    for got, want in zip(as_tuple(vm(x, offset, k)), model_reference(x, offset, k), strict=True):
        np.testing.assert_array_equal(got, want)
    report = vm.profile(x, offset, k)
    issued = [e for e in report.events if e.track == "host" and e.category in ("copy", "kernel")
              and e.device == "opencl:0"]
    assert len([e for e in report.events if e.time_source == "device"]) == len(issued)


def test_chrome_trace_has_host_and_device_tracks(exe, device, tmp_path):
    report = shapefn.VirtualMachine(exe, default(device)).profile(*model_args())
    path = tmp_path / "trace.json"
    report.to_chrome_trace(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    host_pid = next(pid for pid, name in names if name == "host")
    device_pid = next(pid for pid, name in names if name == f"device {shapefn.device(device).name}")
    assert host_pid != device_pid
    on_device = [e for e in complete if e["pid"] == device_pid]
    assert {e["cat"] for e in on_device} == {"copy", "kernel"}
    copy_time = "modelled" if device == "sim" else "device"  # sim's cost model; OpenCL's profiling events
    assert all(e["args"]["time_source"] == copy_time for e in on_device if e["cat"] == "copy")
    if device != "sim":
        assert all(e["args"]["device_us"] == e["dur"] > 0 for e in on_device)
    host = [e for e in complete if e["pid"] == host_pid]
    assert sum(e["cat"] == "sync" for e in host) == report.counters["syncs"]
    assert sum(e["cat"] == "copy" for e in host) == report.counters["h2d_copies"] + report.counters["d2h_copies"]
    # Host spans nest (a viewer stacks them); none overlaps another partially.
    spans = sorted(((e["ts"], e["ts"] + e["dur"]) for e in host), key=lambda s: (s[0], -s[1]))
    stack = []
    for start, end in spans:
        while stack and stack[-1] <= start:
            stack.pop()
        assert not stack or end <= stack[-1] + 1e-3, (start, end, stack[-1])
        stack.append(end)
    # Every flow arrow joins a host event to a device event.
    flows = {}
    for e in events:
        if e["ph"] in "sf":
            flows.setdefault(e["id"], {})[e["ph"]] = e["pid"]
    assert flows and all(f == {"s": host_pid, "f": device_pid} for f in flows.values())


def test_table_and_json(exe, device):
    report = shapefn.VirtualMachine(exe, default(device)).profile(*model_args())
    table = str(report)
    header = table.splitlines()[0].split()
    assert header[:4] == ["Name", "Duration", "(us)", "Percent"]
    for name in static_counts(exe, "invoke_kernel", exe.kernel_names):
        assert name in table
    assert re.search(r"^Total\s", table, re.M) and re.search(r"^Sum\s", table, re.M)
    assert "d2h_bytes: 32" in table
    # Device time: in every row of work on the OpenCL device, in none on the host or the sim.
    assert "On device (us)" in table.splitlines()[0]
    for r in report.rows:
        timed = device != "sim" and r["kind"] in ("kernel", "copy") and r["device"] != "host"
        assert (r["device_us"] is not None) == timed, r
        if timed:
            line = next(line for line in table.splitlines() if line.startswith(r["name"] + " ")
                        and f"{r['duration_us']:,.2f}" in line)
            assert f"{r['device_us']:,.2f}" in line.split()
    data = json.loads(report.to_json())
    assert data["rows"] == json.loads(json.dumps(report.rows))
    assert data["counters"] == report.counters and data["totals"] == report.totals
    assert data["configuration"]["dependence"] == "per-input"


def test_profiling_changes_neither_outputs_nor_later_calls(exe, device):
    args = model_args(seed=3)
    want = model_reference(*args)
    vm = shapefn.VirtualMachine(exe, default(device))
    before = as_tuple(vm(*args))
    counters_before = vm.counters
    vm.reset_counters()
    report = vm.profile(*args)
    profiled = as_tuple(report.outputs)
    assert vm.counters == report.counters == counters_before
    vm.reset_counters()
    after = as_tuple(vm(*args))
    assert vm.counters == counters_before
    for got in (before, profiled, after):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    events = list(report.events)
    vm(*args)
    assert report.events == events  # the report is of its call alone


def test_host_device_has_no_device_track():
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    (x,) = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), out])
    fb.ret(out)
    library = hand_built.build({"scale": hand_built.scale()})
    vm = shapefn.VirtualMachine(pb.build(library=library), "host")
    x = np.arange(5, dtype=np.float32)
    report = vm.profile(x)
    np.testing.assert_array_equal(report.outputs.numpy(), 3 * x)
    assert all(e.track == "host" for e in report.events)
    assert report.totals["h2d_bytes"] == report.totals["d2h_bytes"] == report.totals["syncs"] == 0
    assert [(r["kind"], r["name"], r["count"]) for r in report.rows if r["kind"] != "alloc"] == [("kernel", "scale", 1)]
    assert "device" not in {e["args"]["name"] for e in report._chrome_trace()["traceEvents"]
                            if e["ph"] == "M" and e["name"] == "process_name"}


def test_failed_profiled_call_raises_and_leaves_profiling_off(exe, device):
    vm = shapefn.VirtualMachine(exe, default(device))
    x, offset, k = model_args()
    with pytest.raises(TypeError, match="dtype int64"):
        vm.profile(x, offset.astype(np.int32), k)
    # Fails halfway, after copies and a sync were recorded.
    with pytest.raises(ValueError, match="negative dimension"):
        vm.profile(x, offset, np.array([-1], np.int64))
    with pytest.raises(TypeError, match="takes 3 arguments"):
        vm.profile(x)
    with pytest.raises(KeyError):
        vm.profile(x, offset, k, name="no_such_function")
    vm.reset_counters()
    for got, want in zip(as_tuple(vm(x, offset, k)), model_reference(x, offset, k), strict=True):
        np.testing.assert_array_equal(got, want)
    assert vm.counters["kernel_calls"] == sum(static_counts(exe, "invoke_kernel", exe.kernel_names).values())
