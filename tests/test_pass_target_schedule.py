"""Kernels scheduled for the processor they run on (compiler/schedules/target_schedule.py).

Compiled for CUDA and OpenCL, every kernel a program invokes on the device
is device code of the library's device module and every kernel placed on
the host is host code of the same library; CUDA's device code compiles with
nvcc (no GPU here: built, not run), OpenCL's programs run on a real device
against numpy. A kernel with loops no GPU schedule spreads over threads is
refused by name (one without loops runs in one GPU thread), as is a kernel
that cannot run on the device, and CPU targets keep the CPU schedule."""
import os
import re
import shutil
import subprocess
import tempfile
import types

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.script import relax as R
from tvm.script import tirx as T

import shapefn
from conftest import ProfilingExample, opencl, relax_main, run_on_devices, sym
from shapefn.compiler import hand_built as kernels
from shapefn.compiler import ops, relax_vm
from shapefn.compiler.codegen import bytecode as codegen
from shapefn.compiler.compile import lower
from shapefn.compiler.kernels import concat, scatter
from shapefn.compiler.kernels import count as count_kernels
from shapefn.compiler.kernels import dynamic as dyn_kernels
from shapefn.compiler.passes import placement, readback_order
from shapefn.compiler.passes.lower_dynamic import lower_dynamic_ops
from shapefn.compiler.schedules import cpu_schedule, gpu_threads, target_schedule

GPU_KINDS = ["cuda", "opencl"]


WEIGHT = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)


def elementwise():
    return relax_main([("x", [sym("n"), 8], "float32")], lambda bb, x: relax.op.add(
        relax.op.multiply(relax.op.exp(x), relax.const(2.0, "float32")), relax.const(1.0, "float32")))


def matmul():
    return relax_main([("x", [sym("n"), 64], "float32")], lambda bb, x: relax.op.matmul(x, relax.const(WEIGHT)))


def reduction():
    return relax_main([("x", [sym("n"), 100], "float32")], lambda bb, x: relax.op.sum(x, axis=[1]))


def centered_by_max():
    """A reduction of every element and an epilogue over every element, one
    fused kernel (``_FullReduction``: one thread block, its threads sharing
    the epilogue)."""
    return relax_main([("x", [sym("n"), 8], "float32")], lambda bb, x: relax.op.subtract(x, relax.op.max(x)))


