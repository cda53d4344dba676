"""Indices read from data are checked where a kernel reads them, on every
device, without a sync: an index out of range raises IndexError naming the
ONNX node, the index and its bounds, and nothing computed after it is
handed out as valid (docs/guarantees.md#indices-from-data).

One model holds every operator that reads indices or axes from tensor
values, each fed by an input of its own, so that one compile per device
serves every case; ONNX's reference gives the results of valid indices
(onnxruntime has no RoiAlign of opset 22 nor TensorScatter)."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import shapefn
from conftest import DEVICES, opencl

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

INT64_MIN = -(2**63)
FAR = 2**40
F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
vi = helper.make_tensor_value_info


def _index_model():
    nodes = [
        helper.make_node("Gather", ["x", "rows"], ["gathered_rows"], axis=0, name="rows"),
        helper.make_node("Gather", ["x", "cols"], ["gathered_cols"], axis=1, name="cols"),
        helper.make_node("GatherElements", ["x", "elements"], ["gathered_elements"], axis=1, name="elements"),
        helper.make_node("GatherND", ["x", "tuples"], ["gathered_tuples"], name="tuples"),
        helper.make_node("ScatterElements", ["x", "targets", "updates"], ["scattered"], axis=1, name="scatter"),
        helper.make_node("ScatterND", ["x", "slots", "rows_of_updates"], ["scattered_rows"], name="scatter_rows"),
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["sliced"], name="slice"),
        helper.make_node("ReverseSequence", ["x", "lengths"], ["reversed"], batch_axis=0, time_axis=1,
                         name="reverse"),
        helper.make_node("Compress", ["x", "keep"], ["kept"], axis=1, name="compress"),
        helper.make_node("Unsqueeze", ["x", "zero"], ["x3"], name="as_cache"),
        helper.make_node("TensorScatter", ["x3", "step", "write_at"], ["cache"], name="write"),
        helper.make_node("Reshape", ["x", "nchw"], ["maps"], name="as_maps"),
        helper.make_node("RoiAlign", ["maps", "rois", "batches"], ["pooled"], output_height=2, output_width=2,
                         sampling_ratio=2, name="pool"),
    ]
    inputs = [vi("x", F, ["n", "m"]), vi("rows", I64, ["k"]), vi("cols", I64, ["k"]),
              vi("elements", I64, ["n", 2]), vi("tuples", I64, ["t", 2]), vi("targets", I64, ["n", 2]),
              vi("updates", F, ["n", 2]), vi("slots", I64, ["s", 1]), vi("rows_of_updates", F, ["s", "m"]),
              vi("axes", I64, [1]), vi("lengths", I64, ["n"]), vi("keep", BOOL, ["c"]),
              vi("step", F, [1, "u", "m"]), vi("write_at", I64, [1]), vi("rois", F, ["r", 4]),
              vi("batches", I64, ["r"])]
    outputs = [vi(name, F, None) for name in ("gathered_rows", "gathered_cols", "gathered_elements",
                                               "gathered_tuples", "scattered", "scattered_rows", "sliced",
                                               "reversed", "kept", "cache", "pooled")]
    inits = [helper.make_tensor("starts", I64, [1], [1]), helper.make_tensor("ends", I64, [1], [3]),
             helper.make_tensor("zero", I64, [1], [0]), helper.make_tensor("nchw", I64, [4], [2, 1, 2, 10])]
    graph = helper.make_graph(nodes, "indices", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    return model


MODEL = _index_model()


def good_inputs() -> dict:
    return {
        "x": np.arange(40, dtype=np.float32).reshape(4, 10), "rows": np.array([0, 3, -4, -1]),
        "cols": np.array([9, -10, 0, 5]), "elements": np.array([[0, 9], [-10, -1], [4, 5], [1, 1]]),
        "tuples": np.array([[3, 9], [-4, -10]]), "targets": np.array([[0, 9], [-10, -1], [4, 5], [1, 2]]),
        "updates": np.ones((4, 2), np.float32), "slots": np.array([[3], [-4]]),
        "rows_of_updates": np.full((2, 10), 7, np.float32), "axes": np.array([-1]),
        "lengths": np.array([0, 10, 3, 1]), "keep": np.array([True, False] * 5),
        "step": np.full((1, 2, 10), 5, np.float32), "write_at": np.array([2]),
        "rois": np.array([[0, 0, 4, 1], [1, 0, 9, 1]], np.float32), "batches": np.array([1, 0]),
    }


def with_index(name: str, position, value) -> list:
    feeds = good_inputs()
    feeds[name] = feeds[name].copy()
    feeds[name][position] = value
    return [feeds[i.name] for i in MODEL.graph.input]


# Each index input: the position changed, its ONNX node and op, and the
# bounds [low, high) ONNX gives the index there.
BOUNDS = [
    ("rows", (1,), "rows", "Gather", -4, 4), ("cols", (2,), "cols", "Gather", -10, 10),
    ("elements", (2, 1), "elements", "GatherElements", -10, 10),
    ("tuples", (1, 0), "tuples", "GatherND", -4, 4), ("tuples", (0, 1), "tuples", "GatherND", -10, 10),
    ("targets", (3, 0), "scatter", "ScatterElements", -10, 10), ("slots", (1, 0), "scatter_rows", "ScatterND", -4, 4),
    ("axes", (0,), "slice", "Slice", -2, 2), ("lengths", (2,), "reverse", "ReverseSequence", 0, 11),
    ("write_at", (0,), "write", "TensorScatter", 0, 3), ("batches", (1,), "pool", "RoiAlign", 0, 2),
]


def _cases():
    for name, position, node, op, low, high in BOUNDS:
        for value in sorted({low - 1, high, FAR, -FAR, INT64_MIN}):
            yield pytest.param(name, position, node, op, low, high, value, id=f"{name}{list(position)}={value}")


@functools.cache
def _compiled(device: str) -> shapefn.Executable:
    return shapefn.compile(shapefn.from_onnx(MODEL), device)


def _vm(device: str) -> shapefn.VirtualMachine:
    return shapefn.VirtualMachine(_compiled(device), shapefn.sim(strict=True) if device == "sim" else device)


DEVICES_AND_HOST = ["host", *DEVICES]


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
def test_indices_at_their_bounds_match_onnx_reference(device):
    vm = _vm(device)
    feeds = good_inputs()
    args = [feeds[i.name] for i in MODEL.graph.input]
    want = ReferenceEvaluator(MODEL).run(None, feeds)
    for got, expected, info in zip(vm(*args), want, MODEL.graph.output, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, err_msg=info.name)


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
@pytest.mark.parametrize("name, position, node, op, low, high, value", _cases())
def test_an_index_out_of_range_raises_naming_the_node_the_index_and_its_bounds(device, name, position, node, op, low,
                                                                               high, value):
    args = with_index(name, position, value)
    vm = _vm(device)
    message = rf"ONNX node '{node}' \({op}\): .* is {value}, outside \[{low}, {high}\)"
    with pytest.raises(IndexError, match=message):
        outs = vm(*args)
        for out in outs:  # (a call that ends without a sync raises when its results are read)
            out.numpy()
    # The VM goes on, and the next call is not blamed.
    feeds = good_inputs()
    for out in vm(*[feeds[i.name] for i in MODEL.graph.input]):
        out.numpy()


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
def test_a_compress_condition_true_past_the_axis_raises(device):
    """ONNX's reference (numpy) raises; onnxruntime drops what lies past it."""
    feeds = good_inputs()
    feeds["keep"] = np.array([False] * 10 + [True])
    with pytest.raises(IndexError, match=r"ONNX node 'compress' \(Compress\): .* is 10, outside \[-10, 10\)"):
        for out in _vm(device)(*[feeds[i.name] for i in MODEL.graph.input]):
            out.numpy()


