"""``python -m shapefn.demo``: a dynamic program on the simulated accelerator,
run once per dependence mode, printing what crossed the host/device boundary.

The program slices a feature map on the device once per region of interest
with ``dyn.strided_slice``, whose mask is ``[False, True, True, True]``: the
shape function needs the values of begin/end/strides, only the shape of the
data. Declared per op, the data would cross too.
"""
from __future__ import annotations

import numpy as np

from . import data_dependence
from .bench import roi_slicing
from .runtime import devices
from .runtime.vm import VirtualMachine

NUM_ROIS = 20
FMAP_SHAPE = (8, 256, 56, 56)


def main() -> None:
    fmap, rois = roi_slicing.make_inputs(NUM_ROIS, FMAP_SHAPE)
    reference = roi_slicing.reference(fmap, rois)
    exe = roi_slicing.build(NUM_ROIS, params="device")
    print(f"shapefn demo: {NUM_ROIS} dynamic slices of a float32{list(FMAP_SHAPE)} feature map "
          f"({fmap.nbytes / 1e6:.1f} MB) on the 'sim' device")
    print(f"dyn.strided_slice data dependence: {data_dependence('dyn.strided_slice')}\n")
    header = f"{'mode':<10} {'d2h copies':>11} {'d2h bytes':>14} {'syncs':>6} {'modelled transfer':>18}  correct"
    print(header)
    print("-" * len(header))
    sim = devices.sim()
    rows = {}
    for mode in ("per-op", "per-input"):
        vm = VirtualMachine(exe, sim, dependence=mode)
        vm(fmap, rois)  # warm-up
        vm.reset_counters()
        outputs = vm(fmap, rois)
        correct = all(np.array_equal(o.numpy(), r) for o, r in zip(outputs, reference))
        c = rows[mode] = vm.counters
        print(f"{mode:<10} {c['d2h_copies']:>11} {c['d2h_bytes']:>14,} {c['syncs']:>6} "
              f"{c['modelled_transfer_s'] * 1e3:>15.3f} ms  {'yes' if correct else 'NO'}")
        if not correct:
            raise SystemExit("demo: results differ from numpy")
    saved = rows["per-op"]["d2h_bytes"] / max(rows["per-input"]["d2h_bytes"], 1)
    print(f"\nper-input masks copy {saved:,.0f}x fewer bytes device-to-host "
          f"(only begin/end/strides: {rows['per-input']['d2h_bytes']} bytes).")


if __name__ == "__main__":
    main()
