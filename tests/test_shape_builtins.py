"""Native built-in shape functions, checked against numpy as the reference.

Each built-in is driven through ``shapefn._core.eval_shape_func``: a numpy
array passes its shape, dtype and (where the op's mask is true) its value; a
tuple passes a shape only. The expected shapes come from numpy doing the real
operation on an empty or zero-stride array, so the tests do not restate the C++
rules they check.
"""

import re

import numpy as np
import pytest

import shapefn
from shapefn import _core

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min


def eval_shape(op, inputs, attrs=()):
    return [tuple(s) for s in _core.eval_shape_func(op, inputs, attrs)]


def i64(*values):
    return np.array(values, dtype=np.int64)


def view(shape):
    """A zero-stride array of `shape`: numpy indexing on it costs no memory."""
    return np.broadcast_to(np.empty((), dtype=np.float32), shape)


# ---------------------------------------------------------------------------
# Registry masks: the per-input data dependence the VM relies on.

# canonical Relax name -> (Relay-era alias, mask)
BUILTINS = {
    "relax.dynamic_strided_slice": ("dyn.strided_slice", [False, True, True, True]),
    "relax.reshape": ("dyn.reshape", [False, True]),
    "relax.broadcast_to": ("dyn.broadcast_to", [False, True]),
    "relax.full": ("dyn.full", [False, True]),
    "relax.zeros": ("dyn.zeros", [True]),
    "relax.ones": ("dyn.ones", [True]),
    "relax.topk": ("dyn.topk", [False, True]),
    "relax.tile": ("dyn.tile", [False, True]),
    "relax.arange": ("dyn.arange", [True, True, True]),
    "relax.image.resize2d": ("dyn.image.resize2d", [False, True]),
    "relax.nn.pad": ("dyn.nn.pad", [False, True, False]),
    "relax.nonzero": ("dyn.nonzero", [False]),
    "relax.unique": ("dyn.unique", [False]),
    "relax.vision.all_class_non_max_suppression": ("dyn.vision.non_max_suppression",
                                                   [False, False, True, False, False]),
}
MASKS_WITHOUT_ALIAS = {"shapefn.reduce_axes": [False, True], "shapefn.matmul_batch": [False, False],
                       "shapefn.split_sizes": [False, True], "shapefn.one_hot": [False, True]}
MASKS = {name: mask for canonical, (alias, mask) in BUILTINS.items()
         for name in (canonical, alias)} | MASKS_WITHOUT_ALIAS


@pytest.mark.parametrize("name", sorted(MASKS))
def test_data_dependence_mask(name):
    assert list(shapefn.data_dependence(name)) == MASKS[name]


def test_value_needed_where_mask_is_true():
    with pytest.raises(ValueError):
        eval_shape("relax.topk", [(4, 5), ()])


# ---------------------------------------------------------------------------
# relax.dynamic_strided_slice: Python slicing per axis.

SLICE_CASES = [
    # (data shape, begin, end, strides)
    ((10,), [2], [7], [1]),
    ((10,), [2], [7], [3]),
    ((10,), [-3], [10], [1]),
    ((10,), [-100], [100], [1]),  # clipped at both ends
    ((10,), [100], [-100], [-1]),  # reversed, clipped at both ends
    ((10,), [-1], [-11], [-1]),  # the whole axis, backwards
    ((10,), [9], [-1], [-1]),  # stop -1 means "last", so empty
    ((10,), [7], [2], [1]),  # empty: begin past end
    ((10,), [2], [7], [-1]),  # empty: wrong direction
    ((10,), [0], [10], [I64_MAX]),
    ((10,), [9], [0], [I64_MIN]),
    ((10,), [I64_MIN], [I64_MAX], [1]),  # ONNX "to the end" sentinels
    ((10,), [I64_MAX], [I64_MIN], [-1]),
    ((10,), [0], [10], [4]),
    ((0,), [0], [5], [1]),  # zero-size axis
    ((0,), [-1], [-5], [-1]),
    ((1,), [0], [1], [-1]),
    ((4, 5, 6), [1, -1], [3, 0], [1, -2]),  # trailing axis kept whole
    ((4, 5, 6), [], [], []),  # nothing sliced
    ((4, 5, 6), [0, 0, 0], [4, 5, 6], [1, 1, 1]),
    ((4, 5, 6), [-1, -1, -1], [-5, -6, -7], [-1, -2, -3]),
    ((3, 0, 2), [0, 0, 1], [3, 1, 2], [2, 1, 1]),
]


