"""Convolutions and matmuls by constants on the CPU
(``compiler/kernels/cpu_conv.py``, ``cpu_dense.py``): the weight packed
into vectors of output channels, a register-tiled kernel over sizes known
only at run time; depthwise convolutions (``cpu_depthwise.py``) vectorized
over output columns. Compared with onnxruntime on sim and opencl
(``onnx_check``) at shapes that exercise its edges: output channels not a
multiple of the vector, output widths and row counts not a multiple of the
tile, strides, dilations, asymmetric padding, batch 0, a fused bias and
activation."""
import numpy as np
import pytest
import tvm_ffi
from test_onnx_ops import F, model, node, uniform

from shapefn.compiler.kernels import cpu_conv, cpu_dense, cpu_depthwise
from shapefn.compiler.passes.relax_passes import lower
from shapefn.compiler.schedules import cpu_schedule, target_schedule
from shapefn.frontend import from_onnx

# What users get: the default optimization level (conftest.default_host_opt_level).
pytestmark = pytest.mark.usefixtures("default_host_opt_level")
# What these tests check is the CPU kernels' schedules, not the converters:
# no bodies variant of onnx_check (conftest).
ONNX_CHECK_BODIES = False

rng = np.random.default_rng(1)


def weight(o, i, kh, kw):
    return (rng.standard_normal((o, i, kh, kw)) / np.sqrt(i * kh * kw)).astype(np.float32)


def conv(c, o, kernel, *, act=None, size=("H", "W"), **attrs):
    """``Conv(x [N, c, *size])`` with ``o`` outputs, a bias and ``act`` after it."""
    nodes = [node("Conv", ["x", "w", "b"], ["c" if act else "y"], kernel_shape=list(kernel), **attrs)]
    if act:
        nodes.append(node(act, ["c"], ["y"]))
    return model(nodes, [("x", F, ["N", c, *size])], [("y", F, None)],
                 {"w": weight(o, c, *kernel), "b": uniform(o, -0.5, 0.5)})


