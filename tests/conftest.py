import hashlib
import os

# Tests run in as many processes as there are cores (pytest -n auto): each
# runs host kernels on one thread (shapefn would give TVM's pool every CPU;
# tests/test_host_target.py checks that, and parallel kernels on 2 threads),
# PoCL's kernels on one (its pthread device runs work-groups on a thread per
# core) and onnxruntime's sessions on one (``_OneThreadSession``): a worker
# that takes every core slows the others' by a third.
os.environ.setdefault("TVM_NUM_THREADS", "1")
os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", "1")
# Host kernels (sim's, host's and GPU builds' host code) are compiled at
# LLVM's optimization level 0: a test's kernels run a few times, and level 0
# builds them in about half the time of LLVM's default (a detector's compile
# 28 s -> 15 s on two cores) while running them at most 2x slower. The
# CPU-kernel tests (test_cpu_gemm.py, test_cpu_schedule.py,
# test_host_target.py) compile at the default level, what users get;
# ``SHAPEFN_HOST_OPT_LEVEL= pytest`` runs every test so.
os.environ.setdefault("SHAPEFN_HOST_OPT_LEVEL", "0")

import numpy as np  # noqa: E402
import onnx_bodies
import onnxruntime  # noqa: E402
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import shapefn
from shapefn.compiler import hand_built as kernels


class _OneThreadSession(onnxruntime.InferenceSession):
    """onnxruntime's session, on one thread and without spinning unless its
    options say otherwise (its default is a spinning thread per core)."""

    def __init__(self, path_or_bytes, sess_options=None, *args, **kwargs):
        options = sess_options if sess_options is not None else onnxruntime.SessionOptions()
        if options.intra_op_num_threads == 0:
            options.intra_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if options.inter_op_num_threads == 0:
            options.inter_op_num_threads = 1
        super().__init__(path_or_bytes, options, *args, **kwargs)


onnxruntime.InferenceSession = _OneThreadSession

# A test marked `opencl` runs on a real OpenCL device (PoCL in CI). Without
# one it skips, naming what to install -- or fails, with --require-opencl
# (what the README's test command and CI use: there, they must run).
OPENCL_MISSING = shapefn.opencl_unavailable_reason()
opencl = pytest.mark.opencl
# Devices a compiled program is run on: the modelled one and a real one.
DEVICES = ["sim", pytest.param("opencl", marks=opencl)]


# Counters that are the same for one program on every device: what crossed
# the boundary and what the VM called (the devices differ in cost, not in work).
DEVICE_INDEPENDENT_COUNTERS = ("d2h_copies", "d2h_bytes", "h2d_copies", "h2d_bytes", "syncs", "kernel_calls",
                               "shape_func_calls")
_require_opencl = False


def device_independent(counters: dict) -> dict:
    """The ``DEVICE_INDEPENDENT_COUNTERS`` of ``counters``."""
    return {name: counters[name] for name in DEVICE_INDEPENDENT_COUNTERS}


def need_opencl():
    """In a test that uses OpenCL without the marker: skips (or fails, with
    --require-opencl) when there is no OpenCL device."""
    if OPENCL_MISSING:
        if _require_opencl:
            pytest.fail(f"--require-opencl: {OPENCL_MISSING}")
        pytest.skip(f"no OpenCL device: {OPENCL_MISSING}")


def run_on_devices(mod, calls, devices=("sim", "opencl"), **compile_options):
    """Compiles Relax module ``mod`` for each device and runs ``main`` on each
    argument list of ``calls`` there (a strict sim for ``sim``); asserts that
    every call's ``DEVICE_INDEPENDENT_COUNTERS`` are the same on every
    device. Returns, per device, the calls' results as numpy arrays (a tuple
    result as a tuple of them) and their counters."""
    if "opencl" in devices:
        need_opencl()
    results = {}
    for device in devices:
        exe = shapefn.compile(mod, device, **compile_options)
        vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
        runs = []
        for args in calls:
            vm.reset_counters()
            out = vm(*args)
            counters = vm.counters
            out = _to_numpy(out)
            runs.append((out, counters))
        results[device] = runs
    first, *others = devices
    for other in others:
        for i, ((_, a), (_, b)) in enumerate(zip(results[first], results[other])):
            assert device_independent(a) == device_independent(b), f"call {i}: counters on {first} and {other} differ"
    return results