def _random_slice_cases(count, seed=0):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(0, 8, ndim))
        length = int(rng.integers(0, ndim + 1))
        begin = [int(v) for v in rng.integers(-12, 12, length)]
        end = [int(v) for v in rng.integers(-12, 12, length)]
        strides = [int(v) or 1 for v in rng.integers(-4, 5, length)]
        cases.append((shape, begin, end, strides))
    return cases


@pytest.mark.parametrize("shape,begin,end,strides", SLICE_CASES + _random_slice_cases(200))
def test_strided_slice_matches_numpy(shape, begin, end, strides):
    expected = view(shape)[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].shape
    got = eval_shape("relax.dynamic_strided_slice", [shape, i64(*begin), i64(*end), i64(*strides)])
    assert got == [expected]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64])
def test_strided_slice_index_dtypes(dtype):
    begin, end, strides = (np.array(v, dtype=dtype) for v in ([1, 0], [5, 3], [2, 1]))
    got = eval_shape("dyn.strided_slice", [(8, 9), begin, end, strides])
    assert got == [view((8, 9))[1:5:2, 0:3].shape]


@pytest.mark.parametrize("begin,end,strides,message", [
    ([0, 0, 0], [1, 1, 1], [1, 1, 0], r"relax\.dynamic_strided_slice: strides\[2\] is 0"),
    ([0, 0], [1, 1, 1], [1, 1, 1], "equal lengths"),
    ([0, 0], [1, 1], [1], "equal lengths"),
    ([0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], "begin has 4 entries"),
])
def test_strided_slice_errors(begin, end, strides, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("relax.dynamic_strided_slice", [(4, 5, 6), i64(*begin), i64(*end), i64(*strides)])


@pytest.mark.parametrize("begin,error,message", [
    (np.zeros((1, 2), np.int64), ValueError, "begin must be 1-D"),
    (np.array([0.0, 0.0], np.float32), TypeError, "begin must have an integer dtype"),
    (np.array([2**63, 0], np.uint64), ValueError, "overflows int64"),
])
def test_strided_slice_rejects_begin_value(begin, error, message):
    with pytest.raises(error, match=message):
        eval_shape("relax.dynamic_strided_slice", [(4, 5), begin, i64(1, 1), i64(1, 1)])


# ---------------------------------------------------------------------------
# relax.reshape: ONNX Reshape (0 copies the input dim unless allowzero).


def onnx_reshape(shape, newshape, allowzero):
    target = [shape[i] if v == 0 and not allowzero else v for i, v in enumerate(newshape)]
    return np.empty(shape).reshape(target).shape


@pytest.mark.parametrize("shape,newshape,allowzero", [
    ((2, 3, 4), [6, 4], 0),
    ((2, 3, 4), [-1], 0),
    ((2, 3, 4), [4, -1], 0),
    ((2, 3, 4), [-1, 2, 2], 0),
    ((2, 3, 4), [0, -1], 0),  # keep the batch dim
    ((2, 3, 4), [0, 0, 4], 0),
    ((2, 3, 4), [0, 12], 0),
    ((2, 3, 4), [1, 1, 24, 1], 0),
    ((6,), [2, 3], 1),
    ((0, 3), [0, 3], 1),  # a literal 0
    ((0, 3), [3, 0], 1),
    ((0, 3), [0, 5], 1),
    ((0, 3), [0, 7], 0),  # 0 copies the 0 dim, any other extent fits
    ((0, 3), [-1, 3], 0),
    ((1,), [], 0),  # to a scalar
    ((), [1, 1], 0),
    ((), [-1], 0),
    ((5, 0), [-1, 5], 0),  # 0 dim of the input, -1 still inferable
])
def test_reshape_matches_numpy(shape, newshape, allowzero):
    got = eval_shape("relax.reshape", [shape, i64(*newshape)], (allowzero,))
    assert got == [onnx_reshape(shape, newshape, allowzero)]


def test_reshape_allowzero_defaults_to_copy():
    assert eval_shape("dyn.reshape", [(2, 3), i64(0, 3)]) == [(2, 3)]


def test_reshape_int32_newshape():
    assert eval_shape("relax.reshape", [(2, 3), np.array([3, -1], np.int32)]) == [(3, 2)]


@pytest.mark.parametrize("shape,newshape,allowzero,message", [
    ((2, 3), [-1, -1], 0, "more than one -1"),
    ((2, 3), [-2, 3], 0, r"newshape\[0\] is -2"),
    ((2, 3), [4, 2], 0, re.escape("cannot reshape data (2, 3) of 6 elements into (4, 2)")),
    ((2, 3), [4, -1], 0, "cannot infer the -1"),
    ((2, 3), [0, 0, 0], 0, re.escape("newshape[2] is 0 (copy the input dim)")),
    ((2, 3), [0, 6], 1, "cannot reshape"),
    ((0, 3), [0, -1], 1, "cannot infer the -1"),  # numpy refuses too
    ((0, 3), [0, -1], 0, "cannot infer the -1"),
    ((2**40, 2**40), [-1], 0, "overflows int64"),
])
def test_reshape_errors(shape, newshape, allowzero, message):
    with pytest.raises(ValueError, match=r"relax\.reshape: .*" + message):
        eval_shape("relax.reshape", [shape, i64(*newshape)], (allowzero,))


# ---------------------------------------------------------------------------
# relax.broadcast_to: numpy.broadcast_to, or ONNX Expand when bidirectional.

BROADCAST_OK = [
    ((3,), [2, 3]),
    ((1,), [4]),
    ((1, 3), [5, 3]),
    ((2, 1), [2, 4]),
    ((), [2, 3]),
    ((2, 3), [2, 3]),
    ((1,), [0]),
    ((1, 1), [7, 0, 1]),
    ((3,), [0, 3]),
]


@pytest.mark.parametrize("shape,target", BROADCAST_OK)
@pytest.mark.parametrize("bidirectional", [0, 1])
def test_broadcast_to_matches_numpy(shape, target, bidirectional):
    expected = np.broadcast_to(np.empty(shape), target).shape
    got = eval_shape("relax.broadcast_to", [shape, i64(*target)], (bidirectional,))
    assert got == [expected]


@pytest.mark.parametrize("shape,target", [
    ((2, 3), [3]),  # target shorter than data
    ((4, 1), [1, 5]),  # target dim 1 against a data dim
    ((3, 1), [1]),
    ((0,), [1]),
    ((2, 3), []),
])
def test_broadcast_to_bidirectional_is_broadcast_shapes(shape, target):
    got = eval_shape("dyn.broadcast_to", [shape, i64(*target)], (1,))
    assert got == [np.broadcast_shapes(shape, tuple(target))]


@pytest.mark.parametrize("shape,target,bidirectional", [
    ((2, 3), [4, 3, 2], 0),
    ((2, 3), [4, 3, 2], 1),
    ((2, 3), [3], 0),  # fine bidirectionally, not for numpy.broadcast_to
    ((4, 1), [1, 5], 0),
    ((0,), [2], 1),
])
def test_broadcast_to_incompatible_names_both_shapes(shape, target, bidirectional):
    with pytest.raises(ValueError):  # numpy agrees it is an error
        if bidirectional:
            np.broadcast_shapes(shape, tuple(target))
        else:
            np.broadcast_to(np.empty(shape), target)
    message = re.escape(f"relax.broadcast_to: cannot broadcast data {shape} to shape "
                        f"{tuple(target)}")
    with pytest.raises(ValueError, match=message):
        eval_shape("relax.broadcast_to", [shape, i64(*target)], (bidirectional,))


def test_broadcast_to_negative_target():
    with pytest.raises(ValueError, match=r"shape\[0\] is -1"):
        eval_shape("relax.broadcast_to", [(3,), i64(-1, 3)])


# ---------------------------------------------------------------------------
# relax.full / zeros / ones: the output shape is the shape value.

FILL_SHAPES = [[2, 3], [], [0], [4, 0, 5], [1, 1, 1, 1], [7]]


@pytest.mark.parametrize("shape", FILL_SHAPES)
def test_full_zeros_ones(shape):
    value = i64(*shape)
    assert eval_shape("relax.full", [(), value]) == [np.full(shape, 2.0).shape]
    assert eval_shape("dyn.full", [(1,), value]) == [np.full(shape, 2.0).shape]
    assert eval_shape("relax.zeros", [value]) == [np.zeros(shape).shape]
    assert eval_shape("dyn.ones", [value]) == [np.ones(shape).shape]


@pytest.mark.parametrize("op,inputs", [
    ("relax.full", [(), i64(2, -3)]),
    ("relax.zeros", [i64(-1)]),
    ("relax.ones", [i64(4, 5, -2)]),
])
def test_fill_negative_dim(op, inputs):
    with pytest.raises(ValueError, match=re.escape(op) + r": shape\[\d\] is -\d"):
        eval_shape(op, inputs)


def test_fill_overflowing_shape():
    with pytest.raises(ValueError, match="overflows int64"):
        eval_shape("relax.zeros", [i64(2**32, 2**32)])


# ---------------------------------------------------------------------------
# relax.topk: values and indices take data's shape with dim[axis] = k.


@pytest.mark.parametrize("shape,k,axis", [
    ((10,), 3, -1),
    ((10,), 0, 0),
    ((10,), 10, -1),
    ((4, 5, 6), 2, 0),
    ((4, 5, 6), 5, 1),
    ((4, 5, 6), 6, -1),
    ((4, 5, 6), 1, -3),
    ((4, 0, 6), 0, 1),
])
@pytest.mark.parametrize("k_form", ["scalar", "one_element", "int32"])
def test_topk_matches_numpy(shape, k, axis, k_form):
    k_value = {"scalar": np.array(k, np.int64), "one_element": i64(k),
               "int32": np.array([k], np.int32)}[k_form]
    expected = np.take(np.empty(shape), np.arange(k), axis=axis).shape
    assert eval_shape("relax.topk", [shape, k_value], (axis,)) == [expected, expected]


def test_topk_axis_defaults_to_last():
    assert eval_shape("dyn.topk", [(3, 8), np.array(5)]) == [(3, 5), (3, 5)]


@pytest.mark.parametrize("shape,k,axis,message", [
    ((4, 5), 6, -1, re.escape("relax.topk: k is 6 but axis 1 of data (4, 5) has 5 elements")),
    ((4, 5), -1, -1, "k is -1"),
    ((4, 5), 1, 2, "axis 2 is out of range"),
    ((4, 5), 1, -3, "axis -3 is out of range"),
    ((), 1, -1, "at least one dim"),
])
def test_topk_errors(shape, k, axis, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("relax.topk", [shape, np.array(k)], (axis,))


def test_topk_k_must_be_scalar():
    with pytest.raises(ValueError, match="k must be a scalar or a 1-element vector"):
        eval_shape("relax.topk", [(4, 5), i64(1, 2)])
    with pytest.raises(TypeError, match="k must have an integer dtype"):
        eval_shape("relax.topk", [(4, 5), np.array(2.0)])


# ---------------------------------------------------------------------------
# relax.tile: numpy.tile.


@pytest.mark.parametrize("shape,reps", [
    ((2, 3), [2, 2]),
    ((2, 3), [3]),  # fewer reps than dims: leading 1s
    ((2, 3), [2, 1, 4]),  # more reps than dims: data gains leading 1s
    ((2, 3), []),
    ((), [3, 2]),
    ((), []),
    ((4,), [0]),
    ((0, 3), [5, 5]),
    ((1, 1, 1), [1, 7, 1]),
])
def test_tile_matches_numpy(shape, reps):
    expected = np.tile(np.empty(shape), reps).shape
    assert eval_shape("relax.tile", [shape, i64(*reps)]) == [expected]


def test_tile_scalar_reps():
    assert eval_shape("dyn.tile", [(2, 3), np.array(4)]) == [np.tile(np.empty((2, 3)), 4).shape]


def test_tile_errors():
    with pytest.raises(ValueError, match=r"relax\.tile: repeats\[1\] is -2"):
        eval_shape("relax.tile", [(2, 3), i64(1, -2)])
    with pytest.raises(ValueError, match="overflows int64"):
        eval_shape("relax.tile", [(2**40, 2), i64(2**40, 1)])


# ---------------------------------------------------------------------------
# relax.arange: len(numpy.arange(start, stop, step)).

INT_ARANGE = [
    (0, 10, 1), (0, 10, 3), (10, 0, -3), (0, 0, 1), (5, 0, 1), (0, 5, -1),
    (-7, 7, 2), (7, -7, -2), (3, 4, 100), (0, 10, 10), (0, 11, 10),
    (I64_MIN, I64_MAX, I64_MAX), (I64_MAX, I64_MIN, I64_MIN), (I64_MIN, I64_MAX, 2**62),
    (I64_MAX - 1, I64_MAX, 1),
]


@pytest.mark.parametrize("start,stop,step", INT_ARANGE)
def test_arange_integer_exact(start, stop, step):
    # Python's range is numpy.arange's length rule for integers, without
    # materialising the array.
    got = eval_shape("relax.arange", [i64(start), i64(stop), i64(step)])
    assert got == [(len(range(start, stop, step)),)]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32])
