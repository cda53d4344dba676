"""Bad input anywhere raises a clear exception naming the problem, and the VM
stays usable: arguments, shape-function results, masks, ONNX models, and
kernels that fail at run time; on sim and on a real OpenCL device."""
import functools

import numpy as np
import pytest
import tvm_ffi
from onnx import TensorProto, helper
from tvm import relax, tirx

import shapefn
import shapefn.frontend.onnx.importer
from conftest import DEVICES, device_target, opencl
from shapefn import InvalidOnnxModel, Param, ProgramBuilder, UnsupportedOnnxOp
from shapefn.compiler import hand_built as kernels

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def check_still_works(vm, model, seed=0):
    args = model.inputs(np.random.default_rng(seed))
    for got, want in zip(vm(*args), model.reference(*args), strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


# -- arguments ---------------------------------------------------------------

def good_args(model):
    return list(model.inputs(np.random.default_rng(1)))


def replaced(args, index, value):
    return args[:index] + [value] + args[index + 1:]


ARGUMENT_CASES = {
    # name: (make bad args from good ones, exception, message)
    "too few": (lambda a: a[:1], TypeError, r"'main' takes 4 arguments, got 1"),
    "too many": (lambda a: a + [a[1]], TypeError, r"'main' takes 4 arguments, got 5"),
    "dtype": (lambda a: replaced(a, 0, a[0].astype(np.float64)), TypeError,
              r"'main' argument 0 \('x'\) must have dtype float32, got float64"),
    "int dtype": (lambda a: replaced(a, 2, a[2].astype(np.int32)), TypeError,
                  r"'main' argument 2 \('end'\) must have dtype int64, got int32"),
    "rank": (lambda a: replaced(a, 0, a[0][None]), ValueError,
             r"'main' argument 0 \('x'\) must have rank 2, got rank 3"),
    "scalar for a vector": (lambda a: replaced(a, 1, np.int64(0)), ValueError,
                            r"'main' argument 1 \('begin'\) must have rank 1, got rank 0"),
    "shape": (lambda a: replaced(a, 3, np.ones(3, np.int64)), ValueError,
              r"'main' argument 3 \('strides'\) dimension 0 must be 2, got 3"),
    "not an array": (lambda a: replaced(a, 2, [1, 2]), TypeError,
                     r"argument 2 must be a numpy array, a DLPack tensor or a shapefn.Tensor, got list"),
    "unsupported dtype": (lambda a: replaced(a, 0, a[0].astype(np.complex64)), TypeError,
                          r"argument 0 has dtype complex64; the VM takes bool, int, uint and float arrays"),
    "strings": (lambda a: replaced(a, 0, np.array([["a"]])), TypeError, r"argument 0 has dtype <U1"),
    "value the op rejects": (lambda a: replaced(a, 3, np.array([1, 0], np.int64)), ValueError,
                             r"relax.dynamic_strided_slice: strides\[1\] is 0"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ARGUMENT_CASES, ids=list(ARGUMENT_CASES))
def test_bad_arguments_name_the_argument_and_what_was_expected(slice_nonzero_models, case, device):
    make, error, message = ARGUMENT_CASES[case]
    model = slice_nonzero_models(device)
    vm = shapefn.VirtualMachine(model.exe, device)
    with pytest.raises(error, match=message):
        vm(*make(good_args(model)))
    check_still_works(vm, model)


@pytest.mark.parametrize("device", DEVICES)
def test_byte_swapped_and_strided_arrays_are_read_by_value(slice_nonzero_models, device):
    model = slice_nonzero_models(device)
    vm = shapefn.VirtualMachine(model.exe, device)
    x, begin, end, strides = good_args(model)
    wide = np.repeat(x, 2, axis=1)[:, ::2]  # not contiguous
    got = vm(wide.astype(">f4"), begin.astype(">i8"), end, strides.astype(">i8"))
    for g, w in zip(got, model.reference(x, begin, end, strides), strict=True):
        np.testing.assert_array_equal(g.numpy(), w)


def test_tensor_of_another_sim_is_named(slice_nonzero_model):
    """Sim only: two instances of one kind of device."""
    model = slice_nonzero_model
    args = good_args(model)
    on_other_sim = shapefn.VirtualMachine(model.exe, shapefn.sim())(*args)[0]
    vm = shapefn.VirtualMachine(model.exe, shapefn.sim())
    with pytest.raises(ValueError, match=r"argument 0 \('x'\) is on device 'sim', another instance than this VM's"):
        vm(on_other_sim, *model.inputs(np.random.default_rng(2))[1:])
    check_still_works(vm, model)


@opencl
def test_tensor_of_another_kind_of_device_is_named(slice_nonzero_models):
    models = {device: slice_nonzero_models(device) for device in ("sim", "opencl")}
    args = good_args(models["sim"])
    vms = {device: shapefn.VirtualMachine(model.exe, device) for device, model in models.items()}
    results = {device: vm(*args)[0] for device, vm in vms.items()}
    for device, other in [("sim", "opencl"), ("opencl", "sim")]:
        with pytest.raises(ValueError, match=rf"argument 0 \('x'\) is on device '{results[other].device}', "
                                             rf"this VM runs on '{results[device].device}'; pass tensor.numpy\(\)"):
            vms[device](results[other], *args[1:])
        check_still_works(vms[device], models[device])


@pytest.mark.parametrize("device", DEVICES)
def test_a_host_vm_refuses_a_tensor_of_a_device(slice_nonzero_models, device):
    """As the devices refuse each other's tensors (it used to copy it silently)."""
    model = slice_nonzero_models(device)
    on_device = shapefn.VirtualMachine(model.exe, device)(*good_args(model))
    host = slice_nonzero_models("host")
    vm = shapefn.VirtualMachine(host.exe, "host")
    with pytest.raises(ValueError, match=rf"argument 0 \('x'\) is on device '{on_device[0].device}', this VM runs on "
                                         r"'host'; pass tensor.numpy\(\)"):
        vm(on_device[0], *good_args(host)[1:])
    check_still_works(vm, host)


# -- shape functions -----------------------------------------------------------

@pytest.fixture(scope="module")
def cube_vm(tmp_path_factory):
    """``cube_vm(device)``: a VM whose ``main(k: i64[1])`` allocates a
    float32 tensor of shape ``[k, k, k]`` on the device (a sim with a 1 GiB
    arena), sized by a Python shape function."""
    shapefn.set_cache_dir(tmp_path_factory.mktemp("cache"))
    try:
        @shapefn.register_shape_func("test.bad_input.cube", [True], override=True)
        def cube(k):
            return [k[0], k[0], k[0]]

        pb = ProgramBuilder()
        fb = pb.function("main", [Param("k", "int64", [1])])
        (shape,) = fb.shape_func("test.bad_input.cube", list(fb.args))
        fb.ret(fb.alloc_tensor("device", shape, "float32"))
        exe = pb.build()

        @functools.cache
        def vm_on(device):
            vm = shapefn.VirtualMachine(exe, shapefn.sim(arena_bytes=1 << 30) if device == "sim" else device)
            vm(np.array([2], np.int64))  # compiles the shape function
            return vm

        yield vm_on
    finally:
        shapefn.set_cache_dir(None)


# 2**60 elements fit; their 2**62 bytes do too, but not in the device.
OUT_OF_MEMORY = {"sim": r"sim: out of device memory allocating 4611686018427387904 bytes",  # the 1 GiB arena
                 "opencl": r"opencl:0: cannot allocate 4611686018427387904 bytes in one buffer: the device's "
                           r"limit \(CL_DEVICE_MAX_MEM_ALLOC_SIZE\) is \d+ bytes"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k, error, message", [
    (-3, ValueError, r"shape function of 'test.bad_input.cube' returned a negative dimension -3 for output 0"),
    # 2**63 elements: too many for int64.
    (1 << 21, ValueError, r"shape function of 'test.bad_input.cube' returned \[2097152, 2097152, 2097152\] "
                          r"for output 0, whose element count overflows int64"),
    (1 << 20, MemoryError, OUT_OF_MEMORY),
], ids=["negative", "element count overflow", "out of memory"])
def test_shape_function_results_no_tensor_can_have(cube_vm, device, k, error, message):
    cube_vm = cube_vm(device)
    message = message[device] if isinstance(message, dict) else message
    high_water = cube_vm.pool_high_water_bytes()
    with pytest.raises(error, match=message):
        cube_vm(np.array([k], np.int64))
    assert cube_vm.pool_high_water_bytes() == high_water  # a failed allocation is not counted
    assert cube_vm(np.array([3], np.int64)).shape == (3, 3, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_byte_size_overflow_names_the_tensor(device):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("s", "int64", [2])])
    (shape,) = fb.shape_func("dyn.zeros", list(fb.args))
    fb.ret(fb.alloc_tensor("device", shape, "float64"))
    vm = shapefn.VirtualMachine(pb.build(), device)
    # 2**62 elements are countable; 2**65 bytes are not.
    with pytest.raises(ValueError, match=r"the size in bytes of a float64 tensor of shape "
                                         r"\[2147483648, 2147483648\] overflows int64"):
        vm(np.array([1 << 31, 1 << 31], np.int64))
    with pytest.raises(ValueError, match=r"relax.zeros: shape\[1\] is -2, dims must be non-negative"):
        vm(np.array([2, -2], np.int64))
    assert vm(np.array([2, 3], np.int64)).shape == (2, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_shape_function_that_fails_to_build_names_the_op(tmp_path, device):
    shapefn.set_cache_dir(tmp_path)
    try:
        # No probe signature traces it, so it is checked when first compiled.
        @shapefn.register_shape_func("test.bad_input.not_a_shape", [True], override=True)
        def not_a_shape(k):
            return "rows"

        pb = ProgramBuilder()
        fb = pb.function("main", [Param("k", "int64", [1])])
        (shape,) = fb.shape_func("test.bad_input.not_a_shape", list(fb.args))
        fb.ret(shape)
        vm = shapefn.VirtualMachine(pb.build(), device)
        for _ in range(2):  # and again: the failure is not cached as a success
            with pytest.raises(RuntimeError, match=r"compiling the shape function of 'test.bad_input.not_a_shape' "
                                                   r"for \(int64:1\) failed: .*returned str"):
                vm(np.array([1], np.int64))
    finally:
        shapefn.set_cache_dir(None)


# -- masks -----------------------------------------------------------------------

def test_mask_longer_than_the_function_takes():
    with pytest.raises(ValueError, match=r"the shape function of 'test.bad_input.mask' takes 1 inputs "
                                         r"but the mask \[False, True\] has 2"):
        shapefn.register_shape_func("test.bad_input.mask", [False, True], lambda k: [k[0]])
    with pytest.raises(ValueError, match="data_dependent must not be empty"):
        shapefn.register_shape_func("test.bad_input.mask", [], lambda k: [k[0]])
    with pytest.raises(KeyError, match="test.bad_input.mask"):
        shapefn.data_dependence("test.bad_input.mask")  # nothing was registered


@pytest.mark.parametrize("device", DEVICES)
def test_program_calling_a_shape_function_with_the_wrong_arity(device):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("s", "int64", [2])])
    (shape,) = fb.shape_func("dyn.zeros", [fb.args[0], fb.args[0]])
    fb.ret(shape)
    with pytest.raises(ValueError, match=r"'main' calls the shape function of 'relax.zeros' with 2 inputs, "
                                         r"it takes 1"):
        shapefn.VirtualMachine(pb.build(), device)