def _to_numpy(value):
    """A result as numpy: tensors copied to the host, tuples field by field
    (ints and shapes, which the VM returns as Python values, as they are)."""
    if isinstance(value, tuple):
        return tuple(_to_numpy(v) for v in value)
    return value.numpy() if hasattr(value, "numpy") else value


def pytest_addoption(parser):
    parser.addoption("--require-opencl", action="store_true",
                     help="fail (instead of skipping) the OpenCL tests when there is no OpenCL device")


def pytest_configure(config):
    global _require_opencl
    _require_opencl = config.getoption("--require-opencl")
    config.addinivalue_line("markers", "opencl: runs on a real OpenCL device (skips without one)")
    config.addinivalue_line(
        "markers", "model: a whole model, minutes in TVM's compiler (left out of the sanitized run)")
    config.addinivalue_line(
        "markers", "native: exercises shapefn's own C++ (the VM, executables, devices, the runner): the tests "
                   "the sanitized run (tools/sanitize-pytest -m native) runs")
    # pytest-xdist's --dist loadfile hands out files in the order collected
    # (pytest_collection_modifyitems below), not by how many tests they hold:
    # a file of few tests that compile whole models would otherwise come last
    # and run alone while the other workers idle.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# The files whose tests take minutes with an empty kernel cache (whole models
# compiled for several devices), most first: collected before the others so
# that the many short files fill the workers' time around them.
LONGEST_FILES = ("test_models.py", "test_torchvision_models.py", "test_models_tvm_vm.py",
                 "test_onnx_backend_suite.py", "test_pypi_models.py", "test_fuzz_importer.py", "test_cuda_build.py",
                 "test_transformers.py", "test_onnx_grid_resize.py", "test_pass_fusion.py")


BODY_EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "data", "onnx_body_expected_failures.txt")


def _body_expected_failures() -> dict[str, str]:
    """Test id -> why its ``bodies`` variant fails (``id<TAB>reason`` lines)."""
    listed = {}
    with open(BODY_EXPECTED_FAILURES) as f:
        for line in f.read().splitlines():
            if line and not line.startswith("#"):
                name, _, reason = line.partition("\t")
                listed[name] = reason
    return listed


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # (stable: each file's order kept)
    listed = _body_expected_failures()
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.xfail(reason=listed[item.nodeid], strict=True))


def pytest_runtest_setup(item):
    if OPENCL_MISSING and item.get_closest_marker("opencl") is not None:
        if item.config.getoption("--require-opencl"):
            pytest.fail(f"--require-opencl: {OPENCL_MISSING}")
        pytest.skip(f"no OpenCL device: {OPENCL_MISSING}")


def device_target(device: str) -> tvm.target.Target:
    """The target whose kernels run on ``device``: the CPU's for sim and the
    host, the device's (with the CPU as host) for opencl."""
    return tvm.target.Target("llvm") if device in ("sim", "host") else tvm.target.Target(device, host="llvm")


def _test_kernels(gpu: bool):
    return {
        "strided_slice": kernels.strided_slice(4),
        "strided_slice_1d": kernels.strided_slice(1),
        "roi_params": kernels.roi_params(),
        "nonzero_1d": kernels.nonzero_1d(gpu=gpu),
        "scale": kernels.scale(),
    }


@pytest.fixture(scope="session")
def kernel_libs():
    """``kernel_libs(device)``: the test kernels compiled for ``device``
    ("sim" or "opencl"), once per device."""
    built = {}

    def build(device):
        if device == "opencl":
            need_opencl()
        if device not in built:
            built[device] = kernels.build(_test_kernels(device == "opencl"), device_target(device))
        return built[device]

    return build


@pytest.fixture(scope="session")
def kernel_lib(kernel_libs):
    """The test kernels, compiled once for the CPU (sim and the host)."""
    return kernel_libs("sim")


