"""Shape functions written with TVM TE: tracing, mask verification, compilation, caching."""

import ctypes

import numpy as np
import pytest
import tvm
from tvm import te, tirx

from shapefn.compiler.machine_code import kernel_cache
from shapefn.compiler.shape_funcs import te_shape_func as tsf
from shapefn.runtime import config
from shapefn.runtime.errors import DataDependenceError, OverDeclaredWarning

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

SLICE_MASK = [False, True, True, True]
SLICE_SIGNATURE = "float32:3,int64:1,int64:1,int64:1"


@pytest.fixture(autouse=True)
def isolated_caches(tmp_path, monkeypatch):
    """No test sees another's compiled functions or writes to the user's cache."""
    monkeypatch.setenv("SHAPEFN_CACHE_DIR", str(tmp_path / "default-cache"))
    tsf.clear_memory_cache()
    yield
    config.set_cache_dir(None)
    tsf.clear_memory_cache()


def strided_slice(data, begin, end, strides):
    """numpy slicing semantics for positive strides; negative begin/end count from the end."""

    def extent(axis):
        n = data.shape[axis]
        b, e, s = begin[axis], end[axis], strides[axis]
        b = tirx.max(tirx.min(tirx.if_then_else(b < 0, b + n, b), n), 0)
        e = tirx.max(tirx.min(tirx.if_then_else(e < 0, e + n, e), n), 0)
        return tirx.if_then_else(e > b, (e - b + s - 1) // s, tirx.const(0, "int64"))

    return [extent(axis) for axis in range(len(data.shape))]


def split_at(data, index):
    """Split rows at index[0]: a list output and a TE-tensor output."""
    rows, cols = data.shape
    cut = index[0]
    tail = te.compute(
        (2,), lambda i: tirx.if_then_else(i == 0, rows - cut, cols), name="tail"
    )
    return [cut, cols], tail


def top_k_rows(data, k):
    """Scalar (rank-0) k clipped to the row length."""
    return [data.shape[0], tirx.min(k(), data.shape[1])]


def int64_tensor(values):
    return tvm.runtime.tensor(np.array(values, dtype="int64"))


def call(function, out_ndims, *inputs):
    outputs = [tvm.runtime.tensor(np.full(n, -1, dtype="int64")) for n in out_ndims]
    function(*inputs, *outputs)
    return [tuple(out.numpy()) for out in outputs]


@pytest.fixture(scope="module")
def compiled_slice(tmp_path_factory):
    return tsf.compile_shape_func(
        "dyn.strided_slice",
        strided_slice,
        SLICE_MASK,
        SLICE_SIGNATURE,
        cache_dir=tmp_path_factory.mktemp("slice-cache"),
    )


# --- signatures -------------------------------------------------------------


def test_signature_round_trip():
    parsed = tsf.parse_signature("int64:1,float32:4,bool:0")
    assert parsed == [("int64", 1), ("float32", 4), ("bool", 0)]
    assert tsf.format_signature(parsed) == "int64:1,float32:4,bool:0"
    assert tsf.parse_signature("") == []
    assert tsf.format_signature([]) == ""


@pytest.mark.parametrize(
    "bad",
    ["int64", "int64:", ":1", "int64:-1", "int64:1,", "int64:1;float32:2", "foo:1", "int64x4:1"],
)
def test_malformed_signature_raises(bad):
    with pytest.raises(ValueError, match="signature"):
        tsf.parse_signature(bad)


def test_signature_must_match_mask_length():
    with pytest.raises(ValueError, match=r"takes 2 inputs but the mask \[False, True, True, True\] has 4"):
        tsf.verify("dyn.strided_slice", strided_slice, SLICE_MASK, "float32:3,int64:1")


# --- compiled functions against numpy ----------------------------------------


@pytest.mark.parametrize(
    "shape, begin, end, strides",
    [
        ((10, 7, 5), [1, -5, 0], [8, 7, 5], [3, 2, 1]),
        ((4, 9, 2), [0, 2, -1], [-1, 100, 2], [1, 4, 5]),
        ((6, 3, 8), [5, 0, 3], [2, 3, 3], [1, 1, 2]),  # empty ranges
    ],
)
def test_strided_slice_one_compile_many_shapes(compiled_slice, shape, begin, end, strides):
    function, out_ndims = compiled_slice
    assert out_ndims == [3]
    data = np.zeros(shape, dtype="float32")
    got = call(
        function, out_ndims,
        tvm.runtime.tensor(data), int64_tensor(begin), int64_tensor(end), int64_tensor(strides),
    )
    expected = data[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].shape
    assert got == [expected]


def _tensor_at_unmapped_address(shape, dtype_code=2, bits=32):
    """A CPU DLTensor whose data pointer is an unmapped page: any data read faults."""

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [
            ("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
            ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
            ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
        ]

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [
            ("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)
        ]

    unmapped = 0x1000  # below Linux's mmap_min_addr, never mapped; 64-byte aligned
    dims = (ctypes.c_int64 * len(shape))(*shape)
    dl_tensor = DLTensor(
        unmapped, DLDevice(1, 0), len(shape), DLDataType(dtype_code, bits, 1), dims, None, 0
    )
    managed = DLManagedTensor(dl_tensor, None, None)  # no deleter: nothing to free
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(managed), b"dltensor", None)
    return tvm.runtime.from_dlpack(capsule), (dims, managed)


def test_shape_only_input_data_is_never_dereferenced(compiled_slice):
    function, out_ndims = compiled_slice
    data, keep_alive = _tensor_at_unmapped_address((9, 4, 6))
    begin, end, strides = int64_tensor([1, 0, 2]), int64_tensor([7, 4, 6]), int64_tensor([2, 3, 1])
    got = call(function, out_ndims, data, begin, end, strides)
    assert got == [np.zeros((9, 4, 6))[1:7:2, 0:4:3, 2:6:1].shape]
    del data, keep_alive


def test_two_outputs(tmp_path):
    function, out_ndims = tsf.compile_shape_func(
        "my.split_at", split_at, [False, True], "float32:2,int64:1", cache_dir=tmp_path
    )
    assert out_ndims == [2, 2]
    data = np.zeros((11, 3), dtype="float32")
    got = call(function, out_ndims, tvm.runtime.tensor(data), int64_tensor([4]))
    head, tail = np.split(data, [4])
    assert got == [head.shape, tail.shape]


def test_list_of_primexpr_with_scalar_input(tmp_path):
    function, out_ndims = tsf.compile_shape_func(
        "dyn.topk", top_k_rows, [False, True], "float32:2,int64:0", cache_dir=tmp_path
    )
    assert out_ndims == [2]
    data = np.zeros((5, 6), dtype="float32")
    for k in (2, 6, 9):
        got = call(function, out_ndims, tvm.runtime.tensor(data), int64_tensor(k))
        assert got == [np.sort(data, axis=1)[:, :k].shape]


def test_trace_output_forms():
    def three_forms(x):
        return [], [x.shape[0], 7], te.compute((3,), lambda i: x[i], name="int32_vector")

    traced = tsf.trace("my.op", three_forms, 1, "int32:1")
    assert traced.out_ndims == [0, 2, 3]
    assert traced.reads == frozenset({0})
    assert all(out.dtype == "int64" for out in traced.outputs)


@pytest.mark.parametrize(
    "func, error, match",
    [
        (lambda x: te.compute((2, 2), lambda i, j: i + j), ValueError, "rank 2"),
        (lambda x: te.compute((x.shape[0],), lambda i: i), ValueError, "not a compile-time"),
        (lambda x: [x.shape[0], [1]], TypeError, "mixing"),
        (lambda x: x.shape[0], TypeError, "expected a TE tensor"),
        (lambda x: [te.placeholder((2,), "int64", name="stray")[0]], ValueError, "not one of"),
    ],
)
def test_bad_returns_are_rejected(func, error, match):
    with pytest.raises(error, match=match):
        tsf.trace("my.op", func, 1, "int64:1")


# --- mask verification -------------------------------------------------------


def _via_intermediate(x):
    doubled = te.compute((2,), lambda i: x[i] * 2, name="doubled")
    return te.compute((2,), lambda i: doubled[i] + 1, name="shape")


def _via_reduce_extent(x):
    r = te.reduce_axis((0, x[0]), name="r")
    return te.compute((1,), lambda i: te.sum(tirx.const(1, "int64"), axis=r), name="count")


@pytest.mark.parametrize(
    "func",
    [lambda x: [x[0] + x.shape[0]], _via_intermediate, _via_reduce_extent],
    ids=["direct", "intermediate-compute", "reduce-extent"],
)
def test_reading_shape_only_input_raises(func, tmp_path):
    with pytest.raises(DataDependenceError, match=r"'my\.op'.*input 0.*shape-only"):
        tsf.verify("my.op", func, [False], "int64:1")
    with pytest.raises(DataDependenceError):
        tsf.compile_shape_func("my.op", func, [False], "int64:1", cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_over_declared_input_warns():
    with pytest.warns(OverDeclaredWarning, match=r"'dyn\.topk'.*input 1.*over-declared"):
        result = tsf.verify(
            "dyn.topk",
            lambda data, k: [data.shape[0], k.shape[0]],
            [False, True],
            "float32:2,int64:1",
        )
    assert result.over_declared == (1,)
    assert result.reads == frozenset()


def test_exact_mask_verifies_silently(recwarn):
    result = tsf.verify("dyn.strided_slice", strided_slice, SLICE_MASK, SLICE_SIGNATURE)
    assert result.reads == frozenset({1, 2, 3})
    assert result.over_declared == ()
    assert not recwarn.list


# --- verification at registration -------------------------------------------


@pytest.mark.parametrize(
    "func, mask, probe",
    [
        (strided_slice, SLICE_MASK, "int64:1,int64:1,int64:1,int64:1"),
        (
            lambda image, size: [image.shape[0], image.shape[1], size[0], size[1]],
            [False, True],
            "float32:4,int64:1",
        ),
        (
            lambda a, b: [a.shape[3], tirx.Cast("int64", b(0, 0, 0, 0))],
            [False, True],
            "float32:4,float32:4",
        ),
        (lambda a, b: [a.shape[0] + b.shape[0]], False, "int64:1,int64:1"),
    ],
)
def test_verify_at_registration_probes(func, mask, probe):
    result = tsf.verify_at_registration("my.op", func, mask)
    assert result is not None
    assert result.signature == probe


def test_verify_at_registration_returns_none_when_no_probe_traces():
    def needs_rank_2(x):
        assert len(x.shape) == 2
        return [x.shape[1], x.shape[0]]

    assert tsf.verify_at_registration("my.transpose", needs_rank_2, [False]) is None
    assert tsf.verify_at_registration("my.variadic", lambda *xs: [xs[0].shape[0]], True) is None


def test_verify_at_registration_propagates_data_dependence_error():
    # Only the second probe (x float32:4) traces, and it reads x's data.
    def reads_image(x, k):
        return [tirx.Cast("int64", x(0, 0, 0, 0)) + k[0]]

    with pytest.raises(DataDependenceError, match="input 0"):
        tsf.verify_at_registration("my.op", reads_image, [False, True])


# --- caches --------------------------------------------------------------------


def test_disk_cache_hit_skips_compilation(tmp_path):
    def shape_func(x):
        return [x.shape[1], x.shape[0]]

    def compile_it():
        return tsf.compile_shape_func(
            "my.transpose", shape_func, [False], "float32:2", cache_dir=tmp_path
        )

    function, out_ndims = compile_it()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    # one kernel: object, entry; one library and its digest
    assert sorted(p.suffix for p in files) == [".o", ".ref", ".sha256", ".so"]
    assert not any(p.name.startswith(".") for p in files)  # no temporary file left behind
    assert compile_it()[0] is function  # in-process hit

    tsf.clear_memory_cache()
    compiled = kernel_cache.stats().misses
    reloaded, out_ndims = compile_it()
    assert kernel_cache.stats().misses == compiled  # a disk-cache hit compiles nothing
    got = call(reloaded, out_ndims, tvm.runtime.tensor(np.zeros((3, 8), dtype="float32")))
    assert got == [(8, 3)]


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    env_dir = tmp_path / "from-env"
    monkeypatch.setenv("SHAPEFN_CACHE_DIR", str(env_dir))
    assert config.cache_dir() == env_dir
    assert env_dir.is_dir()

    tsf.compile_shape_func("my.rows", lambda x: [x.shape[0]], [False], "float32:2")
    assert len(list(env_dir.rglob("*.so"))) == 1

    override = tmp_path / "override"
    config.set_cache_dir(override)
    assert config.cache_dir() == override and override.is_dir()
    config.set_cache_dir(None)
    assert config.cache_dir() == env_dir