def softmax_of_odd_extent():
    """Softmax over an inner axis whose neighbour's extent is a sum of
    quotients (as after a detector's concatenated strides): TVM's rules
    fail on its bindings (``_ThreadPerOutput`` schedules it)."""
    def body(bb, x):
        n, m = x.ty.shape.values
        y = bb.emit(relax.op.reshape(x, relax.ShapeExpr([1, 16, 4, (n - 1) // 2 * m + 5])))
        return relax.op.nn.softmax(y, axis=1)

    return relax_main([("x", [sym("n"), sym("m")], "float32")], body)


DEPTHWISE = np.random.default_rng(1).standard_normal((8, 1, 3, 3)).astype(np.float32)


def depthwise():
    """A depthwise convolution and its ReLU, one kernel folding 9 elements
    into each output (``_ShortReduction``: a thread per output)."""
    return relax_main([("x", [1, 8, sym("h"), sym("w")], "float32")], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(DEPTHWISE), padding=1, groups=8)))


def depthwise_reference(x):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, w = x.shape[2:]
    out = sum(padded[:, :, i:i + h, j:j + w] * DEPTHWISE[None, :, 0, i, j, None, None]
              for i in range(3) for j in range(3))
    return np.maximum(out, 0)


def softmax_reference(x):
    y = x.reshape(1, 16, 4, -1)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)




@tvm.script.ir_module
class SharedKernel:
    """One ``add`` kernel invoked on the device (on ``offset``) and on the
    host (on sums of the shape of ``x``: [n + 1, n + m + 1], past the end;
    the scan keeps the add from fusing with the shape's kernel)."""

    @R.function
    def main(x: R.Tensor(("n", "m"), "float32"), offset: R.Tensor((2,), "int64")):
        begin = R.add(offset, R.const(1, "int64"))
        end = R.add(R.cumsum(R.shape_to_tensor(R.shape_of(x)), axis=0), R.const(1, "int64"))
        return R.dynamic_strided_slice(x, begin, end, R.ones(R.shape([2]), "int64"))


def slice_nonzero_reference(x, offset):
    return np.stack(np.nonzero(x[offset[0] + 1:, offset[1] + 1:]))


# Name, module, inputs, reference.
PROGRAMS = {
    "elementwise": (elementwise, lambda rng: [rng.standard_normal((5, 8)).astype(np.float32)],
                    lambda x: np.exp(x) * 2 + 1),
    "matmul": (matmul, lambda rng: [rng.standard_normal((7, 64)).astype(np.float32)], lambda x: x @ WEIGHT),
    "reduction": (reduction, lambda rng: [rng.standard_normal((3, 100)).astype(np.float32)],
                  lambda x: x.sum(axis=1)),
    "centered_by_max": (centered_by_max, lambda rng: [rng.standard_normal((700, 8)).astype(np.float32)],
                        lambda x: x - x.max()),
    "softmax_of_odd_extent": (softmax_of_odd_extent, lambda rng: [rng.standard_normal((1, 320)).astype(np.float32)],
                              softmax_reference),
    "depthwise": (depthwise, lambda rng: [rng.standard_normal((1, 8, 13, 9)).astype(np.float32)],
                  depthwise_reference),
    "slice_nonzero": (lambda: ProfilingExample,
                      lambda rng: [rng.integers(-1, 2, (9, 12)).astype(np.float32), np.array([2, 4], np.int64)],
                      slice_nonzero_reference),
    "shared_kernel": (lambda: SharedKernel,
                      lambda rng: [rng.standard_normal((6, 8)).astype(np.float32), np.array([1, 2], np.int64)],
                      lambda x, offset: x[offset[0] + 1:, offset[1] + 1:]),
}


def host_kernels(mod, kind) -> set[str]:
    """The kernels ``shapefn.compile(mod, kind)`` invokes on the host, by
    name: codegen's placement, through the compiler's own steps."""
    target = tvm.target.Target(kind, host="llvm")
    lowered = lower(lower_dynamic_ops(mod, gpu=True), target)
    places = placement.place_module(lowered, placement.ON_DEVICE)
    readbacks = readback_order.order_module(lowered)
    return codegen.generate(lowered, places, readbacks, separate_host_kernels=True).host_kernels


def device_module(exe, kind):
    (device,) = exe._library.imports
    assert device.kind == kind
    return device


def launched(source: str, name: str) -> bool:
    """Whether the device source has a kernel TVM split off host function ``name``."""
    return re.search(rf"\b{re.escape(name)}_kernel(_\d+)?\b", source) is not None


def assert_device_and_host_code(exe, kind, host: set[str]):
    assert host <= set(exe.kernel_names)
    if host == set(exe.kernel_names):
        assert not exe._library.imports  # no device code at all
        return
    source = device_module(exe, kind).inspect_source()
    for name in exe.kernel_names:
        assert exe._library.implements_function(name)  # the launcher, or the host kernel itself
        assert launched(source, name) == (name not in host), name


def assert_cuda_compiles(device):
    """The device code is a fatbin (nvcc compiled it: a library the kernel
    cache built where nvcc exists), or CUDA source that compiles to PTX
    (what TVM's runtime would JIT on a GPU machine)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None or "fatbin" in device.get_write_formats():
        return
    with tempfile.TemporaryDirectory(prefix="shapefn-cuda-") as directory:
        path = os.path.join(directory, "kernels.cu")
        with open(path, "w") as f:
            f.write(device.inspect_source())
        # Without a sanitizer's preloaded runtime (nvcc crashes under it).
        environment = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        result = subprocess.run([nvcc, "--ptx", "-arch=sm_75", path, "-o", os.path.join(directory, "kernels.ptx")],
                                capture_output=True, text=True, env=environment)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_device_kernels_are_device_code_and_host_kernels_host_code(name, kind):
    make, _, _ = PROGRAMS[name]
    exe = shapefn.compile(make(), kind)
    host = host_kernels(make(), kind)
    assert_device_and_host_code(exe, kind, host)
    if kind == "cuda":
        assert_cuda_compiles(device_module(exe, kind))


def test_a_short_reduction_gets_a_thread_per_output():
    """The depthwise kernel under ``_ShortReduction``: its 9-element fold is a
    loop in each thread, no thread block shares one output (TVM's reduction
    rules spread the 9 over a block, most of its threads idle); a reduction
    over 100 elements is left to those rules."""
    target = tvm.target.Target("cuda", host="llvm")

    def kernel(mod, prefix):
        (func,) = [f for gv, f in lower(mod, target).functions.items() if gv.name_hint.startswith(prefix)]
        return func

    with target:
        scheduled = target_schedule._ShortReduction().apply(kernel(depthwise(), "fused_conv2d"), target, False)
        assert scheduled is not None
        source = scheduled.mod["main"].script()
        assert "threadIdx.x" in source and "tvm_thread_allreduce" not in source and "shared" not in source
        assert target_schedule._ShortReduction().apply(kernel(reduction(), "sum"), target, False) is None


def test_a_kernel_scheduled_before_under_another_name_gets_that_schedule(monkeypatch):
    """TVM's rules are tried once per kernel and target in a process: a
    structurally equal kernel (another model of the family, another name)
    gets the first one's schedule; a different kernel or target tries them."""
    target = tvm.target.Target("cuda", host="llvm")
    (func,) = [f for gv, f in lower(depthwise(), target).functions.items() if gv.name_hint.startswith("fused_conv2d")]
    tried = []
    rules = target_schedule._dlight_rules
    monkeypatch.setattr(target_schedule, "_dlight_rules", lambda f, t: tried.append(str(t.kind.name)) or rules(f, t))
    monkeypatch.setattr(target_schedule, "_scheduled", {})
    first = target_schedule._dlight(func.with_attr("global_symbol", "a"), target)
    again = target_schedule._dlight(func.with_attr("global_symbol", "b"), target)
    assert first is not None and again.same_as(first) and tried == ["cuda"]
    target_schedule._dlight(func, tvm.target.Target("opencl", host="llvm"))
    (other,) = [f for gv, f in lower(reduction(), target).functions.items() if gv.name_hint.startswith("sum")]
    target_schedule._dlight(other, target)
    assert tried == ["cuda", "opencl", "cuda"]


def test_readme_example_computes_shape_arithmetic_without_a_kernel():
    """The slice's end (the input's shape as a tensor) is handed to its
    shape function from the VM's registers: the device runs the three
    kernels of the data, the host none."""
    exe = shapefn.compile(ProfilingExample, "opencl")
    assert sorted(exe.kernel_names) == ["add", "shapefn_nonzero_2d_float32", "shapefn_strided_slice_2d_float32"]
    assert_device_and_host_code(exe, "opencl", set())


def test_one_kernel_on_host_and_device_is_built_for_each():
    exe = shapefn.compile(SharedKernel, "cuda")
    assert {"add", "add_host"} <= set(exe.kernel_names)
    assert_device_and_host_code(exe, "cuda", {"shape_to_tensor_host", "cumsum_host", "add_host"})


@opencl
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_programs_run_on_opencl(name, rng):
    make, inputs, reference = PROGRAMS[name]
    args = inputs(rng)
    vm = shapefn.VirtualMachine(shapefn.compile(make(), "opencl"), "opencl")
    np.testing.assert_allclose(vm(*args).numpy(), reference(*args), rtol=1e-5, atol=1e-4)


def slice_to_the_end():
    """``x[0:INT64_MAX]`` (ONNX's "to the end"): TVM's simplifier overflowed
    on GPU schedules of its extent, ``min(INT64_MAX, n)``."""
    return relax_main([("x", [sym("n")], "float32")],
                  lambda bb, x: relax.op.strided_slice(x, axes=[0], begin=[0], end=[2**63 - 1]))


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_slice_to_the_end_builds_for_the_device(kind):
    exe = shapefn.compile(slice_to_the_end(), kind)
    assert_device_and_host_code(exe, kind, set())


@opencl
def test_slice_to_the_end_runs_on_opencl():
    vm = shapefn.VirtualMachine(shapefn.compile(slice_to_the_end(), "opencl"), "opencl")
    for n in (0, 5, 300):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(vm(x).numpy(), x)


# ------------------------------------------------------------ kernels without a GPU schedule
@pytest.fixture
def without_gpu_forms(monkeypatch):
    """shapefn's kernels in their CPU forms only (as before gpu_kernels)."""
    monkeypatch.setattr(target_schedule, "gpu_kernels", None)


CPU_FORMS = {
    "nonzero": count_kernels.nonzero(2, "float32"),
    "unique": count_kernels.unique("float32", 1),
    "non_max_suppression": count_kernels.non_max_suppression(0),
    "topk": dyn_kernels.topk(2, 1, "float32", True, True),
    "sequential_concat": concat.sequential_concat(4, 2, 0, "float32"),
    "scatter_elements": scatter.scatter_elements(2, 0, "add", "float32", "int64"),
}


@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize("name", list(CPU_FORMS))
def test_kernels_without_a_gpu_schedule_are_refused(kind, name):
    """A kernel with loops and no parallel schedule would run them in one
    GPU thread: the compiler names it and refuses."""
    target = tvm.target.Target(kind, host="llvm")
    with pytest.raises(target_schedule.SerialKernelError, match=rf"kernel '{name}' has no parallel {kind} schedule"):
        target_schedule.schedule({name: CPU_FORMS[name]}, target)


def scalar_kernel() -> tvm.tirx.PrimFunc:
    """``out[0] = a[0] * b[0] + 1``: a few scalar operations, no loop."""
    @T.prim_func
    def scalar(a: T.Buffer((1,), "float32"), b: T.Buffer((1,), "float32"), out: T.Buffer((1,), "float32")):
        out[0] = a[0] * b[0] + T.float32(1)

    return scalar


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_a_kernel_without_loops_runs_in_one_thread(kind):
    target = tvm.target.Target(kind, host="llvm")
    scheduled = target_schedule.schedule({"scalar": scalar_kernel()}, target)
    assert scheduled.single_thread == ("scalar",)
    (device,) = tvm.tirx.build(scheduled.module, target).imports
    assert set(re.findall(r"\bscalar_kernel\w*", device.inspect_source())) == {"scalar_kernel"}  # one launch


@opencl
def test_a_kernel_without_loops_runs_on_opencl():
    library = kernels.build({"scalar": scalar_kernel()}, tvm.target.Target("opencl", host="llvm"))
    dev = tvm.opencl(0)
    a, b, out = (tvm.runtime.tensor(np.array([v], np.float32), dev) for v in (3, 5, 0))
    library["scalar"](a, b, out)
    assert out.numpy()[0] == 16


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_a_model_kernel_without_a_gpu_form_is_refused_at_compile(without_gpu_forms, kind):
    with pytest.raises(target_schedule.SerialKernelError, match="kernel 'shapefn_nonzero_2d_float32'"):
        shapefn.compile(ProfilingExample, kind)


def single_thread_build(name, func, kind):
    """``func`` in one GPU thread (the form the stand-in GPU forms below
    take), built for ``kind``."""
    target = tvm.target.Target(kind, host="llvm")
    alone = target_schedule._single_thread(name, func).with_attr("global_symbol", name)
    return tvm.tirx.build(tvm.IRModule({name: alone.with_attr("target", target)}), target)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_single_thread_form_keeps_global_scratch_on_the_device(kind):
    """NMS's scratch buffers (sized by the inputs) become device workspace
    allocated before the launch: the kernel takes them as arguments."""
    source = single_thread_build("nms", count_kernels.non_max_suppression(0), kind).imports[0].inspect_source()
    (signature,) = re.findall(r"nms_kernel\(([^)]*)\)\s*\{", source)
    assert signature.count("*") == 11  # 7 parameters and the 4 scratch buffers


@opencl
def test_single_thread_nms_matches_its_cpu_build(rng):
    func = count_kernels.non_max_suppression(0)
    cpu = kernels.build({"nms": func})
    gpu = relax_vm.runnable(single_thread_build("nms", func, "opencl"))  # (TVM's module, run by shapefn's runtime)
    corners = rng.uniform(0, 10, (1, 60, 2)).astype(np.float32)
    boxes = np.concatenate([corners, corners + rng.uniform(1, 5, (1, 60, 2)).astype(np.float32)], axis=-1)
    args = [boxes, rng.uniform(0, 1, (1, 3, 60)).astype(np.float32), np.array([10], np.int64),
            np.array([0.5], np.float32), np.array([0.2], np.float32)]

    def run(library, device):
        tensors = [tvm.runtime.tensor(a, device) for a in args]
        selected = tvm.runtime.tensor(np.full((180, 3), -1, np.int64), device)
        count = tvm.runtime.tensor(np.zeros(1, np.int64), device)
        library["nms"](*tensors, selected, count)
        return selected.numpy()[:count.numpy()[0]]

    want = run(cpu, tvm.cpu())
    assert len(want) > 0
    np.testing.assert_array_equal(run(gpu, tvm.opencl(0)), want)


# ------------------------------------------------------------ shapefn's GPU kernel forms
def fake_gpu_form(cpu_form):
    """A thread-bound stand-in for a GPU form: ``cpu_form``'s kernel in one thread."""
    def make(*args, **kwargs):
        func = cpu_form(*args, **kwargs)
        return target_schedule._single_thread(cpu_form.__name__, func)
    make.__name__ = cpu_form.__name__
    return make


@pytest.fixture
def fake_gpu_forms(monkeypatch):
    forms = types.SimpleNamespace(nonzero=fake_gpu_form(count_kernels.nonzero), topk=fake_gpu_form(dyn_kernels.topk))
    monkeypatch.setattr(target_schedule, "gpu_kernels", forms)
    return forms


def test_kernel_form_picks_the_gpu_form_for_gpu_targets_only(fake_gpu_forms):
    gpu = target_schedule.kernel_form(count_kernels.nonzero, gpu=True)(2, "float32")
    assert tvm_ffi.structural_equal(gpu.without_attr(target_schedule.HOST_FORM), fake_gpu_forms.nonzero(2, "float32"))
    assert tvm_ffi.structural_equal(target_schedule.host_form(gpu), count_kernels.nonzero(2, "float32"))
    assert target_schedule.kernel_form(count_kernels.nonzero, gpu=False) is count_kernels.nonzero
    assert target_schedule.kernel_form(count_kernels.unique, gpu=True) is count_kernels.unique  # none yet


def shape_nonzero():
    """nonzero of a shape value: all its inputs are on the host."""
    return relax_main([("x", [sym("n"), sym("m")], "float32")], lambda bb, x: relax.op.nonzero(
        bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(x))))))


