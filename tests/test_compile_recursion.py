"""Calls between Relax functions, recursion and If, compiled by shapefn and
compared with TVM's Relax VM: a self call in tail position runs as a jump
(any depth), other recursion uses VM frames (limited depth, a clear error
beyond it). Each program runs on a strict sim and on a real OpenCL device,
with the same counters."""
import functools

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R
from tvm.script import tirx as T

import shapefn
from conftest import DEVICES, opencl, run_on_devices

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def relax_vm(mod):
    return relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())


@pytest.fixture
def on(device):
    """The VM's device for ``device``: a strict sim (host reads of device
    memory fault there), else the device itself."""
    return shapefn.sim(strict=True) if device == "sim" else device


@tvm.script.ir_module
class Fibonacci:
    """``fib(k, a, b) = fib(k - 1, b, a + b)``: the tail call passes parameters
    to each other (a parallel move)."""

    @R.function
    def fib(k: R.Prim("int64"), a: R.Tensor(("n",), "float32"), b: R.Tensor(("n",), "float32")) \
            -> R.Tensor(ndim=1, dtype="float32"):
        cls = Fibonacci
        if k > 0:
            c = R.add(a, b)
            r = cls.fib(k - 1, b, c)
        else:
            r = a
        return r

    @R.function
    def main(steps: R.Tensor(("k",), "int8"), x: R.Tensor(("n",), "float32")):
        k = T.int64()
        cls = Fibonacci
        zero = R.multiply(x, R.const(0.0, "float32"))
        return cls.fib(k, zero, x)


@pytest.fixture(scope="module")
def fibonacci():
    """Fibonacci compiled once per device it is asked for: ``fibonacci(device)``."""
    return functools.cache(lambda device: shapefn.compile(Fibonacci, device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [0, 1, 10, 30])
def test_tail_call_swapping_parameters(fibonacci, device, on, k):
    x = np.array([1.0, 0.5], np.float32)
    vm = shapefn.VirtualMachine(fibonacci(device), on)
    steps = np.zeros(k, np.int8)  # the depth is this argument's length
    want = relax_vm(Fibonacci)["main"](tvm.runtime.tensor(steps), tvm.runtime.tensor(x)).numpy()
    fib = [0, 1]
    for _ in range(k):
        fib.append(fib[-1] + fib[-2])
    np.testing.assert_allclose(want, fib[k] * x)
    np.testing.assert_allclose(vm(steps, x).numpy(), want)


@tvm.script.ir_module
class SumDown:
    """``total(k, x) = x + total(k - 1, x)`` — not a tail call (the add
    follows it), so each level is a VM frame. The call's result has a rank
    but no shape; shapefn reads its sizes at run time (TVM's Relax VM
    cannot compile the add without a match_cast)."""

    @R.function
    def total(k: R.Prim("int64"), x: R.Tensor(("n",), "float32")) -> R.Tensor(ndim=1, dtype="float32"):
        cls = SumDown
        if k == 0:
            r = x
        else:
            rest = cls.total(k - 1, x)
            r = R.add(rest, x)
        return r

    @R.function
    def main(steps: R.Tensor(("k",), "int8"), x: R.Tensor(("n",), "float32")):
        k = T.int64()
        cls = SumDown
        return cls.total(k, x)


@pytest.mark.parametrize("device", DEVICES)
def test_recursion_that_is_not_a_tail_call(device, on):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    vm = shapefn.VirtualMachine(shapefn.compile(SumDown, device), on)
    steps = np.zeros(100, np.int8)  # the depth is this argument's length
    np.testing.assert_allclose(vm(steps, x).numpy(), 101 * x)
    with pytest.raises(RuntimeError, match="call depth"):
        vm(np.zeros(10_000, np.int8), x)
    np.testing.assert_allclose(vm(np.zeros(3, np.int8), x).numpy(), 4 * x)  # still usable


@tvm.script.ir_module
class CallOrder:
    """main calls functions in another order than the module lists them."""

    @R.function
    def first(x: R.Tensor(("n",), "float32")):
        return R.add(x, x)

    @R.function
    def second(x: R.Tensor(("n",), "float32")):
        return R.multiply(x, x)

    @R.function
    def main(x: R.Tensor(("n",), "float32")):
        cls = CallOrder
        a = cls.second(x)
        b = cls.first(a)
        return b


@pytest.mark.parametrize("device", DEVICES)
def test_calls_reach_the_function_they_name(device, on):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    vm = shapefn.VirtualMachine(shapefn.compile(CallOrder, device), on)
    np.testing.assert_allclose(vm(x).numpy(), 2 * x * x)


@opencl
@pytest.mark.parametrize("mod", [Fibonacci, SumDown, CallOrder], ids=["fibonacci", "sum_down", "call_order"])
def test_calls_count_the_same_on_sim_and_opencl(mod):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    calls = [[x]] if mod is CallOrder else [[np.zeros(k, np.int8), x] for k in (0, 1, 20)]
    results = run_on_devices(mod, calls)  # asserts the counters equal
    for (sim_out, _), (opencl_out, _) in zip(results["sim"], results["opencl"], strict=True):
        np.testing.assert_allclose(opencl_out, sim_out, rtol=1e-6)
