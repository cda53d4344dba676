"""Copy elimination on a Mask R-CNN-like ROI program.

A float32 feature map (default 64x256x56x56, 205 MB) on the device (``sim``,
modelled, by default; ``--device opencl`` a real OpenCL device, where copies,
syncs and wall time are real — on PoCL, CPU times; ``--device cuda`` an
NVIDIA GPU) is sliced 100 times by dynamic strided slices. One inference is measured in three configurations,
in one process:

* ``per_op``: bounds from a device kernel; every input of the data-dependent
  slice is copied whole to the host (one flag per op, as older runtimes do);
* ``per_input``: same program; only the bounds (3 x 4 int64 per slice) cross;
* ``per_input_host_params``: bounds computed on the host; nothing crosses.

``--cache-flush`` adds ``cold``: the wall seconds of one more call per
configuration, made after evicting the CPU caches.

Where there is no CUDA GPU, ``--device cuda`` says so on one line (stderr)
and exits with status 0, measuring nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ..runtime import devices
from ..runtime.vm import VirtualMachine
from . import missing_gpu, roi_slicing, timing


def _timed_call(vm: VirtualMachine, args) -> float:
    start = time.perf_counter()
    outputs = vm(*args)
    for out in outputs[:1]:
        out.numpy()  # waits for the device (outside the counters)
    return time.perf_counter() - start


def run_once(vm: VirtualMachine, args, flush: bool = False) -> tuple[dict, float | None]:
    """The counters and wall seconds of one call after a warm-up, and with
    ``flush`` the wall seconds of one more call after evicting the CPU caches."""
    # Warm-up: pools filled, caches touched, kernels built; and waited for,
    # so that on a real device its work does not run into the timed call.
    _timed_call(vm, args)
    vm.reset_counters()
    wall = _timed_call(vm, args)
    result = vm.counters
    result["wall_s"] = wall
    cold = None
    if flush:
        timing.flush_caches()
        cold = _timed_call(vm, args)
    return result, cold


def measure(num_rois: int = 100, fmap_shape=(64, 256, 56, 56), seed: int = 0, flush: bool = False,
            device: str = "sim") -> dict:
    fmap, rois = roi_slicing.make_inputs(num_rois, fmap_shape, seed)
    target = "llvm" if device == "sim" else device.split(":")[0]
    on = devices.sim() if device == "sim" else devices.device(device)
    device_params = roi_slicing.build(num_rois, "device", target)
    host_params = roi_slicing.build(num_rois, "host", target)
    vms = {
        "per_op": VirtualMachine(device_params, on, dependence="per-op"),
        "per_input": VirtualMachine(device_params, on, dependence="per-input"),
        "per_input_host_params": VirtualMachine(host_params, on),
    }
    results, cold = {}, {}
    for mode, vm in vms.items():
        results[mode], cold_wall = run_once(vm, (fmap, rois), flush)
        if flush:
            cold[mode] = {"wall_s": cold_wall}
    if flush:
        results["cold"] = cold
    per_input_bytes = results["per_input"]["d2h_bytes"]
    results["ratio_d2h_bytes"] = (results["per_op"]["d2h_bytes"] / per_input_bytes
                                  if per_input_bytes else float("inf"))
    results["config"] = {"device": on.name, "num_rois": num_rois, "fmap_shape": list(fmap_shape),
                         "fmap_bytes": int(fmap.nbytes), "cache_flush": flush}
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench copy_elimination", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rois", type=int, default=100)
    parser.add_argument("--fmap", type=int, nargs=4, default=[64, 256, 56, 56], metavar=("N", "C", "H", "W"))
    parser.add_argument("--device", default="sim",
                        help="sim (modelled, default), opencl[:N] or cuda[:N] (a real device)")
    timing.add_cache_flush_argument(parser)
    args = parser.parse_args(argv)
    if why := missing_gpu(args.device):
        print(f"copy_elimination: {why}: nothing measured", file=sys.stderr)
        return
    results = measure(args.rois, tuple(args.fmap), flush=args.cache_flush, device=args.device)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    keys = ["d2h_copies", "d2h_bytes", "h2d_bytes", "syncs", "shape_func_calls", "kernel_calls",
            "instructions", "modelled_transfer_s", "wall_s"]
    print(f"{'mode':<24}" + "".join(f"{k:>20}" for k in keys))
    for mode in ("per_op", "per_input", "per_input_host_params"):
        row = results[mode]
        print(f"{mode:<24}" + "".join(f"{row[k]:>20.6g}" if isinstance(row[k], float) else f"{row[k]:>20}"
                                      for k in keys))
    print(f"d2h bytes, per-op / per-input: {results['ratio_d2h_bytes']:.4g}x")
    if "cold" in results:
        print("cold wall_s (after a cache flush): " +
              ", ".join(f"{mode} {row['wall_s']:.4g}" for mode, row in results["cold"].items()))
