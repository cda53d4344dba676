"""shapefn's legalizations that replace TVM's, against numpy and TVM's Relax
VM, run on a strict sim and on a real OpenCL device (where the GPU forms of
concat and scatter run)."""
import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import shapefn
from conftest import DEVICES, device_target, opencl, run_on_devices
from shapefn.compiler.compile import lower
from shapefn.compiler.passes.legalize import SEQUENTIAL_CONCAT_MAX_INPUTS, SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS
from shapefn.compiler.passes.lower_dynamic import lower_dynamic_ops
from shapefn.compiler.schedules import target_schedule


def relax_vm(mod, *args):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def vm_device(device):
    """The VM's device for ``device``: a strict sim (host reads of device
    memory fault there), else the device itself."""
    return shapefn.sim(strict=True) if device == "sim" else device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("count, ndim, axis", [
    (SEQUENTIAL_CONCAT_MIN_SYMBOLIC_INPUTS, 2, 0),
    (SEQUENTIAL_CONCAT_MAX_INPUTS + 1, 2, 1),
    (3 * SEQUENTIAL_CONCAT_MAX_INPUTS - 2, 1, 0),
])
def test_concat_of_many_symbolic_inputs(count, ndim, axis, device):
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
    target = device_target(device)  # the GPU forms on opencl
    lowered = lower(lower_dynamic_ops(mod, target_schedule.is_gpu(target)), target)
    kernels = {gv.name_hint: f for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)}
    assert not any(name.startswith("concatenate") for name in kernels)  # TVM's legalization's name
    assert max(len(f.params) for f in kernels.values()) <= SEQUENTIAL_CONCAT_MAX_INPUTS + 1  # and the output
    rng = np.random.default_rng(count)
    extents = [k % 3 for k in range(count)]
    extents.insert(1, 2)
    args = [rng.standard_normal([e, 3][:ndim] if axis == 0 else [3, e]).astype("float32") for e in extents]
    exe = shapefn.compile(mod, device)
    got = shapefn.VirtualMachine(exe, vm_device(device))(*args).numpy()
    np.testing.assert_array_equal(got, np.concatenate(args, axis=axis))
    np.testing.assert_array_equal(got, relax_vm(mod, *args))


def numpy_scatter_elements(data, indices, updates, axis, reduction):
    """ONNX ScatterElements, element by element in row-major order."""
    out = data.copy()
    for p in np.ndindex(*indices.shape):
        target = list(p)
        k = int(indices[p])
        target[axis] = k + data.shape[axis] if k < 0 else k
        target = tuple(target)
        old, new = out[target], updates[p]
        out[target] = {"update": new, "add": old + new, "mul": old * new, "mean": (old + new) / 2,
                       "min": min(old, new), "max": max(old, new)}[reduction]
    return out


def scatter_module(data_shape, index_shape, axis, reduction, index_dtype):
    data = relax.Var("data", relax.TensorType(data_shape, "float32"))
    indices = relax.Var("indices", relax.TensorType(index_shape, index_dtype))
    updates = relax.Var("updates", relax.TensorType(index_shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [data, indices, updates]):
        bb.emit_func_output(bb.emit(relax.op.scatter_elements(data, indices, updates, axis, reduction)))
    return bb.get()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["update", "add", "mul", "mean", "min", "max"])
