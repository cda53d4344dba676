import numpy as np
import pytest

import shapefn
from shapefn import kernels


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
