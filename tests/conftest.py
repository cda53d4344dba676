import numpy as np
import pytest
import tvm

import shapefn
from shapefn import kernels

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
            pick = lambda c: {k: c[k] for k in DEVICE_INDEPENDENT_COUNTERS}  # noqa: E731
            assert pick(a) == pick(b), f"call {i}: counters on {first} and {other} differ"
    return results


def _to_numpy(value):
    return tuple(_to_numpy(v) for v in value) if isinstance(value, tuple) else value.numpy()


def pytest_addoption(parser):
    parser.addoption("--require-opencl", action="store_true",
                     help="fail (instead of skipping) the OpenCL tests when there is no OpenCL device")


def pytest_configure(config):
    global _require_opencl
    _require_opencl = config.getoption("--require-opencl")
    config.addinivalue_line("markers", "opencl: runs on a real OpenCL device (skips without one)")


def pytest_runtest_setup(item):
    if OPENCL_MISSING and item.get_closest_marker("opencl") is not None:
        if item.config.getoption("--require-opencl"):
            pytest.fail(f"--require-opencl: {OPENCL_MISSING}")
        pytest.skip(f"no OpenCL device: {OPENCL_MISSING}")


@pytest.fixture(scope="session")
def kernel_lib():
    """The test kernels, compiled once."""
    return kernels.build({
        "strided_slice": kernels.strided_slice(4),
        "strided_slice_1d": kernels.strided_slice(1),
        "roi_params": kernels.roi_params(),
        "nonzero_1d": kernels.nonzero_1d(),
        "scale": kernels.scale(),
    })


@pytest.fixture
def sim():
    """A strict sim device: host shape functions that touched its memory would fault."""
    return shapefn.sim(strict=True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def onnx_check():
    """``check(model, feeds)``: imports ``model`` with shapefn.from_onnx and
    compiles it for sim once, then runs every feed set (a list of input
    arrays in graph-input order) on a strict sim and in onnxruntime and
    compares dtypes, shapes and values (integers and bools exactly)."""
    import onnxruntime as ort

    from shapefn.frontend import from_onnx

    def check(model, feeds):
        exe = shapefn.compile(from_onnx(model), "sim")
        vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True))
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in model.graph.input]
        for args in feeds:
            wants = session.run(None, dict(zip(names, args)))
            gots = vm(*args)
            gots = gots if isinstance(gots, tuple) else (gots,)
            assert len(gots) == len(wants)
            for got, want in zip(gots, wants):
                got = got.numpy()
                assert (got.dtype, got.shape) == (want.dtype, want.shape), [a.shape for a in args]
                if np.issubdtype(want.dtype, np.floating):
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
                else:
                    np.testing.assert_array_equal(got, want)

    return check


class SliceNonzeroModel:
    """A compiled dynamic model with two data-dependent ops, for the
    concurrency and leak tests: ``main(x: f32[n, m], begin, end, strides:
    i64[2])`` returns ``(y, nonzero(y))`` with ``y = (2 * x)[begin:end:strides]``.
    The slice's shape function reads the three bound tensors (copied from the
    device), and nonzero's count is read back: every call syncs twice."""

    def __init__(self):
        from tvm import relax, tirx

        n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
        x = relax.Var("x", relax.TensorType([n, m], "float32"))
        bounds = [relax.Var(name, relax.TensorType([2], "int64")) for name in ("begin", "end", "strides")]
        bb = relax.BlockBuilder()
        with bb.function("main", [x, *bounds]):
            y = bb.emit(relax.op.multiply(x, relax.const(2.0, "float32")))
            sliced = bb.emit(relax.op.dynamic_strided_slice(y, *bounds))
            bb.emit_func_output(relax.Tuple([sliced, bb.emit(relax.op.nonzero(sliced))]))
        self.exe = shapefn.compile(bb.get(), "sim")

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
def slice_nonzero_model():
    return SliceNonzeroModel()


@pytest.fixture(scope="session")
def first_rows_op():
    """A user kernel registered with tvm-ffi ("test.first_rows": the first k
    rows of data, doubled) and its TE shape function, mask [False, True]."""
    import tvm_ffi
    from tvm import te

    n, m, k = (te.var(v, "int64") for v in "nmk")
    data = te.placeholder((n, m), "float32", name="data")
    count = te.placeholder((1,), "int64", name="k")
    out = te.compute((k, m), lambda i, j: data[i, j] * 2, name="out")
    lib = tvm.compile(te.create_prim_func([data, count, out]).with_attr("global_symbol", "first_rows"),
                      target="llvm")
    tvm_ffi.register_global_func("test.first_rows", lib["first_rows"], override=True)

    @shapefn.register_shape_func("test.first_rows", [False, True], override=True)
    def first_rows_shape(data, k):
        return [k[0], data.shape[1]]

    return lib