# -- ONNX --------------------------------------------------------------------------

def onnx_model(nodes, inputs=("x",), outputs=("y",), opsets=(("", 17),)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["n"]) for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_unsupported_onnx_ops_are_all_listed_with_their_nodes_before_conversion(monkeypatch):
    split = helper.make_node("StringSplit", ["x"], ["t", "n"], name="split_in_branch")
    t = helper.make_tensor_value_info("t", TensorProto.FLOAT, None)
    then_branch = helper.make_graph([split], "then", [], [t])
    else_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="relu")], "else", [],
                                    [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    model = onnx_model([
        helper.make_node("Relu", ["x"], ["a"], name="supported"),
        helper.make_node("TfIdfVectorizer", ["a"], ["b"], name="tfidf1"),
        helper.make_node("TfIdfVectorizer", ["b"], ["c"]),
        helper.make_node("Constant", [], ["cond"], value=cond),
        helper.make_node("If", ["cond"], ["d"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Fancy", ["d"], ["y"], name="custom", domain="my.ops"),
    ], opsets=(("", 17), ("my.ops", 1)))

    def no_conversion(*args):
        raise AssertionError("a node was converted before the model was checked")

    monkeypatch.setattr(shapefn.frontend.onnx.importer._Importer, "construct_node", no_conversion)
    with pytest.raises(UnsupportedOnnxOp) as info:
        shapefn.from_onnx(model)
    assert str(info.value) == ("ONNX operators not supported: StringSplit (node 'split_in_branch'); "
                               "TfIdfVectorizer (nodes 'tfidf1', (unnamed, output 'c')); my.ops.Fancy (node 'custom')")
    assert info.value.ops == {"StringSplit": ["'split_in_branch'"],
                              "TfIdfVectorizer": ["'tfidf1'", "(unnamed, output 'c')"], "my.ops.Fancy": ["'custom'"]}
    assert isinstance(info.value, NotImplementedError)


@pytest.mark.parametrize("nodes, message", [
    ([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add0")],
     r"input 'nowhere' of node: \nname: add0 OpType: Add\n is not output of any previous nodes"),
    ([helper.make_node("Add", ["x"], ["y"], name="add1")], r"Node\(add1\) .*has input size 1 not in range"),
    ([helper.make_node("Relu", ["x"], ["z"], name="relu")], r"Graph output 'y' is not an output of any node"),
    ([helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=2.0)], r"Unrecognized attribute: alpha"),
])
def test_malformed_onnx_models_raise_invalid_onnx_model(nodes, message):
    with pytest.raises(InvalidOnnxModel, match=r"the ONNX model is malformed: .*" + message):
        shapefn.from_onnx(onnx_model(nodes))


@pytest.mark.parametrize("nodes, message", [
    # (found by fuzzing: TVM refused these while compiling, naming nothing)
    ([helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=3)],
     r"\(op_type:Flatten, node name: flat\): .*Invalid value\(3\) for attribute 'axis'"),
    ([helper.make_node("Transpose", ["x"], ["y"], name="turn", perm=[1, 0])],
     r"\(op_type:Transpose, node name: turn\): .*Invalid attribute perm"),
])
def test_nodes_onnx_shape_inference_refuses_name_the_node(nodes, message):
    """What onnxruntime refuses when it loads a model, by ONNX's shape
    inference, is an InvalidOnnxModel naming the node, before anything is
    converted."""
    import onnxruntime as ort

    model = onnx_model(nodes)
    with pytest.raises(Exception, match="ShapeInferenceError|TypeInferenceError"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(InvalidOnnxModel, match=r"the ONNX model fails ONNX's shape inference: .*" + message):
        shapefn.from_onnx(model)


@pytest.mark.parametrize("nodes, error, message", [
    # an input of a type the op's schema does not take (TVM would fail to
    # compile the kernel), named by the node's output when it has no name
    ([helper.make_node("Xor", ["x", "x"], ["y"])], InvalidOnnxModel,
     r"ONNX node Xor computing 'y': input 0 \('x'\) is tensor\(float\), which Xor does not take"),
    # inputs one type parameter of the schema binds, of different types
    ([helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BOOL, name="to_bool"),
      helper.make_node("Where", ["b", "x", "b"], ["y"], name="pick")], InvalidOnnxModel,
     r"ONNX node 'pick' \(Where\): inputs 1 \('x'\) and 2 \('b'\) must have one type, "
     r"got tensor\(float\) and tensor\(bool\)"),
    # inputs of different ranks, refused (as onnxruntime does) by ONNX's shape inference, naming the node
    ([helper.make_node("Concat", ["x", "m"], ["y"], name="cat", axis=0)], InvalidOnnxModel,
     r"fails ONNX's shape inference: .*\(op_type:Concat, node name: cat\): .*must have same rank"),
    # an If on a float condition (found by fuzzing: a TypeError naming nothing at run time)
    ([helper.make_node("ReduceMax", ["x"], ["c"], keepdims=0),
      helper.make_node("If", ["c"], ["y"], name="branch",
                       then_branch=helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                                                     [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)]),
                       else_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                                     [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)]))],
     InvalidOnnxModel, r"ONNX node 'branch' \(If\): input 0 \('c'\) is tensor\(float\), which If does not take"),
    # an axis out of range (found by fuzzing: a Concat's failed after import, naming nothing)
    ([helper.make_node("Softmax", ["x"], ["y"], name="soft", axis=2 ** 40)], InvalidOnnxModel,
     r"ONNX node 'soft' \(Softmax\): axis 1099511627776 is out of range for input 0 \('x'\) of rank 1"),
    # a result rank known only at run time (found by fuzzing: TVM failed while compiling): a valid
    # model shapefn cannot take
    ([helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BOOL), helper.make_node("NonZero", ["b"], ["i"]),
      helper.make_node("GatherND", ["x", "i"], ["y"], name="pick")], UnsupportedOnnxOp,
     r"ONNX node 'pick' \(GatherND\) cannot be imported: the length of its index tuples .* must be known"),
    # a rank that depends on the values of unknown sizes
    ([helper.make_node("Squeeze", ["x"], ["y"], name="sq")], ValueError,
     r"ONNX node 'sq' \(Squeeze\): Squeeze without axes needs every size of its input known"),
])
def test_nodes_the_importer_refuses_are_named(nodes, error, message):
    model = onnx_model(nodes)
    if nodes[-1].op_type == "Xor":  # (a float output would fail ONNX's shape inference first)
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.BOOL
    if any(n.op_type == "Concat" for n in nodes):
        m = helper.make_tensor("m", TensorProto.FLOAT, [2, 2], [0.0] * 4)
        model.graph.initializer.append(m)
    with pytest.raises(error, match=message):
        shapefn.compile(shapefn.from_onnx(model), "host")