CASES = {
    # the mask head's: 14x14 is no multiple of an 8-column tile
    "3x3-relu": (conv(32, 48, (3, 3), act="Relu", pads=[1, 1, 1, 1]), [(3, 14, 14), (1, 5, 9), (0, 14, 14)]),
    "1x1-odd-channels": (conv(24, 21, (1, 1)), [(2, 7, 11), (1, 1, 1)]),
    "stride2-asymmetric": (conv(8, 24, (3, 3), strides=[2, 2], pads=[0, 1, 1, 0]), [(1, 9, 13), (2, 4, 4)]),
    "dilated": (conv(16, 16, (3, 3), dilations=[2, 2], pads=[2, 2, 2, 2]), [(1, 10, 12)]),
    "7x7-stem": (conv(3, 16, (7, 7), act="Relu", strides=[2, 2], pads=[3, 3, 3, 3]), [(1, 33, 30)]),
    "rectangular-kernel": (conv(8, 32, (1, 3), pads=[0, 1, 0, 1]), [(1, 6, 17)]),
    # the mask head's sizes are static: a tile of 7 columns fits 14 (with AVX-512)
    "static-14x14": (conv(16, 64, (3, 3), act="Relu", pads=[1, 1, 1, 1], size=(14, 14)), [(3, 14, 14), (0, 14, 14)]),
    # SSD300's last extra layer: one output pixel
    "3x3-to-1x1": (conv(128, 256, (3, 3), act="Relu"), [(1, 3, 3), (2, 3, 4)]),
    # a whole group of channel vectors (4 x 16 with AVX-512)
    "64-channels": (conv(8, 64, (3, 3), act="Relu", pads=[1, 1, 1, 1]), [(2, 5, 7), (1, 1, 9), (0, 3, 3)]),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_onnxruntime(onnx_check, case):
    m, shapes = CASES[case]
    c = m.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    # (sums of up to 288 products: float32 rounding differs by order)
    onnx_check(m, [[uniform((n, c, h, w), -2, 2)] for n, h, w in shapes], atol=1e-5)


def packed_kernels(m) -> list[str]:
    """The CPU build of ``m``'s kernels that are packed convolutions, as
    scheduled (TVMScript)."""
    mod = lower(from_onnx(m), target_schedule.host_target())
    marker = f'"{cpu_conv.ATTR}": "{cpu_conv.BLOCK}"'
    return [cpu_schedule.schedule(f).script() for f in mod.functions.values()
            if "tirx" in type(f).__module__ and marker in f.script()]


def test_one_group_convolutions_take_the_packed_kernel():
    (scheduled,) = packed_kernels(CASES["3x3-relu"][0])
    assert f"{cpu_conv.BLOCK}_local" in scheduled and "T.vectorized" in scheduled  # accumulators in registers
    assert packed_kernels(DEPTHWISE["3x3-relu"][0]) == []  # grouped: cpu_depthwise's


def grouped(c, o, kernel, group, *, act=None, **attrs):
    """``Conv(x [N, c, H, W], group=group)`` with ``o`` outputs, a bias and ``act`` after it."""
    nodes = [node("Conv", ["x", "w", "b"], ["c" if act else "y"], kernel_shape=list(kernel), group=group, **attrs)]
    if act:
        nodes.append(node(act, ["c"], ["y"]))
    return model(nodes, [("x", F, ["N", c, "H", "W"])], [("y", F, None)],
                 {"w": weight(o, c // group, *kernel), "b": uniform(o, -0.5, 0.5)})


DEPTHWISE = {
    # MobileNetV3's: widths no multiple of the vector, strides, 5x5
    "3x3-relu": (grouped(12, 12, (3, 3), 12, act="Relu", pads=[1, 1, 1, 1]), [(2, 9, 21), (1, 1, 1), (0, 5, 5)]),
    "5x5-stride2": (grouped(8, 8, (5, 5), 8, strides=[2, 2], pads=[2, 2, 2, 2]), [(1, 17, 35), (1, 4, 3)]),
    "stride3-asymmetric": (grouped(4, 4, (3, 3), 4, strides=[3, 2], pads=[0, 2, 1, 0]), [(1, 11, 19)]),
    "dilated": (grouped(6, 6, (3, 3), 6, dilations=[2, 3], pads=[2, 3, 2, 3]), [(1, 10, 12)]),
    "multiplier-2": (grouped(5, 10, (3, 3), 5, pads=[1, 1, 1, 1]), [(2, 6, 7)]),
    # two input channels per group: TVM's kernel
    "two-per-group": (grouped(8, 8, (3, 3), 4, pads=[1, 1, 1, 1]), [(1, 6, 7)]),
}


@pytest.mark.parametrize("case", DEPTHWISE)
def test_depthwise_convolutions_match_onnxruntime(onnx_check, case):
    m, shapes = DEPTHWISE[case]
    c = m.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    onnx_check(m, [[uniform((n, c, h, w), -2, 2)] for n, h, w in shapes], atol=1e-5)


def test_depthwise_convolutions_take_the_vectorized_kernel():
    marker = f'"{cpu_conv.ATTR}": "{cpu_depthwise.BLOCK}"'

    def kernels(m):
        mod = lower(from_onnx(m), target_schedule.host_target())
        return [cpu_schedule.schedule(f).script() for f in mod.functions.values()
                if "tirx" in type(f).__module__ and marker in f.script()]

    (scheduled,) = kernels(DEPTHWISE["5x5-stride2"][0])
    assert "T.parallel" in scheduled and "T.vectorized" in scheduled
    assert kernels(DEPTHWISE["two-per-group"][0]) == []


@pytest.mark.parametrize("lanes, width, tile", [(16, None, (4, 4)), (16, 20, (4, 4)), (16, 14, (2, 7)),
                                               (16, 10, (4, 5)), (8, 14, (2, 4)), (4, None, (2, 4))])
def test_register_tiles_pad_static_widths_least(lanes, width, tile):
    assert cpu_conv.register_tile(lanes, width) == tile


@pytest.mark.parametrize("features, lanes", [(["avx512f", "avx2", "avx"], 16), (["avx2", "avx"], 8), (["sse4.2"], 4)])
def test_vectors_are_as_wide_as_the_cpu_has(features, lanes):
    assert cpu_conv.lanes(features) == lanes
    packed = cpu_conv.pack_weight(np.arange(3 * 2 * 1 * 1, dtype=np.float32).reshape(3, 2, 1, 1), lanes)
    assert packed.shape == (1, 2, 1, 1, lanes)
    np.testing.assert_array_equal(packed[0, :, 0, 0, :3], np.arange(6, dtype=np.float32).reshape(3, 2).T)
    assert not packed[..., 3:].any()  # channels past O are zero


def gemm(k, m, **attrs):
    """``Gemm(x [N, k], W, b)`` with ``m`` outputs (W as ``attrs`` lay it out), then Relu."""
    w = weight(m, k, 1, 1)[:, :, 0, 0]
    if not attrs.get("transB"):
        w = np.ascontiguousarray(w.T)
    return model([node("Gemm", ["x", "w", "b"], ["g"], **attrs), node("Relu", ["g"], ["y"])],
                 [("x", F, ["N", k])], [("y", F, None)], {"w": w, "b": uniform(m, -0.5, 0.5)})


DENSE = {
    # the box heads: ROI counts no multiple of the row tile, features of the vector
    "transB": (gemm(96, 64, transB=1), [5, 16, 1, 0]),
    "odd-features": (gemm(40, 91), [9, 3]),
    "matmul-node": (model([node("MatMul", ["x", "w"], ["y"])], [("x", F, ["N", 33])], [("y", F, None)],
                          {"w": weight(33, 20, 1, 1)[:, :, 0, 0]}), [7, 2]),
}
# walked in blocks of K (fc6's case: weights too large for the cache), here
# with the size limit set to 0
K_BLOCKED = {
    "k-blocks": (gemm(1536, 80, transB=1), [13, 1, 0]),
    "k-blocks-4-vectors": (gemm(768, 64), [7]),
}


@pytest.mark.parametrize("case", DENSE)
def test_matmuls_match_onnxruntime(onnx_check, case):
    m, rows = DENSE[case]
    k = m.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    onnx_check(m, [[uniform((n, k), -2, 2)] for n in rows], atol=1e-5)


@pytest.mark.parametrize("case", K_BLOCKED)
def test_k_blocked_matmuls_match_onnxruntime(onnx_check, monkeypatch, case):
    monkeypatch.setattr(cpu_dense, "K_BLOCKED_BYTES", 0)
    m, rows = K_BLOCKED[case]
    k = m.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    onnx_check(m, [[uniform((n, k), -2, 2)] for n in rows], atol=1e-5)


def scheduled_dense(m) -> str:
    mod = lower(from_onnx(m), target_schedule.host_target())
    (scheduled,) = [cpu_schedule.schedule(f).script() for f in mod.functions.values() if "tirx" in type(f).__module__]
    return scheduled


def test_matmuls_by_constants_take_the_packed_kernel(monkeypatch):
    scheduled = scheduled_dense(DENSE["transB"][0])
    assert f"{cpu_dense.BLOCK}_local" in scheduled and "T.vectorized" in scheduled
    assert "k_0" not in scheduled  # (weights small enough: K not blocked)
    monkeypatch.setattr(cpu_dense, "K_BLOCKED_BYTES", 0)
    blocked = scheduled_dense(K_BLOCKED["k-blocks"][0])  # sums kept in the packed result between K blocks
    assert f"{cpu_dense.BLOCK}_local" not in blocked and "k_0" in blocked and "T.vectorized" in blocked


@pytest.mark.parametrize("depth, column_bytes, block", [(12544, 3 << 20, 256), (4608, 4608 * 256, 256),
                                                       (1024, 1 << 18, None), (4099, 4 << 20, None),
                                                       (6000, 6 << 20, 250)])
def test_k_blocks_divide_k(depth, column_bytes, block):
    assert cpu_dense.k_block(depth, column_bytes) == block


def test_dense_packing():
    w = np.arange(2 * 3, dtype=np.float32).reshape(2, 3)  # [K, M]
    packed = cpu_dense.pack_weight(w, 4)
    assert packed.shape == (1, 2, 4)
    np.testing.assert_array_equal(packed[0, :, :3], w)
    assert not packed[..., 3:].any()


def conv_transpose(c, o, kernel, **attrs):
    w = (rng.standard_normal((c, o, *kernel)) / np.sqrt(c)).astype(np.float32)
    return model([node("ConvTranspose", ["x", "w", "b"], ["c"], kernel_shape=list(kernel), **attrs),
                  node("Relu", ["c"], ["y"])], [("x", F, ["N", c, "H", "W"])], [("y", F, None)],
                 {"w": w, "b": uniform(o, -0.5, 0.5)})


TRANSPOSED = {
    # Mask R-CNN's mask upsampling: each pixel makes a 2x2 block
    "2x2-stride2": (conv_transpose(32, 24, (2, 2), strides=[2, 2]), [(3, 14, 14), (0, 14, 14), (1, 3, 5)]),
    "3x2-stride3x2": (conv_transpose(8, 5, (3, 2), strides=[3, 2]), [(2, 4, 7)]),
    # overlapping blocks: TVM's kernel
    "3x3-stride2-padded": (conv_transpose(8, 8, (3, 3), strides=[2, 2], pads=[1, 1, 1, 1]), [(1, 5, 6)]),
}


@pytest.mark.parametrize("case", TRANSPOSED)
def test_transposed_convolutions_match_onnxruntime(onnx_check, case):
    m, shapes = TRANSPOSED[case]
    c = m.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    onnx_check(m, [[uniform((n, c, h, w), -2, 2)] for n, h, w in shapes], atol=1e-5)


def test_non_overlapping_transposed_convolutions_take_the_packed_kernel():
    assert len(packed_kernels(TRANSPOSED["2x2-stride2"][0])) == 1
    assert packed_kernels(TRANSPOSED["3x3-stride2-padded"][0]) == []


def test_convolutions_keep_the_sizes_relax_infers():
    """Strided packed and depthwise convolutions of an image of any size:
    after legalization the output's sizes are Relax's, simplified as its
    shape inference writes them (in other terms they grow with every layer
    and make the kernels after them other kernels)."""
    nodes = [node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             node("Conv", ["a", "w2"], ["b"], kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2], group=16),
             node("Conv", ["b", "w3"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0])]
    m = model(nodes, [("x", F, [1, 8, "H", "W"])], [("y", F, None)],
              {"w1": weight(16, 8, 3, 3), "w2": weight(16, 1, 5, 5), "w3": weight(32, 16, 3, 3)})
    imported = from_onnx(m)
    lowered = lower(imported, target_schedule.host_target())
    assert len(packed_kernels(m)) == 2
    assert tvm_ffi.structural_equal(lowered["main"].ret_ty, imported["main"].ret_ty), \
        (lowered["main"].ret_ty, imported["main"].ret_ty)
