"""Compile-time evaluation of kernels on constants (through the kernel
cache), against TVM's own FoldConstant and TVM's Relax VM."""
import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import shapefn
from conftest import DEVICES, opencl, run_on_devices
from shapefn.compiler.machine_code import kernel_cache
from shapefn.compiler.passes.fold_constants import fold_constant_kernels
from shapefn.compiler.passes.legalize import legalize_map


@pytest.fixture
def cache_dir(tmp_path):
    shapefn.set_cache_dir(tmp_path)
    yield tmp_path
    shapefn.set_cache_dir(None)


def weights_module():
    """``x + reshape(exp(c1 * c2))`` plus a constant only a later fold reads
    through a variable, and a constant-shaped op that stays (it reads x)."""
    rng = np.random.default_rng(0)
    c1, c2, c3 = (relax.const(rng.standard_normal(4).astype("float32")) for _ in range(3))
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            c3_var = bb.emit(c3)
            w = bb.emit(relax.op.exp(relax.op.multiply(c1, c2)))
            w = bb.emit(relax.op.reshape(relax.op.add(w, c3_var), [1, 4]))
            out = bb.emit_output(relax.op.add(x, w))
        bb.emit_func_output(out)
    return bb.get()


def legalized(mod):
    return tvm.transform.Sequential([
        relax.transform.LegalizeOps(customize_legalize_map=legalize_map()),
        relax.transform.AnnotateTIROpPattern(),
    ])(mod)


def test_same_module_as_tvm_fold_constant(cache_dir):
    mod = legalized(weights_module())
    ours = relax.transform.FoldConstant()(fold_constant_kernels(mod))
    tvms = relax.transform.FoldConstant()(mod)
    tvm.ir.assert_structural_equal(ours, tvms)  # constants compared by content
    calls = [b.value for b in ours["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]
    assert len(calls) == 1  # only the add that reads x is left


def test_fold_kernels_come_from_the_cache(cache_dir):
    mod = legalized(weights_module())
    before = kernel_cache.stats()
    fold_constant_kernels(mod)
    middle = kernel_cache.stats()
    fold_constant_kernels(mod)
    after = kernel_cache.stats()
    assert middle.misses - before.misses == 4  # multiply, exp, add, reshape
    assert after.misses == middle.misses


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_program_matches_relax_vm(cache_dir, device):
    mod = weights_module()
    x = np.random.default_rng(1).standard_normal((3, 4)).astype("float32")
    exe = shapefn.compile(mod, device)
    got = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)(x).numpy()
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    np.testing.assert_allclose(got, vm["main"](tvm.runtime.tensor(x)).numpy(), rtol=1e-6, atol=1e-6)


@opencl
def test_folded_program_counts_the_same_on_sim_and_opencl(cache_dir):
    """Everything but the add that reads x is folded: one kernel call on
    either device."""
    x = np.random.default_rng(2).standard_normal((5, 4)).astype("float32")
    results = run_on_devices(weights_module(), [[x]])  # asserts the counters equal
    for device, [(got, counters)] in results.items():
        assert counters["kernel_calls"] == 1, device
        np.testing.assert_allclose(got, results["sim"][0][0], rtol=1e-6, atol=1e-6)