def _embedding_model(vocabulary=8):
    """An LLM's first step: rows of a table by token ids, scaled: no sync on a device."""
    table = helper.make_tensor("table", F, [vocabulary, 4], np.arange(vocabulary * 4, dtype=np.float32))
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0, name="embed"),
             helper.make_node("Mul", ["rows", "two"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "embed", [vi("ids", I64, ["b", "s"])], [vi("y", F, ["b", "s", 4])],
                              initializer=[table, helper.make_tensor("two", F, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _double_model():
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="double")], "double",
                              [vi("x", F, ["b", "s", 4])], [vi("y", F, ["b", "s", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("device", DEVICES)
def test_a_call_that_makes_no_sync_still_makes_none_and_its_results_raise_when_read(device):
    device = shapefn.sim(strict=True) if device == "sim" else device  # (one for both VMs)
    vm = _vm_of(_embedding_model(), device)
    ids = np.array([[1, 7, 0]])
    vm.reset_counters()
    good = vm(ids)
    assert vm.counters["syncs"] == 0 and vm.counters["d2h_copies"] == 0
    np.testing.assert_array_equal(good.numpy(), 2 * np.arange(32, dtype=np.float32).reshape(8, 4)[ids])
    vm.reset_counters()
    bad = vm(np.array([[1, 8, 0]]))  # returns: the device has not been waited for
    assert vm.counters["syncs"] == 0 and vm.counters["d2h_copies"] == 0
    # Whatever reads the result first (here, a later call's result read
    # back before it) finds the failure, and it stays with that result.
    later = vm(ids)
    np.testing.assert_array_equal(later.numpy(), good.numpy())
    for _ in range(2):  # (the node scaling it is fused with the gather: the kernel names both)
        with pytest.raises(IndexError, match=r"ONNX node 'embed' \(Gather\) and ONNX node 'scale' \(Mul\): "
                                             r"take: index along axis 0 is 8, outside \[-8, 8\)"):
            bad.numpy()
    with pytest.raises(IndexError, match="is 8, outside"):
        np.asarray(bad)
    # What is computed from the bad result on the device inherits its check.
    double = _vm_of(_double_model(), device)
    derived = double(bad)
    with pytest.raises(IndexError, match=r"ONNX node 'embed' \(Gather\)"):
        derived.numpy()
    np.testing.assert_array_equal(double(good).numpy(), 2 * good.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_a_bad_index_is_found_at_the_next_sync_before_what_it_computed_is_read(device):
    """NonZero of a gathered row: the VM reads the count back (a sync it
    makes anyway), and raises there, not with a count computed from it."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["row"], axis=0, name="pick"),
             helper.make_node("NonZero", ["row"], ["where"], name="where")]
    graph = helper.make_graph(nodes, "g", [vi("x", F, ["n", 5]), vi("i", I64, [])], [vi("where", I64, [1, "k"])])
    vm = _vm_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), device)
    x = np.array([[0, 1, 0, 2, 3], [4, 0, 0, 0, 5]], np.float32)
    vm.reset_counters()
    np.testing.assert_array_equal(vm(x, np.array(1)).numpy(), [[0, 4]])
    syncs = vm.counters["syncs"]
    vm.reset_counters()
    with pytest.raises(IndexError, match=r"ONNX node 'pick' \(Gather\): take: index along axis 0 is -3, "
                                         r"outside \[-2, 2\)"):
        vm(x, np.array(-3))
    assert vm.counters["syncs"] == syncs  # the same syncs as a good call, no more
    np.testing.assert_array_equal(vm(x, np.array(-2)).numpy(), [[1, 3, 4]])


def _vm_of(model, device):
    """A VM of ``model`` on ``device`` (a name, "sim" a strict one; or a device)."""
    if not isinstance(device, str):
        return shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), "sim"), device)
    return shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), device),
                                  shapefn.sim(strict=True) if device == "sim" else device)


@pytest.mark.parametrize("device", ["host", "sim", pytest.param("opencl", marks=opencl)])
def test_counters_of_a_checked_call_are_those_of_the_same_call_unchecked(device):
    """Checks cost no copy and no sync: a gather of rows by ids uploads the
    ids and nothing else crosses, as before checks existed."""
    vm = _vm_of(_embedding_model(), device)
    vm.reset_counters()
    vm(np.array([[1, 2]]))
    c = vm.counters
    assert (c["d2h_copies"], c["d2h_bytes"], c["syncs"], c["kernel_calls"]) == (0, 0, 0, 1)
    assert c["h2d_copies"] == (0 if device == "host" else 1)


def test_a_constant_index_out_of_range_is_left_for_the_run_to_refuse():
    """Folding constants at compile time runs the checked kernel too: a bad
    constant index is not folded into a (clamped) constant, and the run
    raises. (From ONNX, a Gather of constants is folded by the importer,
    which refuses such an index naming the node.)"""
    from tvm import relax

    x = relax.Var("x", relax.TensorType([2], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        table = relax.const(np.arange(6, dtype=np.float32).reshape(3, 2))
        row = bb.emit(relax.op.take(table, relax.const(np.int64(3)), axis=0))
        bb.emit_func_output(bb.emit(relax.op.add(row, x)))
    vm = shapefn.VirtualMachine(shapefn.compile(bb.get(), "host"), "host")
    with pytest.raises(IndexError, match=r"take: index along axis 0 is 3, outside \[-3, 3\)"):
        vm(np.zeros(2, np.float32))


@pytest.mark.parametrize("target", ["llvm", pytest.param("opencl", marks=opencl)])
def test_tvms_vm_clamps_instead(target):
    """TVM's own VM has no check records: there an index out of range is
    clamped, as docs/relax_vm.md says (on a GPU too, whose kernel forms
    check their indices as the CPU's do)."""
    import tvm
    from tvm import relax

    from shapefn.compiler import relax_vm

    exe = relax_vm.runnable(tvm.compile(shapefn.from_onnx(_embedding_model()), target=target,
                                             relax_pipeline=relax_vm.pipeline(target)))
    device = tvm.cpu() if target == "llvm" else tvm.opencl()
    vm = relax.VirtualMachine(exe, device)
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    got = vm["main"](tvm.runtime.tensor(np.array([[9, -9]]), device)).numpy()
    np.testing.assert_array_equal(got, 2 * table[[[7, 0]]])


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
def test_an_index_read_in_one_branch_of_a_concatenation_is_checked_only_there(device):
    """A row of Faster R-CNN's RoI pooling: a batch index, then four
    coordinates gathered by constant indices. Fused into one kernel, the
    gathered half reads its index only past the first column: checking it
    in every column reads the index array at -1 (a false IndexError on a
    GPU, and a read outside a buffer)."""
    nodes = [helper.make_node("Gather", ["boxes", "order"], ["coords"], axis=1, name="coords"),
             helper.make_node("Concat", ["batch", "coords"], ["rois"], axis=1, name="rois")]
    graph = helper.make_graph(nodes, "rois", [vi("batch", F, ["n", 1]), vi("boxes", F, ["n", 4])],
                              [vi("rois", F, ["n", 5])],
                              initializer=[helper.make_tensor("order", I64, [4], [1, 0, 3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    batch, boxes = np.zeros((300, 1), np.float32), rng.uniform(0, 1, (300, 4)).astype(np.float32)
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), device),
                                shapefn.sim(strict=True) if device == "sim" else device)
    np.testing.assert_array_equal(vm(batch, boxes).numpy(), np.concatenate([batch, boxes[:, [1, 0, 3, 2]]], 1))


def _node_count(node) -> int:
    import tvm_ffi
    from tvm import ir

    count = [0]

    def visit(_):
        count[0] += 1

    tvm_ffi.structural_walk(node, [(ir.Expr, visit)])
    return count[0]


def _chained_gathers(depth: int):
    """``out[0] = a[a[...a[0]...]]``, each index checked and counted from the end."""
    from tvm import tirx

    from shapefn.compiler.passes.index_checks import from_end

    n = tirx.Var("n", "int64")
    a = tirx.decl_buffer([n], "int64", name="a")
    out = tirx.decl_buffer([1], "int64", name="out")
    index = tirx.const(0, "int64")
    for level in range(depth):
        index = tirx.BufferLoad(a, [from_end(index, n, f"gather {level}: index")])
    return tirx.PrimFunc([a, out], tirx.BufferStore(out, index, [tirx.const(0, "int64")]))


def test_checks_of_indices_read_at_checked_indices_grow_with_the_chain_not_exponentially():
    # An index read at a checked index (a gather of a gather, a resize's
    # coordinate) sits inside a condition of its own check: making each
    # branch's checks conditional on it once nested conditions inside
    # conditions, the kernel growing fourfold per level (a Resize on OpenCL
    # whose compile never ended). Each level adds the same checks.
    from shapefn.compiler.passes.index_checks import materialize

    sizes = [_node_count(materialize(_chained_gathers(depth)).body) for depth in (1, 2, 3)]
    assert sizes[2] - sizes[1] <= 1.5 * (sizes[1] - sizes[0]), sizes  # (without: 481, 2367, 9362)