@pytest.mark.parametrize("start,stop,step", [(1, 9, 2), (0, 100, 7), (9, 1, 3), (3, 3, 1)])
def test_arange_integer_dtypes(dtype, start, stop, step):
    values = [np.array(v, dtype=dtype) for v in (start, stop, step)]
    expected = len(range(start, stop, step))
    if np.issubdtype(dtype, np.signedinteger):
        # numpy computes stop - start in the operand dtype, so for unsigned
        # operands with stop < start it wraps around; compare only where it
        # does not.
        assert len(np.arange(*values)) == expected
    assert eval_shape("dyn.arange", values) == [(expected,)]


@pytest.mark.parametrize("start,stop,step", [
    (0.0, 1.0, 0.1), (0.0, 1.0, 0.3), (1.0, 0.0, -0.25), (0.5, 0.5, 0.1), (0.0, -1.0, 0.1),
    (-2.5, 2.5, 0.5), (0.0, 10.0, 3.0), (0.0, 1e-300, 1e10), (0.0, 5.0, np.inf),
    (5.0, 0.0, np.inf), (0.0, 1.0, 1e-3),
])
def test_arange_float64(start, stop, step):
    values = [np.array(v, np.float64) for v in (start, stop, step)]
    assert eval_shape("relax.arange", values) == [(len(np.arange(start, stop, step)),)]


