"""Kernels with symbolic sizes: each is compiled once and run at several
shapes, including empty results, against numpy or onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
import tvm
import tvm_ffi
from onnx import helper
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from shapefn.compiler.hand_built import build
from shapefn.compiler.kernels import dynamic as dyn_kernels
from shapefn.compiler.kernels import resize
from shapefn.compiler.passes.legalize import legalize_broadcast_to, legalize_resize2d


def run_onnx(op, inputs, num_outputs=1, **attrs):
    """Runs one ONNX node with onnxruntime; ``inputs`` is a list of
    ``(name, array)``, an array of None leaving that optional input out."""
    node = helper.make_node(op, [n if v is not None else "" for n, v in inputs],
                            [f"y{i}" for i in range(num_outputs)], **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in inputs if v is not None],
        [helper.make_empty_tensor_value_info(f"y{i}") for i in range(num_outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {n: v for n, v in inputs if v is not None})


def call(func, *arrays):
    """Calls a compiled kernel on numpy arrays (inputs and pre-allocated
    outputs alike); returns all of them as numpy arrays afterwards."""
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    func(*tensors)
    return [t.numpy() for t in tensors]


# --------------------------------------------------------------------------- topk
@pytest.fixture(scope="module")
def topk_lib():
    return build({
        "largest_last": dyn_kernels.topk(2, 1, "float32"),
        "smallest_first": dyn_kernels.topk(3, 0, "float32", largest=False),
        "largest_int": dyn_kernels.topk(3, -2, "int32"),
    })


@pytest.mark.parametrize("name, shape, axis, largest", [
    ("largest_last", (3, 7), 1, 1),
    ("largest_last", (1, 12), 1, 1),
    ("smallest_first", (9, 2, 3), 0, 0),
    ("smallest_first", (4, 1, 1), 0, 0),
    ("largest_int", (2, 6, 3), 1, 1),
    ("largest_last", (2, 1000), 1, 1),  # deep heaps: many replacements of the root
    ("smallest_first", (513, 2, 2), 0, 0),
])
def test_topk_matches_onnxruntime_with_ties(topk_lib, rng, name, shape, axis, largest):
    dtype = "int32" if name == "largest_int" else "float32"
    data = rng.integers(-3, 4, shape).astype(dtype)  # few distinct values: many ties
    n = shape[axis]
    for k in sorted({0, 1, 2, n // 3, n // 2, n - 1, n}):
        out_shape = list(shape)
        out_shape[axis] = k
        _, values, indices = call(topk_lib[name], data, np.zeros(out_shape, dtype),
                                  np.zeros(out_shape, "int64"))
        ref_values, ref_indices = run_onnx("TopK", [("x", data), ("k", np.array([k], "int64"))],
                                           2, axis=axis, largest=largest, sorted=1)
        np.testing.assert_array_equal(values, ref_values)
        np.testing.assert_array_equal(indices, ref_indices)


def test_topk_rejects_values_and_indices_of_different_k(topk_lib):
    data = np.zeros((2, 5), "float32")
    with pytest.raises(Exception, match="shape"):
        call(topk_lib["largest_last"], data, np.zeros((2, 3), "float32"),
             np.zeros((2, 2), "int64"))


# --------------------------------------------------------------------------- tile
@pytest.fixture(scope="module")
def tile_lib():
    return build({"2to3": dyn_kernels.tile(2, 3, "float32"),
                  "1to1": dyn_kernels.tile(1, 1, "int64")})


@pytest.mark.parametrize("name, in_shape, reps", [
    ("2to3", (2, 3), (2, 1, 3)),
    ("2to3", (1, 4), (1, 3, 2)),
    ("2to3", (3, 2), (4, 0, 1)),
    ("1to1", (5,), (3,)),
    ("1to1", (4,), (0,)),
])
def test_tile_matches_numpy(tile_lib, rng, name, in_shape, reps):
    dtype = "int64" if name == "1to1" else "float32"
    data = rng.integers(0, 100, in_shape).astype(dtype)
    ref = np.tile(data, reps)
    _, out = call(tile_lib[name], data, np.zeros(ref.shape, dtype))
    np.testing.assert_array_equal(out, ref)


# --------------------------------------------------------------------------- arange
@pytest.fixture(scope="module")
def arange_lib():
    return build({"int64": dyn_kernels.arange("int64"),
                  "float32": dyn_kernels.arange("float32")})


@pytest.mark.parametrize("start, step, n", [(-3, 2, 5), (10, -3, 4), (7, 1, 0)])
def test_arange_integers_are_exact(arange_lib, start, step, n):
    start_t, step_t = np.array(start, "int64"), np.array(step, "int64")
    _, _, out = call(arange_lib["int64"], start_t, step_t, np.zeros(n, "int64"))
    np.testing.assert_array_equal(out, np.arange(start, start + n * step, step))


@pytest.mark.parametrize("start, step, n", [(0.5, 0.25, 9), (0.1, 0.3, 10), (2.0, -0.7, 6),
                                            (1.0, 1.0, 0)])
def test_arange_floats_compute_start_plus_i_times_step(arange_lib, start, step, n):
    start_t, step_t = np.array(start, "float32"), np.array(step, "float32")
    _, _, out = call(arange_lib["float32"], start_t, step_t, np.zeros(n, "float32"))
    np.testing.assert_array_equal(out, start_t + np.arange(n, dtype="float32") * step_t)
    np.testing.assert_allclose(out, np.arange(n) * step + start, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- resize2d
RESIZE_MODES = {
    "nearest_half_pixel": ("NCHW", "nearest", "half_pixel", "round_prefer_floor"),
    "nearest_asymmetric": ("NCHW", "nearest", "asymmetric", "floor"),
    "linear_half_pixel": ("NCHW", "linear", "half_pixel", "round_prefer_floor"),
    "linear_align_corners": ("NCHW", "linear", "align_corners", "round_prefer_floor"),
    "linear_asymmetric": ("NCHW", "linear", "asymmetric", "round_prefer_floor"),
    "cubic_half_pixel": ("NCHW", "cubic", "half_pixel", "round_prefer_floor"),
    "linear_nhwc": ("NHWC", "linear", "half_pixel", "round_prefer_floor"),
}


@pytest.fixture(scope="module")
def resize_lib():
    return build({name: resize.resize2d(*args) for name, args in RESIZE_MODES.items()})


@pytest.mark.parametrize("name", sorted(RESIZE_MODES))
def test_resize2d_matches_onnxruntime_at_many_sizes(resize_lib, rng, name):
    layout, method, coordinates, rounding = RESIZE_MODES[name]
    # Up- and down-sampling, non-integer ratios, size 1 (align_corners divides by
    # out - 1) and sizes where float rounding picks a different nearest pixel.
    for (h, w), (oh, ow) in [((4, 5), (8, 10)), ((5, 7), (3, 4)), ((3, 3), (7, 2)),
                             ((6, 2), (1, 1)), ((5, 6), (3, 5)), ((2, 3), (2, 3))]:
        if method == "cubic" and (oh < h or ow < w):
            continue  # onnxruntime's cubic only upsamples
        nchw = rng.standard_normal((2, 3, h, w)).astype("float32")
        sizes = [2, 3, oh, ow]
        ref = run_onnx("Resize", [("x", nchw), ("roi", None), ("scales", None),
                                  ("sizes", np.array(sizes, "int64"))],
                       mode=method, coordinate_transformation_mode=coordinates,
                       nearest_mode=rounding)[0]
        data = nchw
        if layout == "NHWC":
            data, ref = nchw.transpose(0, 2, 3, 1).copy(), ref.transpose(0, 2, 3, 1)
        _, out = call(resize_lib[name], data, np.zeros(ref.shape, "float32"))
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=f"{(h, w)}->{(oh, ow)}")


def test_resize2d_to_an_empty_image(resize_lib):
    data = np.ones((1, 2, 3, 3), "float32")
    _, out = call(resize_lib["linear_align_corners"], data, np.zeros((1, 2, 0, 4), "float32"))
    assert out.shape == (1, 2, 0, 4)


def test_resize2d_rejects_unsupported_modes():
    with pytest.raises(ValueError, match="tf_crop_and_resize"):
        resize.resize2d("NCHW", "linear", "tf_crop_and_resize")
    with pytest.raises(ValueError, match="layout"):
        resize.resize2d("NCHWc")


@I.ir_module
class ResizeModule:
    @R.function
    def main(x: R.Tensor((2, 3, "h", "w"), "float32"), s: R.Shape(ndim=2)):
        oh = T.int64()
        ow = T.int64()
        _ = R.match_cast(s, R.Shape([oh, ow]))
        y = R.image.resize2d(x, R.shape([oh, ow]), method="linear",
                             coordinate_transformation_mode="align_corners")
        return y


def test_legalize_resize2d_builds_and_runs_with_symbolic_sizes(rng):
    # TVM's own legalization of this op fails to build (see resize2d's docstring).
    legalize = relax.transform.LegalizeOps(
        customize_legalize_map={"relax.image.resize2d": legalize_resize2d})
    vm = relax.VirtualMachine(tvm.compile(legalize(ResizeModule), target="llvm"), tvm.cpu())
    for (h, w), (oh, ow) in [((4, 5), (7, 3)), ((2, 2), (1, 6))]:
        x = rng.standard_normal((2, 3, h, w)).astype("float32")
        y = vm["main"](tvm.runtime.tensor(x), tvm_ffi.Shape((oh, ow))).numpy()
        ref = run_onnx("Resize", [("x", x), ("roi", None), ("scales", None),
                                  ("sizes", np.array([2, 3, oh, ow], "int64"))],
                       mode="linear", coordinate_transformation_mode="align_corners")[0]
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- pad
@pytest.fixture(scope="module")
def pad_lib():
    return build({mode: dyn_kernels.pad(2, "float32", mode) for mode in ("constant", "edge", "reflect", "wrap")}
                 | {"constant_3d_int": dyn_kernels.pad(3, "int64")})


def numpy_pad(data, pads, mode, value):
    """ONNX Pad with numpy: crop for negative pads, then pad."""
    ndim = data.ndim
    begin, end = np.array(pads[:ndim]), np.array(pads[ndim:])
    crop = tuple(slice(max(-b, 0), data.shape[a] - max(-e, 0))
                 for a, (b, e) in enumerate(zip(begin, end, strict=True)))
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)]
    if mode == "constant":
        return np.pad(data[crop], width, mode="constant", constant_values=value)
    return np.pad(data[crop], width, mode=mode)


def out_shape(shape, pads):
    ndim = len(shape)
    return tuple(shape[a] + pads[a] + pads[a + ndim] for a in range(ndim))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("shape, pads", [
    ((3, 4), [1, 2, 2, 1]),
    ((5, 1), [0, 3, 4, 0]),
    ((4, 6), [-1, 2, 1, -3]),  # crop and pad on the same axis
    ((4, 5), [2, 0, 0, 0]),
])
def test_pad_matches_numpy_and_onnxruntime(pad_lib, rng, mode, shape, pads):
    data = rng.standard_normal(shape).astype("float32")
    value = np.array(2.5, "float32")
    pads_t = np.array(pads, "int64")
    ref = numpy_pad(data, pads, mode, value)
    _, _, _, out = call(pad_lib[mode], data, pads_t, value, np.zeros(ref.shape, "float32"))
    np.testing.assert_array_equal(out, ref)
    cropped = numpy_pad(data, [min(p, 0) for p in pads], "constant", 0)
    if mode != "wrap" and (mode != "reflect" or min(cropped.shape) >= 2):
        # onnxruntime refuses to reflect an axis shorter than 2 (numpy repeats it);
        # wrap is opset 19's (test_onnx_ops_dynamic compares it with onnxruntime).
        (ort_ref,) = run_onnx("Pad", [("x", data), ("pads", pads_t), ("value", value)], mode=mode)
        np.testing.assert_array_equal(out, ort_ref)


def test_pad_reflect_longer_than_the_data_repeats_like_numpy(pad_lib):
    data = np.arange(6, dtype="float32").reshape(2, 3)
    pads = [3, 7, 2, 4]
    ref = np.pad(data, [(3, 2), (7, 4)], mode="reflect")
    _, _, _, out = call(pad_lib["reflect"], data, np.array(pads, "int64"),
                        np.array(0, "float32"), np.zeros(ref.shape, "float32"))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("shape, pads", [
    ((2, 3, 4), [0, 1, 0, 1, -2, 2]),
    ((2, 3, 4), [0, -3, 0, 0, 0, 0]),  # cropped to nothing: empty output
    ((0, 2, 2), [1, 0, 0, 1, 0, 0]),   # empty input: all padding
])
def test_pad_constant_int_with_empty_shapes(pad_lib, rng, shape, pads):
    data = rng.integers(-9, 9, shape).astype("int64")
    value = np.array(-7, "int64")
    ref = numpy_pad(data, pads, "constant", value)
    assert ref.shape == out_shape(shape, pads)
    _, _, _, out = call(pad_lib["constant_3d_int"], data, np.array(pads, "int64"), value,
                        np.zeros(ref.shape, "int64"))
    np.testing.assert_array_equal(out, ref)


# --------------------------------------------------------------------------- broadcast_to
@I.ir_module
class BroadcastModule:
    @R.function
    def main(x: R.Tensor(("a", "b"), "float32"), s: R.Shape(ndim=3)):
        c = T.int64()
        a2 = T.int64()
        b2 = T.int64()
        _ = R.match_cast(s, R.Shape([c, a2, b2]))
        y = R.broadcast_to(x, R.shape([c, a2, b2]))
        return y


@pytest.fixture(scope="module")
def broadcast_vm():
    legalize = relax.transform.LegalizeOps(
        customize_legalize_map={"relax.broadcast_to": legalize_broadcast_to})
    ex = tvm.compile(legalize(BroadcastModule), target="llvm")
    return relax.VirtualMachine(ex, tvm.cpu())


@pytest.mark.parametrize("x_shape, target", [
    ((1, 4), (2, 3, 4)),   # a symbolic source dim equal to 1 broadcasts
    ((3, 4), (2, 3, 4)),
    ((3, 1), (1, 3, 5)),
    ((1, 1), (2, 0, 6)),
])
def test_broadcast_to_symbolic_dims_equal_to_one(broadcast_vm, x_shape, target):
    x = np.arange(np.prod(x_shape), dtype="float32").reshape(x_shape)
    y = broadcast_vm["main"](tvm.runtime.tensor(x), tvm_ffi.Shape(target)).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(x, target))


def test_slice_extents_are_pythons_slice_lengths():
    """The kernel computing a slice's shape where its bounds are (device
    bounds: only these extents cross) against Python's ``slice.indices``,
    with negative and out-of-range bounds, INT64_MIN strides and ends past
    the edge; -1 marks a zero stride."""
    from shapefn.compiler.kernels.slicing import slice_extents

    run = tvm.compile(tvm.IRModule({"main": slice_extents(3)}), target="llvm")["main"]
    rng = np.random.default_rng(0)
    for _ in range(500):
        dims, begin, end = rng.integers(0, 12, 3), rng.integers(-20, 20, 3), rng.integers(-20, 20, 3)
        strides = rng.integers(-4, 5, 3)
        end[rng.integers(0, 3)] = rng.choice([2**62, -2**62, 2**63 - 1])
        strides[rng.integers(0, 3)] = rng.choice([-2**63, 1, -1])
        out = tvm.runtime.tensor(np.zeros(3, "int64"))
        data = tvm.runtime.tensor(np.zeros(dims, "float32"))
        run(data, *(tvm.runtime.tensor(np.asarray(v, "int64")) for v in (begin, end, strides)), out)
        want = [len(range(*slice(int(b), int(e), int(s)).indices(int(d)))) if s else -1
                for d, b, e, s in zip(dims, begin, end, strides)]
        assert out.numpy().tolist() == want, (dims, begin, end, strides)
