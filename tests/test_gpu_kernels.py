"""GPU forms of the hand-written TIR kernels (``compiler.kernels.gpu``) on a
real OpenCL device, against their CPU forms (bit for bit) and numpy: ties,
repeated indices, empty inputs and sizes spanning many work groups; and
their device code for CUDA (built, not run: no GPU here)."""
import os
import tempfile

import numpy as np
import pytest
import tvm

from conftest import opencl
from shapefn.compiler import hand_built as kernels
from shapefn.compiler.kernels import concat, scatter
from shapefn.compiler.kernels import count as count_kernels
from shapefn.compiler.kernels import dynamic as dyn_kernels
from shapefn.compiler.kernels import gpu as gpu_kernels
from shapefn.compiler.passes import index_checks

OPENCL = tvm.target.Target("opencl", host="llvm")


def gpu_build(funcs: dict):
    """``{name: PrimFunc}`` built for OpenCL, exported and loaded back
    (through shapefn's OpenCL module loader, where there is a device)."""
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    built = tvm.tirx.build(mod, OPENCL)
    if not tvm.opencl(0).exist:
        return built  # (the OpenCL tests skip; the fixture must still build)
    with tempfile.TemporaryDirectory(prefix="shapefn-gpu-kernels-") as directory:
        path = os.path.join(directory, "kernels.so")
        built.export_library(path)
        return tvm.runtime.load_module(path)


def gpu_call(func, *arrays):
    """Runs ``func`` on OpenCL device 0 over copies of ``arrays``; returns
    every argument read back."""
    dev = tvm.opencl(0)
    tensors = [tvm.runtime.tensor(a, device=dev) for a in arrays]
    func(*tensors)
    return [t.numpy() for t in tensors]


def cpu_call(func, *arrays):
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    func(*tensors)
    return [t.numpy() for t in tensors]


def both(name, gpu_lib, cpu_lib, *arrays):
    """The arguments after the GPU and the CPU form ran on the same inputs."""
    return gpu_call(gpu_lib[name], *arrays), cpu_call(cpu_lib[name], *arrays)


# --------------------------------------------------------------------------- topk
TOPK = {  # name: (ndim, axis, dtype, largest)
    "f32_last": (2, 1, "float32", True),
    "f32_first_smallest": (2, 0, "float32", False),
    "i64_middle": (3, 1, "int64", True),
}


@pytest.fixture(scope="module")
def topk_libs():
    def forms(module):
        return {name: module.topk(ndim, axis, dtype, largest)
                for name, (ndim, axis, dtype, largest) in TOPK.items()}
    return gpu_build(forms(gpu_kernels)), kernels.build(forms(dyn_kernels))


