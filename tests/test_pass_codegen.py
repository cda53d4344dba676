"""Code generation alone (compiler/codegen/bytecode.py): small Relax functions in the
form TVM's lowering leaves them (kernels as PrimFunc calls on tensors
allocated just before), with their placement and readback schedule given,
compared with the bytecode they must become, instruction by instruction.

The expected listings are written from the semantics: a size variable is
read from the first parameter dimension that defines it (``tensor_dim``),
a shape with computed dimensions is a ``shape_build`` template (-k: the
k-th register), a value used twice is computed once, a tensor read on
another slot than its own is copied there once, a self call in tail
position is moves into the parameter registers and a jump back."""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from shapefn.compiler.codegen import bytecode as codegen
from shapefn.compiler.passes import placement, readback_order
from shapefn.compiler.passes.placement import DEVICE, HOST, ModulePlacement, Placement, all_bindings, key

F32 = "dtype:73730"  # float32 as the disassembler prints a dtype code


@I.ir_module
class Chain:
    @T.prim_func
    def double(x: T.handle, y: T.handle):
        n = T.int64()
        X = T.match_buffer(x, (n,), "float32")
        Y = T.match_buffer(y, (n,), "float32")
        for i in range(n):
            Y[i] = X[i] * T.float32(2)

    @R.function(pure=False)
    def main(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
        n = T.int64()
        cls = Chain
        y = R.builtin.alloc_tensor(R.shape([n]), R.dtype("float32"), R.prim_value(0), R.str("global"))
        cls.double(x, y)
        z = R.builtin.alloc_tensor(R.shape([n]), R.dtype("float32"), R.prim_value(0), R.str("global"))
        cls.double(y, z)
        R.memory.kill_tensor(y)
        return z


@I.ir_module
class TwoReaders:
    """x read by two kernels: one copy when x is on the host, one load of
    the constant read twice."""

    @T.prim_func
    def add(x: T.handle, c: T.handle, y: T.handle):
        X = T.match_buffer(x, (4,), "float32")
        C = T.match_buffer(c, (4,), "float32")
        Y = T.match_buffer(y, (4,), "float32")
        for i in range(4):
            Y[i] = X[i] + C[i]

    @R.function(pure=False)
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = TwoReaders
        c = R.const(np.arange(4, dtype="float32"))
        y = R.builtin.alloc_tensor(R.shape([4]), R.dtype("float32"), R.prim_value(0), R.str("global"))
        cls.add(x, c, y)
        z = R.builtin.alloc_tensor(R.shape([4]), R.dtype("float32"), R.prim_value(0), R.str("global"))
        cls.add(x, c, z)
        return z


@I.ir_module
class TwoReadbacks:
    @R.function(pure=False)
    def main(a: R.Tensor((1,), "int64"), b: R.Tensor((1,), "int64")) -> R.Shape(ndim=2):
        sa = R.tensor_to_shape(a)
        sb = R.tensor_to_shape(b)
        m, k = T.int64(), T.int64()
        _ = R.match_cast(sa, R.Shape([m]))
        _ = R.match_cast(sb, R.Shape([k]))
        return R.shape([m, k])


@I.ir_module
class Loop:
    @R.function(pure=False)
    def loop(i: R.Prim("int64"), a: R.Tensor((4,), "float32"),
             b: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Loop
        if R.prim_value(i < 3):
            r = cls.loop(R.prim_value(i + 1), b, a)
            out = r
        else:
            out = a
        return out

    @R.function(pure=False)
    def main(a: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Loop
        r = cls.loop(R.prim_value(0), a, b)
        return r


def listing(mod, places=None, readbacks=None) -> list[str]:
    """The disassembly of ``mod``'s bytecode, one instruction or function header per line."""
    places = places if places is not None else placement.place_module(mod, placement.ON_DEVICE)
    readbacks = readbacks if readbacks is not None else readback_order.order_module(mod)
    generated = codegen.generate(mod, places, readbacks)
    return [line.strip() for line in generated.program.build().as_text().splitlines() if line.strip()]


def hand_placed(mod, slots: dict[str, str], kernels: dict[str, str]) -> ModulePlacement:
    """``main`` placed by hand: ``slots`` by var name, ``kernels`` by the
    name of the var each kernel call writes (its last argument)."""
    func = mod["main"]
    p = Placement(placement.ON_DEVICE)
    by_name = {v.name: v for v in func.params}
    for binding in all_bindings(func.body):
        by_name[binding.var.name] = binding.var
        call = binding.value
        if isinstance(call, relax.Call) and isinstance(call.op, relax.GlobalVar):
            written = call.args[-1].name
            if written in kernels:
                p.kernel_slot[key(binding)] = kernels[written]
    for name, slot in slots.items():
        p.slot[key(by_name[name])] = slot
    return ModulePlacement(placement.ON_DEVICE, {"main": p})


def test_kernels_on_the_device_read_sizes_from_parameters():
    assert listing(Chain) == [
        "func#0 main(x: float32[n]) registers=5",
        "0: tensor_dim %1, %0, 0",             # n: x's dimension 0
        "1: shape_build %2, [-1], [%1]",       # (n,)
        f"2: alloc_tensor %3, @device, %2, {F32}",
        "3: invoke_kernel kernel#0, [%0, %3]",
        f"4: alloc_tensor %4, @device, %2, {F32}",  # the shape register, reused
        "5: invoke_kernel kernel#0, [%3, %4]",
        "6: kill %3",                          # y after its last use
        "7: ret %4",
    ]


def test_all_on_host_policy_puts_every_tensor_on_the_host():
    places = placement.place_module(Chain, placement.ALL_ON_HOST)
    assert listing(Chain, places) == [
        "func#0 main(x: float32[n]@host) registers=5",
        "0: tensor_dim %1, %0, 0",
        "1: shape_build %2, [-1], [%1]",
        f"2: alloc_tensor %3, @host, %2, {F32}",
        "3: invoke_kernel kernel#0, [%0, %3]",
        f"4: alloc_tensor %4, @host, %2, {F32}",
        "5: invoke_kernel kernel#0, [%3, %4]",
        "6: kill %3",
        "7: ret %4",
    ]


def test_tensor_on_the_host_read_by_device_kernels_is_copied_once():
    places = hand_placed(TwoReaders, {"x": HOST, "y": DEVICE, "z": DEVICE}, {"y": DEVICE, "z": DEVICE})
    assert listing(TwoReaders, places) == [
        "func#0 main(x: float32[4]) registers=6",
        "0: load_shape %1, [4]",
        f"1: alloc_tensor %2, @device, %1, {F32}",
        "2: copy %3, %0, @device",             # x to the device, for both kernels
        "3: load_const %4, const#0",           # c, loaded once
        "4: invoke_kernel kernel#0, [%3, %4, %2]",
        f"5: alloc_tensor %5, @device, %1, {F32}",
        "6: invoke_kernel kernel#0, [%3, %4, %5]",
        "7: ret %5",
    ]


def test_kernel_placed_on_the_host_reads_host_copies():
    """The same program with the second kernel on the host: x needs no
    copy for it, the constant is loaded on the host too (a constant of its
    own: constants are per slot), and z is allocated on the host."""
    places = hand_placed(TwoReaders, {"x": HOST, "y": DEVICE, "z": HOST}, {"y": DEVICE, "z": HOST})
    assert listing(TwoReaders, places) == [
        "func#0 main(x: float32[4]) registers=7",
        "0: load_shape %1, [4]",
        f"1: alloc_tensor %2, @device, %1, {F32}",
        "2: copy %3, %0, @device",
        "3: load_const %4, const#0",
        "4: invoke_kernel kernel#0, [%3, %4, %2]",
        f"5: alloc_tensor %5, @host, %1, {F32}",
        "6: load_const %6, const#1",
        "7: invoke_kernel kernel#0, [%0, %6, %5]",
        "8: ret %5",
    ]


def test_readbacks_batched_as_scheduled():
    """The scheduler groups the two independent readbacks: one instruction
    (one sync). Scheduled one by one, they are two."""
    assert listing(TwoReadbacks) == [
        "func#0 main(a: int64[1], b: int64[1]) registers=7",
        "0: readback [%2, %3], [%0, %1], [0, 0]",
        "1: shape_get %4, %2, 0",              # m
        "2: shape_get %5, %3, 0",              # k
        "3: shape_build %6, [-1, -2], [%4, %5]",
        "4: ret %6",
    ]
    one_by_one = readback_order.ReadbackOrder(
        {key(block): [[b] for b in block.bindings] for block in TwoReadbacks["main"].body.blocks})
    assert listing(TwoReadbacks, readbacks=one_by_one)[1:3] == [
        "0: readback [%2], [%0], [0]",
        "1: readback [%3], [%1], [0]",
    ]


def test_self_tail_call_is_a_jump_with_swapped_parameters_staged():
    """loop(i + 1, b, a) in tail position: no call, the arguments moved into
    the parameter registers — a and b through temporaries, as each is the
    other's source — and a jump to the first instruction."""
    lines = listing(Loop)
    loop = lines[lines.index("func#1 loop(i: int64[]@any, a: float32[4], b: float32[4]) registers=11"):]
    assert loop[1:] == [
        "0: load_int %3, 3",
        "1: lt %4, %0, %3",
        "2: if %4, ->13",                      # i < 3, else the exit arm; %5 holds the result
        "3: load_int %6, 1",
        "4: add %7, %0, %6",                   # i + 1
        "5: move %8, %2",                      # b staged (it goes into a's register)
        "6: move %9, %1",                      # a staged
        "7: move %0, %7",
        "8: move %1, %8",
        "9: move %2, %9",
        "10: kill %8",
        "11: kill %9",
        "12: goto ->0",                        # the arm ends in the jump: no result, no goto to the end
        "13: move %5, %1",                     # out = a
        "14: ret %5",
    ]
    assert not any(" call " in line for line in loop)


@I.ir_module
class Casts:
    @R.function(pure=False)
    def main(x: R.Tensor(("n", "m"), "float32"), y: R.Tensor(("k",), "float32"),
             z: R.Tensor(dtype="float32")):
        n = T.int64()
        k = T.int64()
        j = T.int64()
        a = R.match_cast(x, R.Tensor((n, 3), "float32"))    # m: the literal 3 checked; n proven
        b = R.match_cast(y, R.Tensor((n,), "float32"))      # k: n, bound before, checked
        c = R.match_cast(z, R.Tensor((j,), "float32"))      # the rank (unknown) checked, j bound
        d = R.match_cast(a, R.Tensor((n, 3), "float32"))    # proven: nothing checked
        return (b, c, d, R.shape([k]))


def test_match_cast_checks_what_its_type_does_not_prove():
    """A match_cast checks, at run time, each literal size and each size of
    a variable bound before that its value's type does not prove, and the
    rank where the type does not say it; a variable it binds is not
    checked. What each check refuses: tests/test_vm.py."""
    lines = listing(Casts)
    checks = [line.split(": ", 1)[1] for line in lines if "match_shape" in line]
    assert checks == ["match_shape %0, 2, [1], [3], []",
                      "match_shape %1, 1, [0], [-1], [%3]",
                      "match_shape %2, 1, [], [], []"], lines