@pytest.mark.parametrize("start,stop,step", [(0.0, 4.0, 0.5), (4.0, -4.0, -0.25), (1.5, 2.0, 2.0)])
def test_arange_float32(start, stop, step):
    # Values exactly representable in float32, so single and double precision
    # agree on the length.
    values = [np.array(v, np.float32) for v in (start, stop, step)]
    assert eval_shape("relax.arange", values) == [(len(np.arange(*values)),)]


def test_arange_mixed_int_and_float():
    values = [np.array(1, np.int64), np.array(5.5, np.float64), np.array(1, np.int32)]
    assert eval_shape("relax.arange", values) == [(len(np.arange(1, 5.5, 1)),)]


def test_arange_one_element_vectors():
    assert eval_shape("relax.arange", [i64(2), np.array([12], np.int64), i64(5)]) == [(2,)]


@pytest.mark.parametrize("values,message", [
    ([i64(0), i64(5), i64(0)], r"relax\.arange: step is 0"),
    ([np.array(0.0), np.array(5.0), np.array(0.0)], "step is 0"),
    ([np.array(0.0), np.array(np.nan), np.array(1.0)], "cannot compute the length"),
    ([np.array(0.0), np.array(np.inf), np.array(1.0)], "overflows int64"),
    ([i64(I64_MIN), i64(I64_MAX), i64(1)], "overflows int64"),
    ([i64(0, 1), i64(5), i64(1)], "start must be a scalar or a 1-element vector"),
])
def test_arange_errors(values, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("relax.arange", values)


def test_arange_unsupported_dtype():
    with pytest.raises(TypeError, match="float16 is not supported"):
        eval_shape("relax.arange", [np.array(0, np.float16), i64(4), i64(1)])


# ---------------------------------------------------------------------------
# relax.image.resize2d: spatial dims replaced by the size value.


@pytest.mark.parametrize("shape,size,layout,expected", [
    ((1, 3, 32, 32), [64, 48], 0, (1, 3, 64, 48)),
    ((2, 16, 16, 3), [8, 4], 1, (2, 8, 4, 3)),
    ((1, 3, 5, 5), [0, 7], 0, (1, 3, 0, 7)),
])
def test_resize2d(shape, size, layout, expected):
    assert eval_shape("relax.image.resize2d", [shape, i64(*size)], (layout,)) == [expected]


def test_resize2d_layout_defaults_to_nchw():
    assert eval_shape("dyn.image.resize2d", [(1, 3, 8, 8), np.array([4, 2], np.int32)]) == [
        (1, 3, 4, 2)]


@pytest.mark.parametrize("shape,size,layout,message", [
    ((3, 32, 32), [4, 4], 0, re.escape("data must be 4-D, got shape (3, 32, 32)")),
    ((1, 3, 32, 32), [-1, 4], 0, r"size\[0\] is -1"),
    ((1, 3, 32, 32), [4, 4, 4], 0, "size must have 2 entries"),
    ((1, 3, 32, 32), [4, 4], 2, "layout code 2"),
])
def test_resize2d_errors(shape, size, layout, message):
    with pytest.raises(ValueError, match=r"relax\.image\.resize2d: .*" + message):
        eval_shape("relax.image.resize2d", [shape, i64(*size)], (layout,))


# ---------------------------------------------------------------------------
# relax.nn.pad: (ndim, 2) pairs or ONNX's flat [begins..., ends...].


def onnx_pad(shape, pairs):
    """np.pad for the growth, slicing for the crop (ONNX's negative pads)."""
    growth = np.array([(max(b, 0), max(a, 0)) for b, a in pairs], np.int64).reshape(-1, 2)
    padded = np.pad(np.empty(shape), growth)
    crop = tuple(slice(max(-b, 0), padded.shape[i] - max(-a, 0)) for i, (b, a) in enumerate(pairs))
    return padded[crop].shape


PAD_CASES = [
    ((2, 3), [(1, 1), (0, 2)]),
    ((4,), [(3, 0)]),
    ((1, 2, 3), [(0, 0), (1, 1), (2, 2)]),
    ((0, 3), [(2, 0), (0, 0)]),
    ((5, 6), [(-1, 0), (2, -3)]),  # crops
    ((5, 6), [(-5, 0), (-3, -3)]),  # cropped to nothing
]


@pytest.mark.parametrize("shape,pairs", PAD_CASES)
def test_pad_pairs(shape, pairs):
    pad_width = np.array(pairs, np.int64).reshape(len(shape), 2)
    assert eval_shape("relax.nn.pad", [shape, pad_width, ()]) == [onnx_pad(shape, pairs)]


@pytest.mark.parametrize("shape,pairs", PAD_CASES)
def test_pad_flat_onnx_order(shape, pairs):
    flat = np.array([b for b, _ in pairs] + [a for _, a in pairs], np.int64)
    assert eval_shape("dyn.nn.pad", [shape, flat, ()]) == [onnx_pad(shape, pairs)]


def test_pad_scalar():
    # np.pad cannot pad a 0-d array; there is nothing to pad, so the shape stays ().
    assert eval_shape("relax.nn.pad", [(), np.zeros((0, 2), np.int64), ()]) == [()]
    assert eval_shape("relax.nn.pad", [(), np.zeros((0,), np.int64), ()]) == [()]


def test_pad_flat_is_not_interleaved():
    # [b0, b1, e0, e1]: axis 0 grows by 1 + 3, axis 1 by 2 + 4.
    assert eval_shape("relax.nn.pad", [(10, 20), i64(1, 2, 3, 4), ()]) == [(14, 26)]


@pytest.mark.parametrize("shape,pad_width,message", [
    ((5, 6), np.array([[-3, -3], [0, 0]], np.int64),
     re.escape("axis 0 of data (5, 6) padded by (-3, -3) has negative extent -1")),
    ((5, 6), i64(1, 1, 1), re.escape("pad_width must have shape (2, 2) or (4,)")),
    ((5, 6), np.zeros((2, 3), np.int64), "pad_width must have shape"),
    ((5,), i64(I64_MAX, 1), "overflows int64"),
])
def test_pad_errors(shape, pad_width, message):
    with pytest.raises(ValueError, match=r"relax\.nn\.pad: .*" + message):
        eval_shape("relax.nn.pad", [shape, pad_width, ()])


def test_pad_rejects_float_widths():
    with pytest.raises(TypeError, match="pad_width must have an integer dtype"):
        eval_shape("relax.nn.pad", [(5,), np.array([1.0, 1.0]), ()])


# ---------------------------------------------------------------------------
# Count-sized ops: upper bounds from shapes alone.


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 5), (1, 1, 1, 1)])
def test_nonzero_bound_is_all_nonzero_result(shape):
    # An all-ones input reaches the bound exactly.
    indices = np.nonzero(np.ones(shape))
    assert eval_shape("relax.nonzero", [shape]) == [(len(indices), indices[0].size)]