@opencl
@pytest.mark.parametrize("name, shape, ks", [
    ("f32_last", (3, 10), [1, 3, 10]),
    ("f32_last", (2, 1000), [1, 7, 256, 300, 999, 1000]),  # k above the work-group size
    ("f32_last", (1, 20000), [5, 600]),  # a long row: many merge rounds
    ("f32_first_smallest", (517, 3), [1, 100, 517]),
    ("i64_middle", (2, 300, 4), [2, 64, 300]),
    ("f32_last", (0, 5), [2]),  # no rows
    ("f32_last", (4, 6), [0]),
])
def test_topk_matches_the_cpu_form_and_numpy(topk_libs, rng, name, shape, ks):
    ndim, axis, dtype, largest = TOPK[name]
    # Few distinct values: ties everywhere, broken by the lower index.
    data = rng.integers(0, max(shape[axis] // 4, 2), shape).astype(dtype)
    for k in ks:
        out_shape = list(shape)
        out_shape[axis] = k
        gpu, cpu = both(name, *topk_libs, data, np.zeros(out_shape, dtype), np.zeros(out_shape, "int64"))
        np.testing.assert_array_equal(gpu[1], cpu[1], err_msg=f"values {k=}")
        np.testing.assert_array_equal(gpu[2], cpu[2], err_msg=f"indices {k=}")
        order = np.argsort(-data if largest else data, axis=axis, kind="stable")
        want = np.take(order, np.arange(k), axis=axis)
        np.testing.assert_array_equal(gpu[2], want)
        np.testing.assert_array_equal(gpu[1], np.take_along_axis(data, want, axis=axis))


@opencl
def test_topk_of_distinct_floats(topk_libs, rng):
    data = rng.standard_normal((3, 5000)).astype("float32")
    gpu, cpu = both("f32_last", *topk_libs, data, np.zeros((3, 777), "float32"),
                    np.zeros((3, 777), "int64"))
    np.testing.assert_array_equal(gpu[1], cpu[1])
    np.testing.assert_array_equal(gpu[2], cpu[2])


# --------------------------------------------------------------------------- nonzero
NONZERO = {"f32_1d": (1, "float32"), "i32_3d": (3, "int32"), "bool_2d": (2, "bool")}


@pytest.fixture(scope="module")
def nonzero_lib():
    return gpu_build({name: gpu_kernels.nonzero(*args) for name, args in NONZERO.items()})


def compact_nonzero(func, data, upper=None):
    """The exact ``[ndim, count]`` result read from the front of the output."""
    upper = data.size if upper is None else upper
    _, out, count = gpu_call(func, data, np.full((data.ndim, upper), -1, "int64"), np.zeros(1, "int64"))
    count = int(count[0])
    return out.reshape(-1)[:data.ndim * count].reshape(data.ndim, count)


@opencl
@pytest.mark.parametrize("name, shape", [
    ("f32_1d", (17,)), ("f32_1d", (1,)), ("f32_1d", (0,)), ("f32_1d", (1024,)), ("f32_1d", (100_003,)),
    ("i32_3d", (2, 3, 4)), ("i32_3d", (3, 0, 2)), ("i32_3d", (7, 33, 41)),
    ("bool_2d", (6, 7)), ("bool_2d", (130, 257)),
])
def test_nonzero_matches_numpy(nonzero_lib, rng, name, shape):
    dtype = NONZERO[name][1]
    sparse = (rng.random(shape) < 0.3) * rng.integers(1, 5, shape)
    for data in [sparse.astype(dtype), np.zeros(shape, dtype), np.ones(shape, dtype)]:
        got = compact_nonzero(nonzero_lib[name], data)
        np.testing.assert_array_equal(got, np.array(np.nonzero(data)).reshape(data.ndim, -1))


@opencl
def test_nonzero_larger_upper_bound_keeps_the_result_at_the_front(nonzero_lib):
    data = np.array([[0, 3, 0], [2, 0, 1]], "int32")[None]
    np.testing.assert_array_equal(compact_nonzero(nonzero_lib["i32_3d"], data, upper=50),
                                  np.array(np.nonzero(data)))


@opencl
def test_nonzero_rejects_an_output_smaller_than_the_data(nonzero_lib):
    with pytest.raises(Exception, match="smaller than data"):
        gpu_call(nonzero_lib["f32_1d"], np.ones(5, "float32"), np.zeros((1, 4), "int64"), np.zeros(1, "int64"))


# --------------------------------------------------------------------------- unique
UNIQUE = {"float32": ("float32", 1), "int64_2d": ("int64", 2)}


@pytest.fixture(scope="module")
def unique_libs():
    def forms(module):
        return {name: module.unique(*args) for name, args in UNIQUE.items()}
    return gpu_build(forms(gpu_kernels)), kernels.build(forms(count_kernels))


@opencl
@pytest.mark.parametrize("name, data", [
    ("float32", np.array([2.5, -1, -1, 3, 2.5, 0, 7, -1], "float32")),
    ("float32", np.array([4.0], "float32")),
    ("float32", np.full(9, 1.5, "float32")),
    ("float32", np.array([0.0, -0.0, 1.0, -0.0], "float32")),  # equal zeros: the first one's sign
    ("float32", np.arange(3000, 0, -1).astype("float32")),
    ("float32", np.random.default_rng(1).standard_normal(5000).round(1).astype("float32")),
    ("int64_2d", np.random.default_rng(3).integers(-4, 5, (6, 7))),
    ("int64_2d", np.random.default_rng(4).integers(0, 300, (70, 90))),
    ("int64_2d", np.zeros((0, 3), "int64")),
])
def test_unique_matches_the_cpu_form(unique_libs, name, data):
    numel = data.size
    gpu, cpu = both(name, *unique_libs, data, np.zeros(numel, data.dtype), np.zeros(numel, "int64"),
                    np.zeros(numel, "int64"), np.zeros(numel, "int64"), np.zeros(1, "int64"))
    assert gpu[5][0] == cpu[5][0]
    u = int(gpu[5][0])
    for g, c in zip(gpu[1:5], cpu[1:5], strict=True):
        g, c = (g, c) if g.size == numel and len(g) != u else (g[:u], c[:u])
        np.testing.assert_array_equal(g.view(np.uint8), c.view(np.uint8))  # bitwise (signed zeros)
    values, first, inverse, counts = np.unique(data.reshape(-1), return_index=True, return_inverse=True,
                                               return_counts=True)
    np.testing.assert_array_equal(gpu[1][:u], values)
    np.testing.assert_array_equal(gpu[2][:u], first)
    np.testing.assert_array_equal(gpu[3], inverse.reshape(-1))
    np.testing.assert_array_equal(gpu[4][:u], counts)


UNIQUE_SLICES = {"f32_sorted": ("float32", True), "i64_first": ("int64", False), "i64_sorted": ("int64", True)}


@pytest.fixture(scope="module")
def unique_slices_libs():
    def forms(module):
        return {name: module.unique_slices(*args) for name, args in UNIQUE_SLICES.items()}
    return gpu_build(forms(gpu_kernels)), kernels.build(forms(count_kernels))


def numpy_unique_rows(data, is_sorted):
    """np.unique along axis 0 (values, first indices, inverse, counts), in
    first-occurrence order when not ``is_sorted`` (ONNX's sorted=0)."""
    values, first, inverse, counts = np.unique(data, axis=0, return_index=True, return_inverse=True,
                                               return_counts=True)
    inverse = inverse.reshape(-1)
    if not is_sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values, first, counts, inverse = values[order], first[order], counts[order], rank[inverse]
    return values, first, inverse, counts


@opencl
@pytest.mark.parametrize("name, data", [
    ("i64_sorted", np.random.default_rng(5).integers(0, 3, (40, 2))),
    ("i64_first", np.random.default_rng(5).integers(0, 3, (40, 2))),
    ("i64_first", np.random.default_rng(6).integers(0, 2, (700, 3))),  # several work groups and tiles
    ("i64_sorted", np.full((5, 4), 7, "int64")),
    ("i64_sorted", np.zeros((0, 3), "int64")),
    ("i64_first", np.arange(12, dtype="int64").reshape(12, 1)[::-1].copy()),
    ("f32_sorted", np.random.default_rng(7).standard_normal((300, 2)).round(0).astype("float32")),
])
def test_unique_slices_match_the_cpu_form_and_numpy(unique_slices_libs, name, data):
    rows, width = data.shape
    gpu, cpu = both(name, *unique_slices_libs, data, np.zeros_like(data), np.zeros(rows, "int64"),
                    np.zeros(rows, "int64"), np.zeros(rows, "int64"), np.zeros(1, "int64"))
    u = int(gpu[5][0])
    assert u == int(cpu[5][0])
    for g, c in zip([gpu[1][:u], gpu[2][:u], gpu[3], gpu[4][:u]], [cpu[1][:u], cpu[2][:u], cpu[3], cpu[4][:u]]):
        np.testing.assert_array_equal(g.view(np.uint8), c.view(np.uint8))
    want = numpy_unique_rows(data, UNIQUE_SLICES[name][1])
    for got, expected in zip([gpu[1][:u], gpu[2][:u], gpu[3], gpu[4][:u]], want, strict=True):
        np.testing.assert_array_equal(got, expected)


# --------------------------------------------------------------------------- NMS
@pytest.fixture(scope="module")
def nms_libs():
    def forms(module):
        return {"corners": module.non_max_suppression(0), "centers": module.non_max_suppression(1)}
    return gpu_build(forms(gpu_kernels)), kernels.build(forms(count_kernels))


def random_boxes(rng, batches, boxes, center_point_box):
    """Overlapping boxes; corner boxes list their corners in either order."""
    if center_point_box:
        centers = rng.uniform(0, 4, (batches, boxes, 2))
        sizes = rng.uniform(0.5, 3, (batches, boxes, 2))
        return np.concatenate([centers, sizes], axis=2).astype("float32")
    a = rng.uniform(0, 4, (batches, boxes, 2))
    b = a + rng.uniform(-3, 3, (batches, boxes, 2))
    return np.concatenate([a, b], axis=2).astype("float32")


@opencl
@pytest.mark.parametrize("name, center_point_box", [("corners", 0), ("centers", 1)])
@pytest.mark.parametrize("batches, classes, boxes", [
    (1, 1, 6), (2, 3, 25), (1, 2, 1), (1, 2, 700), (1, 3, 0), (2, 2, 3000),
])
def test_nms_matches_the_cpu_form(nms_libs, rng, name, center_point_box, batches, classes, boxes):
    gpu_lib, cpu_lib = nms_libs
    box_data = random_boxes(rng, batches, boxes, center_point_box)
    # Scores on a coarse grid so that ties (broken by box index) occur.
    scores = (rng.integers(0, 10, (batches, classes, boxes)) / 10).astype("float32")
    for max_out, iou, score_threshold in [(100, 0.5, 0.0), (100, 0.2, 0.0), (3, 0.3, 0.25),
                                          (1, 0.0, 0.5), (0, 0.5, 0.0), (100, 1.0, 0.95),
                                          (5, 0.5, 2.0), (10_000, 0.7, 0.05)]:
        args = [box_data, scores, np.array([max_out], "int64"), np.array([iou], "float32"),
                np.array([score_threshold], "float32"),
                np.full((max(batches * classes * boxes, 1), 3), -1, "int64"), np.zeros(1, "int64")]
        gpu, cpu = both(name, gpu_lib, cpu_lib, *args)
        assert gpu[6][0] == cpu[6][0], f"{max_out=} {iou=} {score_threshold=}"
        np.testing.assert_array_equal(gpu[5][:int(gpu[6][0])], cpu[5][:int(cpu[6][0])],
                                      err_msg=f"{max_out=} {iou=} {score_threshold=}")


@opencl
def test_nms_stops_at_the_upper_bound(nms_libs, rng):
    gpu_lib, cpu_lib = nms_libs
    box_data = random_boxes(rng, 2, 10, 0)
    scores = rng.random((2, 2, 10)).astype("float32")
    args = [box_data, scores, np.array([10], "int64"), np.array([0.5], "float32"),
            np.array([0.0], "float32")]
    full = gpu_call(gpu_lib["corners"], *args, np.full((40, 3), -1, "int64"), np.zeros(1, "int64"))
    assert full[6][0] > 4
    gpu, cpu = both("corners", gpu_lib, cpu_lib, *args, np.full((4, 3), -1, "int64"), np.zeros(1, "int64"))
    assert gpu[6][0] == cpu[6][0] == 4
    np.testing.assert_array_equal(gpu[5], full[5][:4])
    np.testing.assert_array_equal(gpu[5], cpu[5])


# --------------------------------------------------------------------------- concat
CONCAT = {  # name: (num_inputs, ndim, axis, dtype)
    "three_rows": (3, 2, 1, "float32"),
    "two_first": (2, 3, 0, "int64"),
    "four_middle": (4, 3, 1, "float32"),
}


@pytest.fixture(scope="module")
def concat_lib():
    return gpu_build({name: gpu_kernels.sequential_concat(*args) for name, args in CONCAT.items()})


@opencl
@pytest.mark.parametrize("name, dims, extents", [
    ("three_rows", (3, None), (2, 0, 5)),
    ("three_rows", (300, None), (1, 1000, 7)),
    ("two_first", (None, 5, 4), (0, 0)),
    ("two_first", (None, 70, 9), (3, 400)),
    ("four_middle", (2, None, 129), (5, 1, 0, 300)),
    ("four_middle", (0, None, 3), (5, 1, 0, 3)),
])
def test_sequential_concat_matches_numpy(concat_lib, rng, name, dims, extents):
    _, _, axis, dtype = CONCAT[name]
    inputs = []
    for n in extents:
        shape = list(dims)
        shape[axis] = n
        inputs.append(rng.integers(-100, 100, shape).astype(dtype))
    want = np.concatenate(inputs, axis=axis)
    *_, got = gpu_call(concat_lib[name], *inputs, np.zeros(want.shape, dtype))
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- scatter
SCATTER = {  # name: (ndim, axis, reduction, dtype, index_dtype)
    "update_1d": (1, 0, "update", "float32", "int64"),
    "add_rows": (2, 1, "add", "float32", "int64"),
    "add_cols": (2, 0, "add", "float32", "int32"),
    "mul": (2, 1, "mul", "float32", "int64"),
    "mean": (2, 0, "mean", "float32", "int64"),
    "min_3d": (3, 1, "min", "int64", "int64"),
    "max_3d": (3, 2, "max", "float32", "int32"),
    "update_4d": (4, 1, "update", "float32", "int64"),
}


def checked(func):
    """A kernel with its index checks written out (as a compile does) and
    its check site fixed to 0: it takes a check record after its own arguments."""
    func = index_checks.materialize(func)
    return func.specialize({func.params[-1]: tvm.tirx.const(0, "int64")})


@pytest.fixture(scope="module")
def scatter_libs():
    def forms(module):
        return {name: checked(module.scatter_elements(*args)) for name, args in SCATTER.items()}
    return gpu_build(forms(gpu_kernels)), kernels.build(forms(scatter))


def numpy_scatter(data, indices, updates, axis, reduction):
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


@opencl
@pytest.mark.parametrize("name, data_shape, index_shape", [
    ("update_1d", (10,), (25,)),  # every index repeats: the last update wins
    ("update_1d", (5,), (0,)),
    ("update_1d", (1000,), (3000,)),
    ("add_rows", (300, 7), (300, 40)),  # more lines than a work group
    ("add_cols", (6, 500), (20, 450)),
    ("mul", (4, 5), (3, 9)),
    ("mean", (5, 3), (12, 2)),  # indices narrower than the data off the axis
    ("min_3d", (3, 4, 5), (2, 9, 3)),
    ("max_3d", (3, 4, 5), (3, 4, 11)),
    ("update_4d", (2, 6, 3, 4), (2, 20, 2, 4)),
    ("add_rows", (3, 1), (3, 500)),  # 500 float additions into each element: order shows
    ("add_rows", (0, 7), (0, 3)),
])
def test_scatter_elements_matches_the_cpu_form(scatter_libs, rng, name, data_shape, index_shape):
    _, axis, reduction, dtype, index_dtype = SCATTER[name]
    data = rng.integers(-5, 6, data_shape).astype(dtype)
    d = data_shape[axis]
    indices = rng.integers(-d, d, index_shape).astype(index_dtype)  # negative from the end
    updates = (rng.standard_normal(index_shape) if dtype.startswith("float")
               else rng.integers(-20, 21, index_shape)).astype(dtype)
    record = np.zeros(index_checks.RECORD_WORDS, np.int64)
    gpu, cpu = both(name, *scatter_libs, data, indices, updates, np.zeros(data_shape, dtype), record)
    np.testing.assert_array_equal(gpu[3].view(np.uint8), cpu[3].view(np.uint8))
    assert not gpu[4].any() and not cpu[4].any()
    if data.size <= 2000 and indices.size <= 2000:
        np.testing.assert_array_equal(gpu[3], numpy_scatter(data, indices, updates, axis, reduction))


@opencl
@pytest.mark.parametrize("bad", [5, -6, 2**40, -(2**63)])
def test_scatter_elements_reports_an_index_out_of_range_and_writes_inside(scatter_libs, bad):
    """Both forms write the first index out of range into the check record
    (flag, site, index, bounds) and clamp it: nothing lands outside ``out``."""
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    indices = np.zeros((4, 2), np.int64)
    indices[2, 1] = bad
    updates = np.ones((4, 2), np.float32)
    record = np.zeros(index_checks.RECORD_WORDS, np.int64)
    gpu, cpu = both("mean", *scatter_libs, data, indices, updates, np.zeros((5, 3), np.float32), record)
    for form in (gpu, cpu):
        np.testing.assert_array_equal(form[4][:5], [1, 0, bad, -5, 5])


# --------------------------------------------------------------------------- device code
ALL_KERNELS = {
    "topk": lambda: gpu_kernels.topk(2, 1),
    "nonzero": lambda: gpu_kernels.nonzero(3, "float32"),
    "nonzero_1d": lambda: gpu_kernels.nonzero_1d("int32"),
    "unique": lambda: gpu_kernels.unique("float32"),
    "unique_slices": lambda: gpu_kernels.unique_slices("int64", False),
    "non_max_suppression": lambda: gpu_kernels.non_max_suppression(0),
    "sequential_concat": lambda: gpu_kernels.sequential_concat(3, 2, 1, "float32"),
    "scatter_elements": lambda: gpu_kernels.scatter_elements(2, 1, "add", "float32", "int64"),
}


@pytest.mark.parametrize("name", list(ALL_KERNELS))
@pytest.mark.parametrize("target", ["cuda", "opencl"])
def test_kernels_compile_to_device_code(name, target):
    func = index_checks.materialize(ALL_KERNELS[name]()).with_attr("global_symbol", name)
    lib = tvm.tirx.build(tvm.IRModule({name: func}), tvm.target.Target(target, host="llvm"))
    (device,) = lib.imports
    assert device.kind == target
    source = device.inspect_source()
    assert f"{name}_kernel" in source
    if target == "opencl" and name in ("topk", "non_max_suppression"):
        # Scratch exchanged through global memory: barriers fence it too.
        assert "barrier(3)" in source


def test_gpu_forms_have_the_cpu_forms_signatures():
    pairs = [
        (gpu_kernels.topk(3, 1, "int64", False), dyn_kernels.topk(3, 1, "int64", False)),
        (gpu_kernels.nonzero(2, "bool"), count_kernels.nonzero(2, "bool")),
        (gpu_kernels.unique("int64", 2), count_kernels.unique("int64", 2)),
        (gpu_kernels.unique_slices("float32", True), count_kernels.unique_slices("float32", True)),
        (gpu_kernels.non_max_suppression(1), count_kernels.non_max_suppression(1)),
        (gpu_kernels.sequential_concat(3, 2, 0, "float16"), concat.sequential_concat(3, 2, 0, "float16")),
        (gpu_kernels.scatter_elements(2, 1, "mean", "float32", "int32"),
         scatter.scatter_elements(2, 1, "mean", "float32", "int32")),
    ]
    for gpu, cpu in pairs:
        assert gpu.attrs.get("global_symbol") == cpu.attrs.get("global_symbol")
        assert len(gpu.params) == len(cpu.params)
        for gp, cp in zip(gpu.params, cpu.params, strict=True):
            assert (gp.name, str(gp.ty.dtype)) == (cp.name, str(cp.ty.dtype))
            assert [str(s) for s in gp.ty.shape] == [str(s) for s in cp.ty.shape]