def test_gpu_form_on_host_values_runs_its_cpu_form_on_the_host(fake_gpu_forms):
    exe = shapefn.compile(shape_nonzero(), "opencl")
    assert sorted(exe.kernel_names) == ["shape_to_tensor_host", "shapefn_nonzero_1d_int64_host"]
    assert_device_and_host_code(exe, "opencl", set(exe.kernel_names))


def test_gpu_form_on_device_values_is_kept_as_written(fake_gpu_forms):
    target = tvm.target.Target("opencl", host="llvm")
    mod = relax_main([("x", [sym("n"), sym("m")], "float32")], lambda bb, x: relax.op.nonzero(x))
    lowered = lower(lower_dynamic_ops(mod, gpu=True), target)
    scheduled = target_schedule.schedule({"k": lowered["shapefn_nonzero_2d_float32"]}, target)
    assert scheduled.single_thread == ()
    kept = scheduled.module["k"]
    assert tvm_ffi.structural_equal(kept.without_attr("target").without_attr("op_pattern"),
                                    fake_gpu_forms.nonzero(2, "float32").with_attr("global_symbol", "k"))


@T.prim_func
def bound_shift(a: T.Buffer((2,), "int64"), b: T.Buffer((2,), "int64")):
    T.func_attr({"op_pattern": 8})  # (kOpaque: not fused)
    for i in T.thread_binding(2, thread="threadIdx.x"):
        b[i] = a[i] + T.int64(7)