def test_nonzero_scalar_and_overflow():
    assert eval_shape("dyn.nonzero", [()]) == [(0, 1)]
    with pytest.raises(ValueError, match=r"relax\.nonzero: .*overflows int64"):
        eval_shape("relax.nonzero", [(2**40, 2**40)])


@pytest.mark.parametrize("shape", [(7,), (3, 4), (0,), (), (2, 0, 3)])
def test_unique_bound_is_all_distinct_result(shape):
    distinct = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
    outs = np.unique(distinct, return_index=True, return_inverse=True, return_counts=True)
    expected = [(o.size,) for o in outs]
    assert eval_shape("relax.unique", [shape]) == expected
    assert eval_shape("dyn.unique", [shape]) == expected


NMS = "relax.vision.all_class_non_max_suppression"


@pytest.mark.parametrize("batch,boxes,classes,max_out", [
    (1, 100, 80, 10), (2, 5, 3, 10), (2, 5, 3, 5), (3, 0, 2, 4), (1, 10, 0, 4), (1, 10, 2, 0),
    (1, 10, 2, -3),
])
@pytest.mark.parametrize("max_form", ["scalar", "one_element"])
def test_nms_bound(batch, boxes, classes, max_out, max_form):
    cap = np.array(max_out, np.int64) if max_form == "scalar" else i64(max_out)
    inputs = [(batch, boxes, 4), (batch, classes, boxes), cap, (), ()]
    expected = (batch * classes * min(boxes, max(max_out, 0)), 3)
    assert eval_shape(NMS, inputs) == [expected]
    assert eval_shape("dyn.vision.non_max_suppression", inputs) == [expected]


