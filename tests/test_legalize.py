"""shapefn's legalizations that replace TVM's, against numpy and TVM's Relax VM."""
import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import shapefn
from shapefn.compiler import lower
from shapefn.compiler.lower_dynamic import lower_dynamic_ops
from shapefn.compiler.legalize import SEQUENTIAL_CONCAT_MAX_INPUTS, SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS


def relax_vm(mod, *args):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


@pytest.mark.parametrize("count, ndim, axis", [
    (SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS, 2, 0),
    (SEQUENTIAL_CONCAT_MAX_INPUTS + 1, 2, 1),
    (3 * SEQUENTIAL_CONCAT_MAX_INPUTS - 2, 1, 0),
])
def test_concat_of_many_symbolic_inputs(count, ndim, axis):
    """Concats that shapefn legalizes as sequential copies (in a tree past
    SEQUENTIAL_CONCAT_MAX_INPUTS inputs), including empty inputs."""
    # ``count`` inputs of symbolic extent and one (the second) of static extent.
    sizes = [tirx.Var(f"n{k}", "int64") for k in range(count)]
    sizes.insert(1, 2)
    params = [relax.Var(f"x{k}", relax.TensorType([s, 3][:ndim] if axis == 0 else [3, s], "float32"))
              for k, s in enumerate(sizes)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(relax.op.concat(params, axis=axis)))
    mod = bb.get()
    lowered = lower(lower_dynamic_ops(mod))
    kernels = {gv.name_hint: f for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)}
    assert not any(name.startswith("concatenate") for name in kernels)  # TVM's legalization's name
    assert max(len(f.params) for f in kernels.values()) <= SEQUENTIAL_CONCAT_MAX_INPUTS + 1  # and the output
    rng = np.random.default_rng(count)
    extents = [k % 3 for k in range(count)]
    extents.insert(1, 2)
    args = [rng.standard_normal([e, 3][:ndim] if axis == 0 else [3, e]).astype("float32") for e in extents]
    exe = shapefn.compile(mod, "sim")
    got = shapefn.VirtualMachine(exe, shapefn.sim(strict=True))(*args).numpy()
    np.testing.assert_array_equal(got, np.concatenate(args, axis=axis))
    np.testing.assert_array_equal(got, relax_vm(mod, *args))
