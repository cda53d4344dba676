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
