"""Threads: the registry under concurrent registration and reads, several VMs
on one executable running in parallel, one VM shared by two threads (calls
serialised, counters whole), and tensors and call handles outliving their VM.
The programs run on sim and on opencl; on opencl the counters are also those
of the same calls on sim."""
import gc
import sys
import threading
import time

import numpy as np
import pytest
import tvm_ffi

import shapefn
from conftest import DEVICES, device_independent
from shapefn import Param, ProgramBuilder

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

CALLS = 1_000


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch Python threads every 10 us instead of 5 ms, so the threads'
    Python work (argument conversion, result wrapping) interleaves with
    other threads' VM calls as much as it can."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def run_threads(target, args_per_thread):
    """Runs ``target(*args)`` in one thread per entry, started together;
    re-raises the first exception a thread raised."""
    barrier = threading.Barrier(len(args_per_thread))
    errors, results = [], [None] * len(args_per_thread)

    def body(i, args):
        try:
            barrier.wait()
            results[i] = target(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i, a)) for i, a in enumerate(args_per_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def call_sequence(call, model, seed, calls=CALLS):
    """``calls`` calls on inputs from ``seed``; outputs kept as VM Tensors
    until every call is done (so later calls must not reuse their memory),
    then copied to numpy."""
    rng = np.random.default_rng(seed)
    inputs = [model.inputs(rng) for _ in range(calls)]
    outputs = [call(*args) for args in inputs]
    return inputs, [tuple(t.numpy() for t in out) for out in outputs]


def assert_same_outputs(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for a, b in zip(g, w, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def sim_counters(slice_nonzero_models, seed):
    """The counters of ``call_sequence`` from ``seed`` on sim, single-threaded."""
    vm = shapefn.VirtualMachine(slice_nonzero_models("sim").exe, "sim")
    call_sequence(vm, slice_nonzero_models("sim"), seed)
    return vm.counters


@pytest.mark.parametrize("device", DEVICES)
def test_four_threads_with_their_own_vms_match_a_single_threaded_run(slice_nonzero_models, device):
    model = slice_nonzero_models(device)
    seeds = [11, 12, 13, 14]
    # The single-threaded run, one VM per sequence, checked against numpy.
    reference, reference_counters = [], []
    for seed in seeds:
        vm = shapefn.VirtualMachine(model.exe, device)
        inputs, outputs = call_sequence(vm, model, seed)
        assert_same_outputs(outputs, [model.reference(*args) for args in inputs])
        reference.append(outputs)
        reference_counters.append(vm.counters)
        if device != "sim":
            assert device_independent(vm.counters) == device_independent(sim_counters(slice_nonzero_models, seed))

    vms = [shapefn.VirtualMachine(model.exe, device) for _ in seeds]
    results = run_threads(lambda vm, seed: call_sequence(vm, model, seed)[1], list(zip(vms, seeds)))
    for outputs, want, vm, want_counters in zip(results, reference, vms, reference_counters):
        assert_same_outputs(outputs, want)
        assert vm.counters == want_counters


@pytest.mark.parametrize("device", DEVICES)
def test_one_vm_called_from_two_threads_gives_every_caller_its_result(slice_nonzero_models, device):
    model = slice_nonzero_models(device)
    seeds = [21, 22]
    single = {}
    for seed in seeds:
        vm = shapefn.VirtualMachine(model.exe, device)
        call_sequence(vm, model, seed)
        single[seed] = vm.counters

    shared = shapefn.VirtualMachine(model.exe, device)
    results = run_threads(lambda seed: call_sequence(shared, model, seed), [(s,) for s in seeds])
    for inputs, outputs in results:
        assert_same_outputs(outputs, [model.reference(*args) for args in inputs])
    # Serialised calls add up exactly: nothing was lost to a race.
    counters = shared.counters
    for name, value in counters.items():
        want = sum(single[s][name] for s in seeds)
        # (The modelled time is a float sum, in another order.)
        assert value == (pytest.approx(want) if name == "modelled_transfer_s" else want), name
    if device != "sim":
        on_sim = [sim_counters(slice_nonzero_models, seed) for seed in seeds]
        assert device_independent(counters) == {name: sum(c[name] for c in on_sim)
                                                for name in device_independent(counters)}


class OverlapProbe:
    """A kernel (a tvm-ffi global function) that records how many calls of
    it run at once. It sleeps inside, releasing the GIL, so a second thread
    would enter it if nothing serialised the calls."""

    name = "test.concurrency.probe"

    def __init__(self):
        self.lock = threading.Lock()
        self.active = self.max_active = self.calls = 0
        tvm_ffi.register_global_func(self.name, self.kernel, override=True)

    def kernel(self, x, out):
        with self.lock:
            self.active += 1
            self.calls += 1
            self.max_active = max(self.max_active, self.active)
        time.sleep(0.001)
        out.copyfrom(x.numpy() + 1)
        with self.lock:
            self.active -= 1

    @classmethod
    def program(cls):
        """``main(x: f32[n]) -> x + 1``, computed by the probe."""
        pb = ProgramBuilder()
        fb = pb.function("main", [Param("x", "float32", ["n"])])
        (x,) = fb.args
        out = fb.alloc_tensor("device", fb.shape_of(x), "float32")
        fb.invoke_kernel(pb.kernel(cls.name), [x, out])
        fb.ret(out)
        return pb.build()


def probe_calls(call, offset, calls=50):
    for i in range(calls):
        x = np.full(i % 7 + 1, offset + i, np.float32)
        np.testing.assert_array_equal(call(x).numpy(), x + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_calls_on_one_vm_never_overlap(device):
    probe = OverlapProbe()
    exe = probe.program()
    vm = shapefn.VirtualMachine(exe, device)
    run_threads(probe_calls, [(vm, 0), (vm, 1000)])
    assert probe.calls == 100 and probe.max_active == 1

    # The probe does see overlap when it happens: two VMs run in parallel.
    probe.max_active = 0
    run_threads(probe_calls, [(shapefn.VirtualMachine(exe, device), 0), (shapefn.VirtualMachine(exe, device), 1000)])
    assert probe.max_active == 2


@pytest.mark.parametrize("device", DEVICES)
def test_counters_read_during_calls_are_whole_calls(device):
    probe = OverlapProbe()
    vm = shapefn.VirtualMachine(probe.program(), device)
    per_call = 4  # shape_of, alloc_tensor, invoke_kernel, ret; 2 allocations: the upload, the output
    done = threading.Event()
    snapshots = []

    def poll():
        while not done.is_set():
            snapshots.append(vm.counters)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        run_threads(probe_calls, [(vm, 0), (vm, 1000)])
    finally:
        done.set()
        poller.join()
    assert len(snapshots) > 10
    for c in snapshots:
        calls = c["kernel_calls"]
        assert c["instructions"] == per_call * calls and c["allocations"] == 2 * calls, c
    assert vm.counters["kernel_calls"] == 100


def test_vms_sharing_a_strict_sim_take_turns(slice_nonzero_model):
    """A strict sim makes its memory unreadable to the whole process while a
    call's shape functions run, so its calls (and copies of its tensors to
    the host) from other threads wait rather than fault. (Strict mode is
    the sim's.)"""
    model = slice_nonzero_model
    device = shapefn.sim(strict=True)
    vms = [shapefn.VirtualMachine(model.exe, device) for _ in range(2)]
    results = run_threads(lambda vm, seed: call_sequence(vm, model, seed), [(vms[0], 31), (vms[1], 32)])
    for inputs, outputs in results:
        assert_same_outputs(outputs, [model.reference(*args) for args in inputs])


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_and_call_handles_outlive_their_vm(slice_nonzero_models, device):
    model = slice_nonzero_models(device)
    args = model.inputs(np.random.default_rng(5))
    vm = shapefn.VirtualMachine(model.exe, device)
    outputs = vm(*args)
    del vm
    gc.collect()
    assert_same_outputs([tuple(t.numpy() for t in outputs)], [model.reference(*args)])

    # A call handle keeps its VM alive; VMs made afterwards must not take its place.
    main = shapefn.VirtualMachine(model.exe, device)["main"]
    gc.collect()
    others = [shapefn.VirtualMachine(OverlapProbe.program(), device) for _ in range(8)]
    got = main(*args)
    assert_same_outputs([tuple(t.numpy() for t in got)], [model.reference(*args)])
    del others


def test_registry_under_concurrent_registration_reads_and_vm_creation(tmp_path):
    """Threads register Python shape functions for one op at different
    levels, register ops of their own, read entries and create VMs, all at
    once; every read sees a whole entry and the highest level wins. (Only
    on sim: the program is one host shape function and does nothing on its
    device.)"""
    shapefn.set_cache_dir(tmp_path)
    op = "test.concurrency.shared"
    levels = list(range(11, 19))
    seen_levels = set()

    def make_shape_func(level):
        def rows_plus_level(data, k):
            return [k[0] + level, data.shape[1]]
        return rows_plus_level

    def program(op_name):
        pb = ProgramBuilder()
        fb = pb.function("main", [Param("data", "float32", ["n", "m"]), Param("k", "int64", [1])])
        (shape,) = fb.shape_func(op_name, list(fb.args))
        fb.ret(shape)
        return pb.build()

    shapefn.register_shape_func(op, [False, True], make_shape_func(10), level=10)
    exe = program(op)

    def work(thread):
        for level in levels[thread::4]:
            shapefn.register_shape_func(op, [False, True], make_shape_func(level), level=level)
            own = f"test.concurrency.own{thread}.{level}"
            shapefn.register_shape_func(own, [False, True], make_shape_func(0))
            assert shapefn.data_dependence(own) == [False, True]
            for _ in range(20):
                info = shapefn.shape_func_info(op)
                assert info["mask"] == [False, True] and info["arity"] == 2 and info["kind"] == "python"
                seen_levels.add(info["level"])
                assert op in shapefn.registered_ops()
                shapefn.VirtualMachine(exe, "sim")  # resolves the op in the registry

    try:
        run_threads(work, [(t,) for t in range(4)])
        assert shapefn.shape_func_info(op)["level"] == max(levels)
        assert seen_levels <= {10, *levels}
        # The winning function runs, compiled by four VMs' first calls at once.
        data, k = np.zeros((3, 4), np.float32), np.array([5], np.int64)
        vms = [shapefn.VirtualMachine(exe, "sim") for _ in range(4)]
        results = run_threads(lambda vm: vm(data, k), [(vm,) for vm in vms])
        assert results == [(5 + max(levels), 4)] * 4
    finally:
        shapefn.set_cache_dir(None)