def test_thread_bound_kernel_without_host_form_stays_on_the_device():
    """A kernel bound to GPU threads (as TVM's GPU legalizations write them)
    on host values, with no host build: it runs on the device, its inputs
    copied there."""
    def body(bb, x):
        shape = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(x))))
        return relax.call_tir(bb.add_func(bound_shift, "bound_shift"), [shape], relax.TensorType([2], "int64"))

    mod = relax_main([("x", [sym("n"), sym("m")], "float32")], body)
    assert host_kernels(mod, "opencl") == {"shape_to_tensor_host"}
    exe = shapefn.compile(mod, "opencl")
    assert_device_and_host_code(exe, "opencl", {"shape_to_tensor_host"})


def test_topk_from_shapefn_ops_gets_its_gpu_form(fake_gpu_forms):
    def body(bb, x, k):
        values, indices = ops.topk(bb, x, k)
        return relax.Tuple([values, indices])

    mod = relax_main([("x", [sym("n"), 16], "float32"), ("k", [1], "int64")], body)
    (name,) = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    assert not target_schedule.binds_threads(lower_dynamic_ops(mod, gpu=False)[name])
    gpu = lower_dynamic_ops(mod, gpu=True)[name]
    assert tvm_ffi.structural_equal(gpu.without_attr(target_schedule.HOST_FORM),
                                    fake_gpu_forms.topk(2, 1, "float32", True, True))
    assert tvm_ffi.structural_equal(target_schedule.host_form(gpu), dyn_kernels.topk(2, 1, "float32", True, True))


