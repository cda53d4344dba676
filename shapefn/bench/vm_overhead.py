"""What the VM itself costs: shapefn's VM against TVM's Relax VM.

Both run the same Relax modules on the CPU (shapefn on ``host``, Relax
through ``tvm.compile`` + ``relax.VirtualMachine``), with tensors so small
that kernel time is negligible, measured in one process, interleaved:

* a chain of ``--ops`` elementwise ops on a ``(n, 4)`` float32 tensor,
  unfused (the ops sit outside a dataflow block), with ``n`` static (4) and
  symbolic: ``*_static_ns_per_op`` / ``*_dynamic_ns_per_op`` (call time / ops);
* the 1024-512-256-128 MLP at batch 1 (fused once with TVM's passes, so both
  VMs run the same kernels): ``*_mlp_static_us`` / ``*_mlp_dynamic_us``;
* a call of a function that returns its argument, from Python, with the
  arguments each runtime takes natively (a numpy array for shapefn, a TVM
  tensor for Relax): ``shapefn_call_us`` / ``relax_call_us``;
* one shape-function call from the VM, in a program of ``--ops`` of them:
  ``shape_func_native_ns`` (the built-in ``shapefn.broadcast``),
  ``shape_func_native_reshape_ns`` (``relax.reshape``, which reads a value) and
  ``shape_func_tvm_ns`` (the same broadcast written in Python, TVM-compiled).

Figures are medians of ``--repeat`` interleaved repetitions (``min`` holds
the minimums); ``--cache-flush`` adds ``cold``/``cold_min``: each call timed
alone after evicting the CPU caches. ``counts`` holds what one call executes.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import tvm
from tvm import relax, te, tirx

from .. import registry
from ..builder import Param, ProgramBuilder
from ..compiler import compile as compile_relax
from ..vm import VirtualMachine
from . import timing

MLP_LAYERS = (1024, 512, 256, 128)
CHAIN_COLS = 4
CHAIN_ROWS = 4
_PY_BROADCAST = "shapefn.bench.broadcast2d"


# ---- the modules -------------------------------------------------------------
def elementwise_chain(num_ops: int, dynamic: bool) -> tvm.IRModule:
    """``main(x: float32[n, 4])``: ``num_ops`` alternating ``x * 0.5`` and
    ``x + 1``, outside a dataflow block so that nothing fuses (each op is a
    kernel call)."""
    bb = relax.BlockBuilder()
    rows = tirx.Var("n", "int64") if dynamic else CHAIN_ROWS
    x = relax.Var("x", relax.TensorType([rows, CHAIN_COLS], "float32"))
    with bb.function("main", [x]):
        y = x
        for i in range(num_ops):
            if i % 2 == 0:
                y = bb.emit(relax.op.multiply(y, relax.const(0.5, "float32")))
            else:
                y = bb.emit(relax.op.add(y, relax.const(1.0, "float32")))
        bb.emit_func_output(y)
    return bb.get()


def chain_reference(x: np.ndarray, num_ops: int) -> np.ndarray:
    y = x.copy()
    for i in range(num_ops):
        y = y * np.float32(0.5) if i % 2 == 0 else y + np.float32(1.0)
    return y


def mlp(dynamic: bool, seed: int = 0) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """The ``1024-512-256-128`` MLP (dense + bias, ReLU between layers) and
    its weights. Legalized and fused here with TVM's own passes, then kept
    out of a dataflow block, so that shapefn and Relax run the same fused
    kernels (Relax's default CPU pipeline does not fuse)."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    batch = tirx.Var("batch", "int64") if dynamic else 1
    x = relax.Var("x", relax.TensorType([batch, MLP_LAYERS[0]], "float32"))
    weights = []
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for i, (fan_in, fan_out) in enumerate(zip(MLP_LAYERS, MLP_LAYERS[1:])):
                w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
                b = rng.standard_normal(fan_out).astype(np.float32)
                weights.append((w, b))
                y = bb.emit(relax.op.add(relax.op.matmul(y, relax.const(w)), relax.const(b)))
                if i < len(MLP_LAYERS) - 2:
                    y = bb.emit(relax.op.nn.relu(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = tvm.transform.Sequential([
        relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
        relax.transform.FuseOps(), relax.transform.FuseTIR(), relax.transform.ToNonDataflow(),
    ])(bb.get())
    return mod, weights


def mlp_reference(x: np.ndarray, weights) -> np.ndarray:
    for i, (w, b) in enumerate(weights):
        x = x @ w + b
        if i < len(weights) - 1:
            x = np.maximum(x, 0)
    return x


def identity() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([CHAIN_ROWS, CHAIN_COLS], "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(x)
    return bb.get()


def _register_python_broadcast() -> None:
    """A TE shape function equal to the built-in ``shapefn.broadcast`` on
    broadcastable 2-d shapes (registered once per process)."""
    if _PY_BROADCAST in registry.registered_ops():
        return

    def broadcast2d(a, b):
        return [te.max(a.shape[0], b.shape[0]), te.max(a.shape[1], b.shape[1])]

    registry.register_shape_func(_PY_BROADCAST, [False, False], broadcast2d)


def shape_func_program(op_name: str, count: int):
    """``main(a: float32[4, 4], b: float32[1, 4])`` calling the shape function
    of ``op_name`` ``count`` times (into one register) and returning its shape."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("a", "float32", [CHAIN_ROWS, CHAIN_COLS], "host"),
                              Param("b", "float32", [1, CHAIN_COLS], "host")])
    a, b = fb.args
    inputs = [a, b]
    if op_name == "relax.reshape":
        inputs = [a, fb.load_shape([2, -1])]
    out = fb.reg()
    for _ in range(count):
        fb.emit("invoke_shape_func", op_name, inputs, [out], [])
    fb.ret(out)
    return pb.build()


# ---- running ------------------------------------------------------------------
def _shapefn_main(mod: tvm.IRModule):
    vm = VirtualMachine(compile_relax(mod, "host"), "host")
    return vm, vm["main"]


def _relax_main(mod: tvm.IRModule):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"]


def _check(name: str, got, want, rtol: float = 1e-5) -> None:
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    if not np.allclose(got, want, rtol=rtol, atol=1e-5):
        raise AssertionError(f"vm_overhead: {name} computed a wrong result")


def _counts(vm: VirtualMachine, fn, *args) -> dict:
    vm.reset_counters()
    fn(*args)
    c = vm.counters
    return {k: c[k] for k in ("instructions", "kernel_calls", "shape_func_calls", "allocations")}


def measure(num_ops: int = 1000, repeat: int = 9, flush: bool = False) -> dict:
    """Builds every case, checks each runtime's result against numpy, and
    times them interleaved."""
    _register_python_broadcast()
    rng = np.random.default_rng(0)
    cases, scale, number, counts = {}, {}, {}, {}

    x_chain = rng.standard_normal((CHAIN_ROWS, CHAIN_COLS)).astype(np.float32)
    want = chain_reference(x_chain, num_ops)
    x_chain_tvm = tvm.runtime.tensor(x_chain)
    for kind, dynamic in (("static", False), ("dynamic", True)):
        mod = elementwise_chain(num_ops, dynamic)
        vm, sf = _shapefn_main(mod)
        rx = _relax_main(mod)
        _check(f"shapefn {kind} chain", sf(x_chain), want)
        _check(f"relax {kind} chain", rx(x_chain_tvm), want)
        counts[f"chain_{kind}"] = _counts(vm, sf, x_chain)
        for runtime, fn, arg in (("shapefn", sf, x_chain), ("relax", rx, x_chain_tvm)):
            name = f"{runtime}_{kind}_ns_per_op"
            cases[name] = (lambda f=fn, a=arg: f(a))
            scale[name] = 1e9 / num_ops
            number[name] = 20

    x_mlp = rng.standard_normal((1, MLP_LAYERS[0])).astype(np.float32)
    x_mlp_tvm = tvm.runtime.tensor(x_mlp)
    for kind, dynamic in (("static", False), ("dynamic", True)):
        mod, weights = mlp(dynamic)
        vm, sf = _shapefn_main(mod)
        rx = _relax_main(mod)
        want = mlp_reference(x_mlp, weights)
        _check(f"shapefn {kind} mlp", sf(x_mlp), want, rtol=1e-4)
        _check(f"relax {kind} mlp", rx(x_mlp_tvm), want, rtol=1e-4)
        counts[f"mlp_{kind}"] = _counts(vm, sf, x_mlp)
        for runtime, fn, arg in (("shapefn", sf, x_mlp), ("relax", rx, x_mlp_tvm)):
            name = f"{runtime}_mlp_{kind}_us"
            cases[name] = (lambda f=fn, a=arg: f(a))
            scale[name] = 1e6
            number[name] = 20

    vm, sf = _shapefn_main(identity())
    rx = _relax_main(identity())
    _check("shapefn identity", sf(x_chain), x_chain)
    counts["call"] = _counts(vm, sf, x_chain)
    cases["shapefn_call_us"] = lambda: sf(x_chain)
    cases["relax_call_us"] = lambda: rx(x_chain_tvm)
    for name in ("shapefn_call_us", "relax_call_us"):
        scale[name], number[name] = 1e6, 2000

    a = np.zeros((CHAIN_ROWS, CHAIN_COLS), np.float32)
    b = np.zeros((1, CHAIN_COLS), np.float32)
    for name, op, want in (("shape_func_native_ns", "shapefn.broadcast", (4, 4)),
                           ("shape_func_native_reshape_ns", "relax.reshape", (2, 8)),
                           ("shape_func_tvm_ns", _PY_BROADCAST, (4, 4))):
        vm = VirtualMachine(shape_func_program(op, num_ops), "host")
        fn = vm["main"]
        if tuple(fn(a, b)) != want:
            raise AssertionError(f"vm_overhead: the shape function of {op} computed {fn(a, b)}, not {want}")
        counts[name.removesuffix("_ns")] = _counts(vm, fn, a, b)
        cases[name] = (lambda f=fn: f(a, b))
        scale[name], number[name] = 1e9 / num_ops, 20

    for fn in cases.values():  # warm-up: pools filled, code paged in
        fn()
    warm = timing.interleaved(cases, repeat=repeat, number=number)
    result, minimum = timing.summarize(warm, scale)
    result["min"] = minimum
    if flush:
        cold = timing.interleaved(cases, repeat=repeat, flush=True)
        result["cold"], result["cold_min"] = timing.summarize(cold, scale)
    result["counts"] = counts
    result["config"] = {"ops": num_ops, "repeat": repeat, "cache_flush": flush, "chain_shape": ["n", CHAIN_COLS],
                        "chain_rows": CHAIN_ROWS, "mlp_layers": list(MLP_LAYERS)}
    return result


def targets(r: dict) -> list[tuple[str, float, float, bool]]:
    """The issue's targets for this machine: (what, measured, limit, met),
    each measured as the median of the interleaved repetitions."""
    checks = [
        ("shapefn dynamic ns per op <= 100", r["shapefn_dynamic_ns_per_op"], 100.0),
        ("shapefn dynamic ns per op <= half of Relax's", r["shapefn_dynamic_ns_per_op"],
         r["relax_dynamic_ns_per_op"] / 2),
        ("shapefn dynamic <= 1.1 x shapefn static (ns per op)", r["shapefn_dynamic_ns_per_op"],
         1.1 * r["shapefn_static_ns_per_op"]),
        ("native shape function ns < 50", r["shape_func_native_ns"], 50.0),
        ("call from Python us <= Relax's", r["shapefn_call_us"], r["relax_call_us"]),
    ]
    return [(what, value, limit, value <= limit) for what, value, limit in checks]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench vm_overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--ops", type=int, default=1000, help="ops in the chain and shape-function programs")
    parser.add_argument("--repeat", type=int, default=9, help="interleaved repetitions")
    timing.add_cache_flush_argument(parser)
    args = parser.parse_args(argv)
    results = measure(args.ops, args.repeat, args.cache_flush)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(format_table(results))


def format_table(r: dict) -> str:
    rows = [("elementwise chain, static, ns/op", "static_ns_per_op"),
            ("elementwise chain, dynamic, ns/op", "dynamic_ns_per_op"),
            ("MLP, static, us", "mlp_static_us"), ("MLP, dynamic, us", "mlp_dynamic_us"),
            ("call from Python, us", "call_us")]
    lines = [f"{'':36}{'shapefn':>12}{'relax':>12}   (median of {r['config']['repeat']}; min in parentheses)"]
    for label, key in rows:
        lines.append(f"{label:36}{r['shapefn_' + key]:>12.3g}{r['relax_' + key]:>12.3g}"
                     f"   ({r['min']['shapefn_' + key]:.3g} / {r['min']['relax_' + key]:.3g})")
    for key in ("shape_func_native_ns", "shape_func_native_reshape_ns", "shape_func_tvm_ns"):
        lines.append(f"{key:36}{r[key]:>12.3g}   ({r['min'][key]:.3g})")
    for what, value, limit, met in targets(r):
        lines.append(f"target: {what}: {value:.3g} vs {limit:.3g} -> {'met' if met else 'MISSED'}")
    return "\n".join(lines)