def test_files_that_are_not_onnx_models(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(InvalidOnnxModel, match=f"'{garbage}' is not an ONNX model"):
        shapefn.from_onnx(garbage)
    with pytest.raises(FileNotFoundError):
        shapefn.from_onnx(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="from_onnx takes an onnx.ModelProto or a path, got bytes"):
        shapefn.from_onnx(b"\x08\x07")


@pytest.mark.parametrize("op, shape, attrs", [
    ("Conv", [1, 2, "H", 0], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("ConvTranspose", ["N", 2, 0, "W"], {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("GlobalAveragePool", [1, 2, 0, 3], {}),
])
def test_window_ops_over_an_empty_spatial_axis_are_named(op, shape, attrs):
    """(found by fuzzing: TVM failed while compiling them, naming nothing)"""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    inits = []
    if op.startswith("Conv"):
        inits = [helper.make_tensor("w", TensorProto.FLOAT, [2, 2, 3, 3], [0.5] * 36)]
    node = helper.make_node(op, ["x", *(i.name for i in inits)], ["y"], name="window", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ValueError, match=rf"ONNX node 'window' \({op}\): input 0 \('x'\) has size 0 along "
                                         r"spatial axis [23]"):
        shapefn.compile(shapefn.from_onnx(model), "host")


def test_reshape_to_literal_sizes_of_another_count_is_refused_at_run_time():
    """(found by fuzzing: the first elements of the data came out)"""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("shape", TensorProto.INT64, [1], [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), "host"), "host")
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_array_equal(vm(x).numpy(), x.reshape(4))
    with pytest.raises(ValueError, match=r"relax.reshape: cannot reshape data \(3, 2\) of 6 elements into \(4,\)"):
        vm(np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_valid_onnx_model_still_imports(device):
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="relu")])
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), device), device)
    x = np.array([-1, 2, -3], np.float32)
    np.testing.assert_array_equal(vm(x).numpy(), np.maximum(x, 0))