def test_legalization_sees_the_target():
    """TVM picks its GPU scatter_nd under a GPU target (it reads the target
    from the context), its CPU one otherwise."""
    mod = relax_main([("x", [8, 4], "float32"), ("i", [2, 1], "int64"), ("u", [2, 4], "float32")],
                 lambda bb, x, i, u: relax.op.scatter_nd(x, i, u))
    for target, threads in [(None, False), (tvm.target.Target("cuda", host="llvm"), True)]:
        lowered = lower(mod, target)
        assert target_schedule.binds_threads(lowered["scatter_nd"]) == threads


# ------------------------------------------------------------ what cannot run on the device
@T.prim_func
def log_and_copy(x: T.Buffer((8,), "float32"), out: T.Buffer((8,), "float32")):
    T.evaluate(T.call_packed("test.host_only", x.data))
    for i in range(8):
        out[i] = x[i]


@T.prim_func
def half_bound(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,))
    B = T.match_buffer(b, (n,))
    for i in T.thread_binding(n, thread="threadIdx.x"):
        B[i] = A[i]
    B[0] = T.float32(0)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_kernel_calling_a_host_function_is_refused_by_name(kind):
    mod = relax_main([("x", [8], "float32")], lambda bb, x: relax.call_tir(
        bb.add_func(log_and_copy, "log_and_copy"), [x], relax.TensorType([8], "float32")))
    with pytest.raises(target_schedule.KernelPlacementError,
                       match=rf"kernel 'log_and_copy' cannot run on the {kind} device: .*'test.host_only'"):
        shapefn.compile(mod, kind)
    assert shapefn.compile(mod, "sim").kernel_names == ["log_and_copy"]  # the CPU can


