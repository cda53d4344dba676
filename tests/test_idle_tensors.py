"""A tensor freed by `kill` is reused whole by the next allocation of its
size class (csrc/vm/idle_tensors.cc): never while anything still refers to
it, with the new shape when the shapes differ, and counted as idle, not in
use, by its pool."""
import numpy as np
import pytest

import shapefn
from shapefn import Param, ProgramBuilder
from shapefn.bench import vm_overhead
from shapefn.compiler import hand_built as kernels

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


@pytest.fixture(scope="module")
def library():
    return kernels.build({"scale": kernels.scale(ndim=2)})


def _x():
    return np.arange(16, dtype=np.float32).reshape(4, 4)


def test_a_killed_tensor_another_register_holds_is_not_reused(library):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", [4, 4], "host")])
    (x,) = fb.args
    shape = fb.load_shape([4, 4])
    a = fb.alloc_tensor("host", shape, "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(2), a])
    alias = fb.reg()
    fb.move(alias, a)
    fb.kill(a)  # `alias` still holds the tensor
    b = fb.alloc_tensor("host", shape, "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(3), b])
    fb.ret(fb.make_tuple([alias, b]))
    vm = shapefn.VirtualMachine(pb.build(library=library), "host")
    kept, fresh = vm(_x())
    np.testing.assert_array_equal(kept.numpy(), 2 * _x())
    np.testing.assert_array_equal(fresh.numpy(), 3 * _x())


def test_reuse_takes_the_new_shape_within_a_size_class(library):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", [4, 4], "host")])
    (x,) = fb.args
    a = fb.alloc_tensor("host", fb.load_shape([4, 4]), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(2), a])
    b = fb.alloc_tensor("host", fb.load_shape([4, 4]), "float32")
    fb.invoke_kernel(pb.kernel("scale"), [a, fb.load_int(3), b])
    fb.kill(a)
    wide = fb.view(b, fb.load_shape([2, 8]))
    c = fb.alloc_tensor("host", fb.load_shape([2, 8]), "float32")  # a's block, as [2, 8]
    fb.invoke_kernel(pb.kernel("scale"), [wide, fb.load_int(1), c])
    fb.ret(fb.make_tuple([b, c]))
    vm = shapefn.VirtualMachine(pb.build(library=library), "host")
    for _ in range(3):  # later calls reuse the blocks the first left idle
        b_out, c_out = vm(_x())
        assert c_out.shape == (2, 8)
        np.testing.assert_array_equal(b_out.numpy(), 6 * _x())
        np.testing.assert_array_equal(c_out.numpy(), (6 * _x()).reshape(2, 8))
    assert vm.counters["allocations"] == 9


def test_results_outlive_later_calls_and_idle_blocks_are_not_in_use():
    exe = shapefn.compile(vm_overhead.elementwise_chain(40, dynamic=True), "host")
    vm = shapefn.VirtualMachine(exe, "host")
    x = _x()
    first = vm(x)
    for scale in (10, 20, 30):
        vm(x * scale)
    np.testing.assert_allclose(first.numpy(), vm_overhead.chain_reference(x, 40), rtol=1e-6)
    # Each op's input is killed after it: two blocks in use during a call,
    # plus the result the caller keeps.
    assert vm.pool_high_water_bytes("host") <= 3 * 256


def test_an_idle_block_does_not_count_as_in_use(library):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", [4, 4], "host")])
    (x,) = fb.args
    a = fb.alloc_tensor("host", fb.load_shape([4, 4]), "float32")  # a 256-byte block
    fb.invoke_kernel(pb.kernel("scale"), [x, fb.load_int(2), a])
    fb.kill(a)  # kept idle: no later allocation of its size
    big = fb.alloc_tensor("host", fb.load_shape([64, 64]), "float32")  # 16 KiB
    fb.ret(big)
    vm = shapefn.VirtualMachine(pb.build(library=library), "host")
    vm(_x())
    assert vm.pool_high_water_bytes("host") == 64 * 64 * 4
