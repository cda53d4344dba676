"""Benchmarks: ``python -m shapefn.bench NAME``."""
from ..runtime import devices


def missing_gpu(device: str) -> str:
    """Why a benchmark cannot run on ``device`` here: a CUDA device TVM's
    runtime does not reach (no GPU, or no driver); "" when it can run."""
    if device.split(":")[0] != "cuda" or devices.tvm_device_exists(device):
        return ""
    return f"no CUDA GPU found (TVM's CUDA runtime reaches no device {device!r})"
