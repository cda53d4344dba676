"""Lowering of data-dependent ops alone (compiler/passes/lower_dynamic.py), for
what its end-to-end tests do not reach: a concat whose inputs' sizes are
symbolically unrelated goes through the one concat kernel
(``kernels.concat.sequential_concat``)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import shapefn
from shapefn.compiler.passes.lower_dynamic import lower_dynamic_ops


@I.ir_module
class Unrelated:
    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), y: R.Tensor(("k", "p"), "float32")):
        z = R.concat((x, y), axis=0)
        return z


def test_concat_of_unrelated_sizes_calls_the_linear_concat_kernel():
    lowered = lower_dynamic_ops(Unrelated, False)
    kernels = [gv.name_hint for gv in lowered.functions if gv.name_hint != "main"]
    assert kernels == ["shapefn_concat_2x2d_0_float32"]
    (binding,) = lowered["main"].body.blocks[0].bindings
    assert isinstance(binding.value, relax.Call) and binding.value.op.name == "relax.call_tir"


def test_concat_of_unrelated_sizes_runs_and_checks_the_other_sizes():
    vm = shapefn.VirtualMachine(shapefn.compile(Unrelated, "sim"), shapefn.sim(strict=True))
    rng = np.random.default_rng(0)
    x, y = rng.random((2, 3), np.float32), rng.random((4, 3), np.float32)
    np.testing.assert_array_equal(vm["main"](x, y).numpy(), np.concatenate([x, y]))
    # The sizes off the axis must agree at run time (Relax and ONNX require it).
    with pytest.raises(ValueError, match="Mismatched x1.shape"):
        vm["main"](x, rng.random((4, 5), np.float32))