# -- kernels failing at run time ----------------------------------------------------

@tvm_ffi.register_global_func("test.bad_input.take_rows", override=True)
def take_rows(data, k, out):
    """A user kernel: the first k rows of data. Checks its own input."""
    rows = int(k.numpy()[0])
    if rows > data.shape[0]:
        raise ValueError(f"take_rows: k={rows} exceeds the {data.shape[0]} rows of data")
    out.copyfrom(data.numpy()[:rows])


@pytest.fixture(scope="module")
def take_rows_exe():
    """``take_rows_exe(device)``: ``main(data, k)`` = the first k rows of
    ``2 * data`` (by the user kernel), compiled once per device."""
    shapefn.register_shape_func("test.bad_input.take_rows", [False, True], override=True,
                                shape_func=lambda data, k: [k[0], data.shape[1]])
    n = tirx.Var("n", "int64")
    data = relax.Var("data", relax.TensorType([n, 3], "float32"))
    k = relax.Var("k", relax.TensorType([1], "int64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [data, k]):
        doubled = bb.emit(relax.op.multiply(data, relax.const(2.0, "float32")))
        bb.emit_func_output(shapefn.emit_extern(bb, "test.bad_input.take_rows", [doubled, k], out_ndim=2,
                                                out_dtype="float32"))
    mod = bb.get()
    return functools.cache(lambda device: shapefn.compile(mod, device))


@pytest.mark.parametrize("device", DEVICES)
def test_user_kernel_error_reaches_the_caller_and_the_vm_goes_on(take_rows_exe, device):
    take_rows_vm = shapefn.VirtualMachine(take_rows_exe(device), device)
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    high_water = None
    for _ in range(3):
        with pytest.raises(ValueError, match=r"kernel 'test.bad_input.take_rows' failed: "
                                               r"ValueError: take_rows: k=9 exceeds the 4 rows of data"):
            take_rows_vm(data, np.array([9], np.int64))
        np.testing.assert_array_equal(take_rows_vm(data, np.array([2], np.int64)).numpy(), 2 * data[:2])
        # What the failed calls allocated went back to the pool.
        assert high_water in (None, take_rows_vm.pool_high_water_bytes())
        high_water = take_rows_vm.pool_high_water_bytes()


@pytest.mark.parametrize("device", DEVICES)
def test_tvm_kernel_assertion_reaches_the_caller_and_the_vm_goes_on(device):
    """A TVM-compiled kernel's own shape check fails: ``scale`` wants its
    output as long as its input, and the program sizes it from ``like``."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"]), Param("like", "float32", ["m"])])
    x, like = fb.args
    out = fb.alloc_tensor("device", fb.shape_of(like), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), out])
    fb.ret(out)
    library = kernels.build({"scale": kernels.scale()}, device_target(device))
    vm = shapefn.VirtualMachine(pb.build(library=library), device)
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(ValueError, match=r"kernel 'scale' failed: ValueError: .*shape"):
        vm(x, np.zeros(5, np.float32))
    np.testing.assert_array_equal(vm(x, np.zeros(4, np.float32)).numpy(), 3 * x)
