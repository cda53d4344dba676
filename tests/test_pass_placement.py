"""Placement alone (compiler/passes/placement.py): which tensors and kernels of a
lowered Relax function go to the host and which to the device, under each
policy."""
from __future__ import annotations

from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from shapefn.compiler.passes import placement
from shapefn.compiler.passes.placement import DEVICE, HOST, all_bindings, key


@I.ir_module
class Mixed:
    @T.prim_func
    def add_int(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (2,), "int64")
        B = T.match_buffer(b, (2,), "int64")
        C = T.match_buffer(c, (2,), "int64")
        for i in range(2):
            C[i] = A[i] + B[i]

    @T.prim_func
    def double(x: T.handle, y: T.handle):
        n = T.int64()
        X = T.match_buffer(x, (n,), "float32")
        Y = T.match_buffer(y, (n,), "float32")
        for i in range(n):
            Y[i] = X[i] * T.float32(2)

    @T.prim_func
    def gpu_inc(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (2,), "int64")
        B = T.match_buffer(b, (2,), "int64")
        for i in T.thread_binding(2, thread="threadIdx.x"):
            B[i] = A[i] + T.int64(1)

    @R.function(pure=False)
    def main(x: R.Tensor(("n",), "float32"), k: R.Tensor((2,), "int64")):
        n = T.int64()
        cls = Mixed
        c = R.const([1, 2], "int64")
        from_consts = R.builtin.alloc_tensor(R.shape([2]), R.dtype("int64"), R.prim_value(0), R.str("global"))
        cls.add_int(c, c, from_consts)            # integers from constants: the host
        from_param = R.builtin.alloc_tensor(R.shape([2]), R.dtype("int64"), R.prim_value(0), R.str("global"))
        cls.add_int(k, from_consts, from_param)   # a device input: the device
        read = R.call_packed("shapefn.to_host", from_param, ty_args=R.Tensor((2,), "int64"))
        from_read = R.builtin.alloc_tensor(R.shape([2]), R.dtype("int64"), R.prim_value(0), R.str("global"))
        cls.add_int(read, from_consts, from_read)  # host inputs only: the host
        viewed = R.call_packed("shapefn.view", from_read, R.shape([2]), ty_args=R.Tensor((2,), "int64"))
        threads = R.builtin.alloc_tensor(R.shape([2]), R.dtype("int64"), R.prim_value(0), R.str("global"))
        cls.gpu_inc(from_consts, threads)         # written for GPU threads, no host form: the device
        y = R.builtin.alloc_tensor(R.shape([n]), R.dtype("float32"), R.prim_value(0), R.str("global"))
        cls.double(x, y)                          # float compute: the device
        return (viewed, threads, y)


def slots(p: placement.Placement, func) -> tuple[dict, dict]:
    """The placement by var name, and each kernel call's slot by the name of the var it writes."""
    names = {v.name: v for v in func.params}
    kernels = {}
    for binding in all_bindings(func.body):
        names[binding.var.name] = binding.var
        call = binding.value
        if isinstance(call, relax.Call) and isinstance(call.op, relax.GlobalVar):
            kernels[call.args[-1].name] = p.kernel(binding)
    return {name: p.slot[key(v)] for name, v in names.items() if key(v) in p.slot}, kernels


def test_compute_on_the_device_integer_work_on_host_values_on_the_host():
    p = placement.place_module(Mixed, placement.ON_DEVICE)["main"]
    tensors, kernels = slots(p, Mixed["main"])
    assert tensors == {"x": DEVICE, "k": DEVICE, "from_consts": HOST, "from_param": DEVICE, "read": HOST,
                       "from_read": HOST, "viewed": HOST, "threads": DEVICE, "y": DEVICE}
    assert kernels == {"from_consts": HOST, "from_param": DEVICE, "from_read": HOST, "threads": DEVICE,
                       "y": DEVICE}


def test_all_on_host_policy_places_everything_on_the_host():
    p = placement.place_module(Mixed, placement.ALL_ON_HOST)["main"]
    tensors, kernels = slots(p, Mixed["main"])
    assert set(tensors.values()) == {HOST} and len(tensors) == 9
    assert set(kernels.values()) == {HOST} and len(kernels) == 5
    # Vars the pass does not place (the returned tuple's items) are on the host too.
    assert p.var_slot(Mixed["main"].body.body) == HOST


def test_unplaced_var_is_unknown_on_device_policy():
    p = placement.place_module(Mixed, placement.ON_DEVICE)["main"]
    result = Mixed["main"].body.body  # the tuple: no binding of the pass places it
    assert p.var_slot(result) is None
    assert p.var_slot(result, DEVICE) == DEVICE


def test_host_parameters_are_on_the_host():
    places = placement.place_module(Mixed, placement.ON_DEVICE, {"main": frozenset({1})})
    tensors, kernels = slots(places["main"], Mixed["main"])
    assert tensors["k"] == HOST and tensors["x"] == DEVICE
    # With k on the host, the kernel reading it and a host value runs there.
    assert kernels["from_param"] == HOST and tensors["from_param"] == HOST
    assert (places.param_slot("main", 0), places.param_slot("main", 1)) == (DEVICE, HOST)
    assert placement.place_module(Mixed, placement.ALL_ON_HOST).param_slot("main", 0) == HOST


def test_policy_for_device():
    assert placement.policy_for("host") is placement.ALL_ON_HOST
    assert placement.policy_for("sim") is placement.ON_DEVICE
    assert placement.policy_for("opencl") is placement.ON_DEVICE