@pytest.mark.parametrize("data_shape, index_shape, axis, index_dtype", [
    ((6, 4, 3, 2), (5, 4, 3, 2), 0, "int64"),  # Faster R-CNN's case: symbolic 4-d along axis 0
    ((3, 7, 2), (3, 4, 2), -2, "int32"),
    ((9,), (5,), 0, "int64"),
])
def test_scatter_elements(reduction, data_shape, index_shape, axis, index_dtype, device):
    """Symbolic sizes, negative and repeated indices, against numpy's ONNX
    semantics and TVM's Relax VM."""
    rng = np.random.default_rng(len(data_shape))
    data = rng.standard_normal(data_shape).astype("float32")
    extent = data_shape[axis]
    indices = rng.integers(-extent, extent, index_shape).astype(index_dtype)
    updates = rng.standard_normal(index_shape).astype("float32")
    ndim = len(data_shape)
    symbolic = [[tirx.Var(f"{prefix}{a}", "int64") for a in range(ndim)] for prefix in "di"]
    exe = shapefn.compile(scatter_module(*symbolic, axis, reduction, index_dtype), device)
    got = shapefn.VirtualMachine(exe, vm_device(device))(data, indices, updates).numpy()
    want = numpy_scatter_elements(data, indices, updates, axis % ndim, reduction)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # TVM's own kernel, compiled for these static shapes (symbolic ones take it minutes).
    static = scatter_module(data_shape, index_shape, axis, reduction, index_dtype)
    np.testing.assert_allclose(got, relax_vm(static, data, indices, updates), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_elements_indices_narrower_than_data(device):
    """ONNX allows indices smaller than the data in every dimension; TVM's
    kernel misplaces updates when, as here, one of them is neither the
    first, the axis nor the one after it (so it is not compared)."""
    rng = np.random.default_rng(9)
    data = rng.standard_normal((2, 3, 4)).astype("float32")
    indices = rng.integers(-2, 2, (2, 3, 2))
    updates = rng.standard_normal((2, 3, 2)).astype("float32")
    symbolic = [[tirx.Var(f"{prefix}{a}", "int64") for a in range(3)] for prefix in "di"]
    exe = shapefn.compile(scatter_module(*symbolic, 0, "add", "int64"), device)
    got = shapefn.VirtualMachine(exe, vm_device(device))(data, indices, updates).numpy()
    np.testing.assert_allclose(got, numpy_scatter_elements(data, indices, updates, 0, "add"), rtol=1e-6)


@opencl
def test_concat_and_scatter_count_the_same_on_sim_and_opencl():
    rng = np.random.default_rng(5)
    n = [tirx.Var(f"n{k}", "int64") for k in range(SEQUENTIAL_CONCAT_MAX_INPUTS + 2)]
    params = [relax.Var(f"x{k}", relax.TensorType([s, 3], "float32")) for k, s in enumerate(n)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        bb.emit_func_output(bb.emit(relax.op.concat(params, axis=0)))
    pieces = [rng.standard_normal((k % 3, 3)).astype("float32") for k in range(len(n))]
    concat = run_on_devices(bb.get(), [pieces])
    for device, [(got, _)] in concat.items():
        np.testing.assert_array_equal(got, np.concatenate(pieces), err_msg=device)

    symbolic = [[tirx.Var(f"{prefix}{a}", "int64") for a in range(2)] for prefix in "di"]
    data = rng.standard_normal((6, 4)).astype("float32")
    calls = [[data, rng.integers(-6, 6, shape), rng.standard_normal(shape).astype("float32")]
             for shape in [(5, 4), (0, 4)]]
    scatter = run_on_devices(scatter_module(*symbolic, 0, "add", "int64"), calls)
    for device, runs in scatter.items():
        for args, (got, _) in zip(calls, runs, strict=True):
            np.testing.assert_allclose(got, numpy_scatter_elements(*args, 0, "add"), rtol=1e-6, err_msg=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, descending, dtype", [("sort", False, "float32"), ("sort", True, "int32"),
                                                   ("argsort", False, "float32"), ("argsort", True, "float32"),
                                                   ("argsort", False, "int64")])
def test_sort_and_argsort_are_stable_and_match_tvms_vm(op, descending, dtype, device):
    """``relax.sort`` / ``relax.argsort`` (no legalization of TVM's: its
    pipeline calls a packed function of its runtime) over a symbolic extent,
    with ties, on sim, host and opencl, against numpy's stable sort and
    TVM's Relax VM; and scheduled on GPU threads for CUDA."""
    from conftest import assert_parallel_on_gpus, relax_main, sym

    def body(bb, x):
        if op == "sort":
            return bb.emit(relax.op.sort(x, axis=1, descending=descending))
        return bb.emit(relax.op.argsort(x, axis=1, descending=descending, dtype="int32"))

    mod = relax_main([("x", [3, sym("n")], dtype)], body)
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, size=(3, 9)).astype(dtype)  # (ties in every row)
    order = np.argsort(-x if descending else x, axis=1, kind="stable")
    expected = np.take_along_axis(x, order, 1) if op == "sort" else order.astype("int32")
    for name in [device, *(["host"] if device == "sim" else [])]:
        got = shapefn.VirtualMachine(shapefn.compile(mod, name), vm_device(name))(x).numpy()
        np.testing.assert_array_equal(got, expected, err_msg=name)
    np.testing.assert_array_equal(relax_vm(mod, x), expected)
    if device == "sim":
        assert_parallel_on_gpus(mod)