@pytest.fixture(scope="module")
def default_host_opt_level():
    """The module's host kernels compiled at LLVM's default optimization
    level, as users' are (``pytestmark = pytest.mark.usefixtures(...)``);
    every other test's at level 0 (the top of this file)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SHAPEFN_HOST_OPT_LEVEL", raising=False)
        yield


@pytest.fixture
def sim():
    """A strict sim device: host shape functions that touched its memory would fault."""
    return shapefn.sim(strict=True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _fingerprint(model, feeds) -> str:
    digest = hashlib.sha256(model.SerializeToString())
    for args in feeds:
        for a in args:
            a = np.asarray(a)
            digest.update(f"{a.dtype}{a.shape}".encode())
            digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


# The device-independent counters of each feed of each model onnx_check ran
# on sim (by fingerprint): the opencl run compares with them.
_onnx_sim_counters: dict[str, list[dict]] = {}


def pytest_generate_tests(metafunc):
    """``onnx_check`` runs each test on the devices its module names in
    ``ONNX_CHECK_DEVICES``: ``DEVICES`` where the device adds something (the
    module's converters emit kernels of shapefn's own, with GPU forms; sizes
    read back from the device; loops' host parameters), ``("sim",)`` where
    it does not (converters of standard ops whose GPU schedules are TVM's:
    ONNX's conformance sample in test_onnx_backend.py runs their families on
    opencl). Each also runs as ``bodies``: its model wrapped by
    ``onnx_bodies.in_bodies`` (inside a Loop body and an If branch) on a
    strict sim, unless the module sets ``ONNX_CHECK_BODIES = False`` (whole
    models whose converters other modules' tests cover)."""
    if "onnx_check" in metafunc.fixturenames:
        devices = list(getattr(metafunc.module, "ONNX_CHECK_DEVICES", ("sim",)))
        if getattr(metafunc.module, "ONNX_CHECK_BODIES", True):
            devices.append("bodies")
        metafunc.parametrize("onnx_check", devices, indirect=True, scope="session")


@pytest.fixture(scope="session")
def onnx_check(request):
    """``check(model, feeds)``: imports ``model`` with shapefn.from_onnx and
    compiles it once for the fixture's device (each test using it runs on
    every device its module's ``ONNX_CHECK_DEVICES`` names: see
    ``pytest_generate_tests``), then runs every feed set (a list of input
    arrays in graph-input order) there (a strict sim for sim) and in
    onnxruntime and compares dtypes, shapes and values (integers and bools
    exactly; floats within ``atol``, 1e-6 unless a test's sums are long).
    ``bodies`` (not a device) runs the model wrapped in a Loop body and an
    If branch (tests/onnx_bodies.py) on a strict sim, and compares both
    halves of its outputs with onnxruntime's answers for the original.
    On opencl, every call's ``DEVICE_INDEPENDENT_COUNTERS`` must equal those
    of the same call on sim (taken from the sim run of the same test, or run
    here when it did not run)."""
    import onnxruntime as ort

    from shapefn.frontend import from_onnx

    device = request.param
    if device == "opencl":
        need_opencl()

    def run(mod, on, feeds):
        """Each feed's outputs (a tuple of numpy arrays) and counters on device ``on``."""
        vm = shapefn.VirtualMachine(shapefn.compile(mod, on), shapefn.sim(strict=True) if on == "sim" else on)
        runs = []
        for args in feeds:
            vm.reset_counters()
            outs = vm(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            runs.append((tuple(o.numpy() for o in outs), device_independent(vm.counters)))
        return runs

    def check(model, feeds, atol=1e-6):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in model.graph.input]
        wants_of = [session.run(None, dict(zip(names, args))) for args in feeds]
        if device == "bodies":
            try:
                wrapped = onnx_bodies.in_bodies(model)
            except onnx_bodies.NotWrappable as e:
                pytest.skip(f"not wrapped in bodies: {e}")
            feeds = [[*args, np.array(True)] for args in feeds]
            runs = run(from_onnx(wrapped), "sim", feeds)
            wants_of = [wants + wants for wants in wants_of]  # (the Loop's outputs, then the If's)
            # The wrapping itself is checked: onnxruntime gives the same answers wrapped.
            inner = ort.InferenceSession(wrapped.SerializeToString(), providers=["CPUExecutionProvider"])
            for args, wants in zip(feeds, wants_of):
                for got, want in zip(inner.run(None, dict(zip(names + [onnx_bodies.TAKE], args))), wants):
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
        else:
            mod = from_onnx(model)
            runs = run(mod, device, feeds)
        for args, (gots, _), wants in zip(feeds, runs, wants_of):
            assert len(gots) == len(wants)
            for got, want in zip(gots, wants):
                assert (got.dtype, got.shape) == (want.dtype, want.shape), [a.shape for a in args]
                if np.issubdtype(want.dtype, np.floating):
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
                else:
                    np.testing.assert_array_equal(got, want)
        key = _fingerprint(model, feeds)
        if device == "bodies":
            return
        if device == "sim":
            _onnx_sim_counters[key] = [counters for _, counters in runs]
            return
        if key not in _onnx_sim_counters:
            _onnx_sim_counters[key] = [counters for _, counters in run(mod, "sim", feeds)]
        for i, ((_, counters), on_sim) in enumerate(zip(runs, _onnx_sim_counters[key])):
            assert counters == on_sim, f"feed {i}: counters on {device} differ from those on sim"

    return check


def assert_parallel_on_gpus(mod: tvm.IRModule, kinds=("cuda",)) -> None:
    """Every device kernel of ``mod`` compiled for each of ``kinds`` (the
    kernels scheduled, not built: no nvcc run) launches GPU threads and does
    all its work in them, and none is a one-thread kernel. CUDA's by
    default: OpenCL's come from the same rules and GPU forms (only the
    limits differ), and a model compiled for OpenCL builds them anyway."""
    from shapefn.compiler.compile import scheduled_kernels
    from shapefn.compiler.schedules import gpu_threads, target_schedule

    for kind in kinds:
        scheduled = scheduled_kernels(mod, kind)
        assert scheduled is not None and scheduled.single_thread == (), (kind, scheduled and scheduled.single_thread)
        on_device = [(gv.name_hint, func) for gv, func in scheduled.module.functions.items()
                     if func.attrs["target"].kind.name == kind]
        assert on_device, kind
        for name, func in on_device:
            assert target_schedule.binds_threads(func), (kind, name)
            assert not gpu_threads.host_work(func), (kind, name, gpu_threads.host_work(func))


def sym(name: str) -> tvm.tirx.Var:
    """An int64 size variable."""
    return tvm.tirx.Var(name, "int64")


def relax_main(params, body) -> tvm.IRModule:
    """A module ``main(*params)``, each ``(name, shape, dtype)``, whose body
    ``body(bb, *vars)`` returns the output."""
    bb = relax.BlockBuilder()
    vars_ = [relax.Var(name, relax.TensorType(shape, dtype)) for name, shape, dtype in params]
    with bb.function("main", vars_):
        bb.emit_func_output(body(bb, *vars_))
    return bb.get()


@tvm.script.ir_module
class ProfilingExample:
    """The profiling example (docs/profiling.md): the slice's begin is computed on the
    device, its end from the input's shape on the host."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), offset: R.Tensor((2,), "int64")):
        begin = R.add(offset, R.const(1, "int64"))
        end = R.shape_to_tensor(R.shape_of(x))
        y = R.dynamic_strided_slice(x, begin, end, R.ones(R.shape([2]), "int64"))
        return R.nonzero(y)


class SliceNonzeroModel:
    """A compiled dynamic model with two data-dependent ops, for the
    concurrency and leak tests: ``main(x: f32[n, m], begin, end, strides:
    i64[2])`` returns ``(y, nonzero(y))`` with ``y = (2 * x)[begin:end:strides]``.
    The slice's bounds arrive on the device, where a kernel computes its
    extents, which are read back, and then nonzero's count: every call syncs
    twice.
    Compiled for ``device`` ("sim" or "opencl")."""

    def __init__(self, device="sim"):
        from tvm import relax, tirx

        n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
        x = relax.Var("x", relax.TensorType([n, m], "float32"))
        bounds = [relax.Var(name, relax.TensorType([2], "int64")) for name in ("begin", "end", "strides")]
        bb = relax.BlockBuilder()
        with bb.function("main", [x, *bounds]):
            y = bb.emit(relax.op.multiply(x, relax.const(2.0, "float32")))
            sliced = bb.emit(relax.op.dynamic_strided_slice(y, *bounds))
            bb.emit_func_output(relax.Tuple([sliced, bb.emit(relax.op.nonzero(sliced))]))
        self.device = device
        self.exe = shapefn.compile(bb.get(), device)

    @staticmethod
    def inputs(rng, max_dim=40):
        """Random arguments: any shape up to ``max_dim`` square, in-range bounds."""
        shape = rng.integers(1, max_dim + 1, size=2)
        x = rng.integers(-1, 2, size=shape).astype(np.float32)  # about a third zeros
        begin = np.array([rng.integers(0, d) for d in shape], np.int64)
        end = np.array([rng.integers(b + 1, d + 1) for b, d in zip(begin, shape)], np.int64)
        strides = rng.integers(1, 4, size=2).astype(np.int64)
        return x, begin, end, strides

    @staticmethod
    def reference(x, begin, end, strides):
        y = (2 * x)[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]
        return y, np.stack(np.nonzero(y))


@pytest.fixture(scope="session")
def slice_nonzero_models():
    """``slice_nonzero_models(device)``: the SliceNonzeroModel compiled for
    ``device``, once per device."""
    compiled = {}

    def get(device):
        if device == "opencl":
            need_opencl()
        if device not in compiled:
            compiled[device] = SliceNonzeroModel(device)
        return compiled[device]

    return get


@pytest.fixture(scope="session")
def slice_nonzero_model(slice_nonzero_models):
    """The SliceNonzeroModel compiled for sim."""
    return slice_nonzero_models("sim")


@pytest.fixture(scope="session")
def first_rows_op():
    """A user kernel registered with tvm-ffi ("test.first_rows": the first k
    rows of data, doubled) and its TE shape function, mask [False, True].
    The kernel is compiled for the CPU and, when there is an OpenCL device,
    for OpenCL; the registered function calls the one for its tensors'
    device. Returns the CPU library."""
    import tvm_ffi
    from tvm import te

    n, m, k = (te.var(v, "int64") for v in "nmk")
    data = te.placeholder((n, m), "float32", name="data")
    count = te.placeholder((1,), "int64", name="k")
    out = te.compute((k, m), lambda i, j: data[i, j] * 2, name="out")
    funcs = {"first_rows": te.create_prim_func([data, count, out])}
    # By DLPack device type: sim's tensors are labelled CPU.
    cpu, gpu = tvm.cpu(0).dlpack_device_type(), tvm.opencl(0).dlpack_device_type()
    libs = {cpu: kernels.build(funcs, device_target("sim"))}
    if not OPENCL_MISSING:
        libs[gpu] = kernels.build(funcs, device_target("opencl"))

    def first_rows(data, k, out):
        libs[data.device.dlpack_device_type()]["first_rows"](data, k, out)

    tvm_ffi.register_global_func("test.first_rows", first_rows, override=True)

    @shapefn.register_shape_func("test.first_rows", [False, True], override=True)
    def first_rows_shape(data, k):
        return [k[0], data.shape[1]]

    return libs[cpu]


def first_rows_module(kernel: str) -> tvm.IRModule:
    """``main(data [n, 3], k [1])``: ``kernel`` (a tvm-ffi function writing
    the first k rows of its input) emitted with ``shapefn.emit_extern``
    between two elementwise kernels, with the shape function [k, 3]
    registered for it (mask [False, True])."""
    shapefn.register_shape_func(kernel, [False, True], override=True,
                                shape_func=lambda data, k: [k[0], data.shape[1]])
    n = tvm.tirx.Var("n", "int64")
    data = relax.Var("data", relax.TensorType([n, 3], "float32"))
    k = relax.Var("k", relax.TensorType([1], "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [data, k]):
        doubled = bb.emit(relax.op.multiply(data, relax.const(2.0, "float32")))
        rows = shapefn.emit_extern(bb, kernel, [doubled, k], out_ndim=2, out_dtype="float32")
        bb.emit_func_output(bb.emit(relax.op.add(rows, relax.const(1.0, "float32"))))
    return bb.get()