def test_gpu_kernel_touching_device_memory_from_the_host_is_refused():
    with pytest.raises(target_schedule.KernelPlacementError, match=r"kernel 'half' .*writes B outside any GPU thread"):
        target_schedule.schedule({"half": half_bound}, tvm.target.Target("cuda", host="llvm"))


def test_host_kernels_of_a_gpu_build_are_not_checked_or_moved():
    target = tvm.target.Target("cuda", host="llvm")
    scheduled = target_schedule.schedule({"log_and_copy": log_and_copy}, target, host={"log_and_copy"})
    func = scheduled.module["log_and_copy"]
    assert func.attrs["target"].kind.name == "llvm" and not target_schedule.binds_threads(func)


# ------------------------------------------------------------ CPU targets
def test_cpu_targets_get_the_cpu_schedule():
    lowered = lower(matmul())
    funcs = {gv.name_hint: f for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)}
    scheduled = target_schedule.schedule(funcs, tvm.target.Target("llvm"))
    assert scheduled.version == cpu_schedule.VERSION and scheduled.single_thread == ()
    for name, func in funcs.items():
        assert tvm_ffi.structural_equal(scheduled.module[name].without_attr("global_symbol"),
                                       cpu_schedule.schedule(func).without_attr("global_symbol"))


def test_hand_built_kernels_are_scheduled_for_their_target():
    library = kernels.build({"scale": kernels.scale()}, tvm.target.Target("opencl", host="llvm"))
    (device,) = library.imports
    assert device.kind == "opencl" and launched(device.inspect_source(), "scale")
    assert not kernels.build({"scale": kernels.scale()}).imports