@pytest.mark.parametrize("boxes,scores,message", [
    ((1, 10), (1, 2, 10), re.escape("boxes must be 3-D, got shape (1, 10)")),
    ((1, 10, 4), (2, 10), "scores must be 3-D"),
    ((1, 10, 5), (1, 2, 10), "boxes must have shape"),
    ((2, 10, 4), (1, 2, 10), re.escape("scores (1, 2, 10) must have shape (2, num_classes, 10)")),
    ((1, 10, 4), (1, 2, 9), "scores .* must have shape"),
])
def test_nms_shape_errors(boxes, scores, message):
    with pytest.raises(ValueError, match=re.escape(NMS) + ": " + message):
        eval_shape(NMS, [boxes, scores, np.array(5), (), ()])


def test_nms_overflowing_bound():
    with pytest.raises(ValueError, match="overflows int64"):
        eval_shape(NMS, [(2**31, 2**31, 4), (2**31, 2**31, 2**31), np.array(2**40), (), ()])


# ---------------------------------------------------------------------------
# shapefn.reduce_axes: numpy's reduction with keepdims, and without.

@pytest.mark.parametrize("shape, axes", [
    ((3, 4, 5), [1]), ((3, 4, 5), [-1, 0]), ((3, 4, 5), [2, 0, 1]), ((2, 0, 3), [1]), ((7,), [0]),
])
def test_reduce_axes(shape, axes):
    data = view(shape)
    kept = data.sum(axis=tuple(axes), keepdims=True).shape
    dropped = data.sum(axis=tuple(axes)).shape
    assert eval_shape("shapefn.reduce_axes", [shape, i64(*axes)], [1]) == [kept, kept]
    assert eval_shape("shapefn.reduce_axes", [shape, i64(*axes)], [0]) == [kept, dropped]