# ------------------------------------------------------------ reductions of every element
FULL_REDUCTIONS = {"max": (relax.op.max, np.max), "min": (relax.op.min, np.min), "sum": (relax.op.sum, np.sum)}


def full_reduction(op, rank):
    """``op`` of every element of a tensor of ``rank`` symbolic dimensions, added to it."""
    dims = [sym(f"d{i}") for i in range(rank)]
    return relax_main([("x", dims, "float32")], lambda bb, x: relax.op.add(x, bb.emit(op(x))))


def test_a_reduction_of_every_element_is_one_parallel_launch():
    """x.max() (torchvision's batched NMS) got GeneralReduction's schedule: a
    host loop launching one GPU thread per element."""
    target = tvm.target.Target("cuda", host="llvm")
    mod = lower(lower_dynamic_ops(full_reduction(relax.op.max, 2), gpu=True), target)
    (name,) = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]  # max, fused with add
    scheduled = target_schedule.schedule({name: mod[name]}, target)
    assert scheduled.single_thread == ()
    assert gpu_threads.host_work(scheduled.module[name]) == []
    source = tvm.tirx.build(scheduled.module, target).imports[0].inspect_source()
    launches = re.findall(rf"\b{name}_kernel\w*", source)
    assert launches and set(launches) == {f"{name}_kernel"}
    assert "threadIdx.x" in source


@pytest.mark.parametrize("name", sorted(FULL_REDUCTIONS))
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_reductions_of_every_element_match_numpy_on_opencl(name, rank, rng):
    op, reference = FULL_REDUCTIONS[name]
    shapes = {1: [(1,), (255,), (257,), (70_001,)], 2: [(300, 4), (1, 1), (513, 3)], 3: [(2, 3, 5), (40, 40, 41)]}
    calls = [[rng.standard_normal(shape).astype(np.float32)] for shape in shapes[rank]]
    results = run_on_devices(full_reduction(op, rank), calls)
    for (x,), (got, _) in zip(calls, results["opencl"]):
        np.testing.assert_allclose(got, x + np.float32(reference(x.astype(np.float64))), rtol=1e-5, atol=1e-4)


def test_a_host_loop_around_a_launch_is_refused():
    @T.prim_func
    def launch_per_element(a: T.handle, b: T.handle):
        n = T.int64()
        A = T.match_buffer(a, (n,), "float32")
        B = T.match_buffer(b, (n,), "float32")
        for i in range(n):
            for _t in T.thread_binding(1, thread="threadIdx.x"):
                B[i] = A[i] * T.float32(2)

    message = "kernel 'twice' cannot run on the cuda device: it launches one GPU thread per iteration of a host loop"
    with pytest.raises(target_schedule.KernelPlacementError, match=message):
        target_schedule.schedule({"twice": launch_per_element}, tvm.target.Target("cuda", host="llvm"))


def test_a_kernel_whose_output_is_empty_launches_nothing_on_a_gpu():
    """A kernel all of whose stores lie in a loop of no iterations (a
    split's empty part over a symbolic batch) becomes a body of no effect
    (there is no thread to give work); one that writes anything keeps its
    work, in GPU threads."""
    from tvm import te

    n = tvm.tirx.Var("n", "int64")
    data = te.placeholder((n, 10), name="data")
    kernels = {"empty": te.create_prim_func([data, te.compute((n, 0), lambda i, j: data[i, j], name="part")]),
               "full": te.create_prim_func([data, te.compute((n, 3), lambda i, j: data[i, j], name="part")])}
    scheduled = target_schedule.schedule(kernels, tvm.target.Target("opencl", host="llvm")).module

    def stores(func):
        found = []
        tvm_ffi.structural_walk(func.body, [(tvm.tirx.BufferStore, found.append)], order="pre")
        return found

    assert not stores(scheduled["empty"])
    assert stores(scheduled["full"]) and target_schedule.binds_threads(scheduled["full"])