@pytest.mark.parametrize("axes, message", [([1, -2], "name axis 1 twice"), ([3], "axis 3 is out of range")])
def test_reduce_axes_errors(axes, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("shapefn.reduce_axes", [(2, 3, 4), i64(*axes)], [0])


# ---------------------------------------------------------------------------
# shapefn.split_sizes: the parts of a split along an axis, as numpy.split cuts them.

@pytest.mark.parametrize("shape, axis, sizes", [((6, 2), 0, [1, 2, 3]), ((2, 5), -1, [0, 5]), ((3, 0), 1, [0, 0])])
def test_split_sizes(shape, axis, sizes):
    parts = np.split(view(shape), np.cumsum(sizes)[:-1], axis=axis)
    assert eval_shape("shapefn.split_sizes", [shape, i64(*sizes)], [axis]) == [tuple(sizes)]
    assert [part.shape[axis] for part in parts] == sizes


@pytest.mark.parametrize("sizes, axis, message", [([4, 3], 0, r"adds up to 7, not to the 6 elements of axis 0"),
                                                  ([7, -1], 0, "holds a negative size"),
                                                  ([6], 2, "axis 2 is out of range")])
def test_split_sizes_errors(sizes, axis, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("shapefn.split_sizes", [(6, 2), i64(*sizes)], [axis])


# ---------------------------------------------------------------------------
# shapefn.one_hot: the indices' shape with the depth inserted at the axis.

@pytest.mark.parametrize("shape, axis, want", [((2, 3), -1, (2, 3, 5)), ((2, 3), 0, (5, 2, 3)), ((4,), -2, (5, 4)),
                                               ((), 0, (5,))])
def test_one_hot(shape, axis, want):
    assert eval_shape("shapefn.one_hot", [shape, np.array(5, np.int64)], [axis]) == [want]


@pytest.mark.parametrize("depth, axis, message", [(0, 0, "depth is 0"), (3, 3, "axis 3 is out of range")])
def test_one_hot_errors(depth, axis, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("shapefn.one_hot", [(2, 3), np.array(depth, np.int64)], [axis])


# ---------------------------------------------------------------------------
# shapefn.matmul_batch: numpy.matmul's batch sizes.

@pytest.mark.parametrize("a, b", [((2, 3, 5, 4), (1, 3, 4, 6)), ((5, 4), (7, 2, 4, 3)), ((1, 1, 2, 4), (6, 4, 1)),
                                  ((3, 0, 4), (1, 4, 2))])
def test_matmul_batch(a, b):
    assert eval_shape("shapefn.matmul_batch", [a, b]) == [np.matmul(view(a), view(b)).shape[:-2]]


@pytest.mark.parametrize("a, b, message", [((2, 3, 4), (3, 4, 5), "do not broadcast"), ((2, 4), (5, 3), "contracted"),
                                           ((4,), (4, 2), "2 or more dims")])
def test_matmul_batch_errors(a, b, message):
    with pytest.raises(ValueError, match=message):
        eval_shape("shapefn.matmul_batch", [a, b])
