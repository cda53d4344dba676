"""What the VM itself costs: shapefn's VM against TVM's Relax VM.

Both run the same Relax modules on the CPU (shapefn on ``host``, Relax
through ``tvm.compile`` + ``relax.VirtualMachine``), with tensors so small
that kernel time is negligible, measured in one process, interleaved:

* a chain of ``--ops`` elementwise ops on a ``(n, 4)`` float32 tensor,
  unfused (the ops sit outside a dataflow block), with ``n`` static (4) and
  symbolic: ``*_static_ns_per_op`` / ``*_dynamic_ns_per_op`` (call time / ops);
* the 1024-512-256-128 MLP at batch 1 (fused once with TVM's passes and
  scheduled with shapefn's CPU schedule, so both VMs run the same kernels):
  ``*_mlp_static_us`` / ``*_mlp_dynamic_us``;
* a call of a function that returns its ``(4, 4)`` argument, from Python,
  with each runtime's own tensor type (a ``shapefn.Tensor``, a TVM tensor):
  ``shapefn_call_us`` / ``relax_call_us``, and with a numpy array for both:
  ``*_call_numpy_us``;
* one shape-function call from the VM, in a program of ``--ops`` of them:
  ``shape_func_native_ns`` (the built-in ``shapefn.broadcast``),
  ``shape_func_native_reshape_ns`` (``relax.reshape``, which reads a value) and
  ``shape_func_tvm_ns`` (the same broadcast written in Python, TVM-compiled);
* ``machine_reference_us``: a fixed pure-Python loop that touches neither
  runtime. Timed interleaved with the rest, its median over its minimum says
  how far the machine's own speed drifted during the run (on a shared host
  it can halve, in stretches of a fraction of a second, taking every median
  with it).

Figures are wall-clock medians of ``--repeat`` interleaved repetitions
(``min``: the minimums; ``cpu``/``cpu_min``: the same in this thread's CPU
time, which leaves out waiting for a core on a shared machine, and also the
work of TVM's thread pool, which the MLP's kernels use);
``--cache-flush`` adds ``cold``/``cold_min``/``cold_cpu``: each call timed
alone after evicting the CPU caches. ``counts`` holds what one call executes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics

import numpy as np
import tvm
from tvm import relax, te, tirx

from ..compiler.compile import compile as compile_relax
from ..compiler.passes.relax_passes import without_fusion
from ..compiler.schedules import cpu_schedule
from ..compiler.shape_funcs import registry
from ..runtime.builder import Param, ProgramBuilder
from ..runtime.registry import registered_ops
from ..runtime.vm import VirtualMachine
from . import timing

MLP_LAYERS = (1024, 512, 256, 128)
CHAIN_COLS = 4
CHAIN_ROWS = 4
_PY_BROADCAST = "shapefn.bench.broadcast2d"


# ---- the modules -------------------------------------------------------------
def elementwise_chain(num_ops: int, dynamic: bool) -> tvm.IRModule:
    """``main(x: float32[n, 4])``: ``num_ops`` alternating ``x * 0.5`` and
    ``x + 1``, outside a dataflow block so that TVM's pipeline fuses nothing
    (each op is a kernel call; shapefn's is told so: ``without_fusion``)."""
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
    # shapefn schedules reductions for the CPU when it compiles kernels; done
    # here, both VMs run the same scheduled kernels (shapefn's rule leaves a
    # scheduled kernel as it is).
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc):
            mod[gv] = cpu_schedule.schedule(func)
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
    if _PY_BROADCAST in registered_ops():
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
def _shapefn_main(mod: tvm.IRModule, fused: bool = True):
    with contextlib.nullcontext() if fused else without_fusion():
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


class _Cases:
    """What to time: a thunk per case, its unit scale (1e9 / ops for
    ns per op), calls per sample, and what one call executes."""

    def __init__(self):
        self.fns, self.scale, self.number, self.counts = {}, {}, {}, {}

    def add(self, name: str, fn, scale: float, number: int) -> None:
        self.fns[name], self.scale[name], self.number[name] = fn, scale, number


def _add_chains(cases: _Cases, num_ops: int, x: np.ndarray) -> None:
    want = chain_reference(x, num_ops)
    x_tvm = tvm.runtime.tensor(x)
    for kind, dynamic in (("static", False), ("dynamic", True)):
        mod = elementwise_chain(num_ops, dynamic)
        vm, sf = _shapefn_main(mod, fused=False)
        rx = _relax_main(mod)
        _check(f"shapefn {kind} chain", sf(x), want)
        _check(f"relax {kind} chain", rx(x_tvm), want)
        cases.counts[f"chain_{kind}"] = _counts(vm, sf, x)
        cases.add(f"shapefn_{kind}_ns_per_op", lambda f=sf: f(x), 1e9 / num_ops, 20)
        cases.add(f"relax_{kind}_ns_per_op", lambda f=rx: f(x_tvm), 1e9 / num_ops, 20)


def _add_mlps(cases: _Cases, x: np.ndarray) -> None:
    x_tvm = tvm.runtime.tensor(x)
    for kind, dynamic in (("static", False), ("dynamic", True)):
        mod, weights = mlp(dynamic)
        vm, sf = _shapefn_main(mod)
        rx = _relax_main(mod)
        want = mlp_reference(x, weights)
        _check(f"shapefn {kind} mlp", sf(x), want, rtol=1e-4)
        _check(f"relax {kind} mlp", rx(x_tvm), want, rtol=1e-4)
        cases.counts[f"mlp_{kind}"] = _counts(vm, sf, x)
        cases.add(f"shapefn_mlp_{kind}_us", lambda f=sf: f(x), 1e6, 20)
        cases.add(f"relax_mlp_{kind}_us", lambda f=rx: f(x_tvm), 1e6, 20)


def _add_calls(cases: _Cases, x: np.ndarray) -> None:
    vm, sf = _shapefn_main(identity())
    rx = _relax_main(identity())
    x_tvm = tvm.runtime.tensor(x)
    x_shapefn = sf(x)  # a shapefn.Tensor (over x's memory)
    _check("shapefn identity", sf(x_shapefn), x)
    _check("relax identity", rx(x_tvm), x)
    cases.counts["call"] = _counts(vm, sf, x_shapefn)
    cases.add("shapefn_call_us", lambda: sf(x_shapefn), 1e6, 2000)
    cases.add("relax_call_us", lambda: rx(x_tvm), 1e6, 2000)
    cases.add("shapefn_call_numpy_us", lambda: sf(x), 1e6, 2000)
    cases.add("relax_call_numpy_us", lambda: rx(x), 1e6, 2000)


def _add_shape_funcs(cases: _Cases, num_ops: int) -> None:
    _register_python_broadcast()
    a = np.zeros((CHAIN_ROWS, CHAIN_COLS), np.float32)
    b = np.zeros((1, CHAIN_COLS), np.float32)
    for name, op, want in (("shape_func_native_ns", "shapefn.broadcast", (4, 4)),
                           ("shape_func_native_reshape_ns", "relax.reshape", (2, 8)),
                           ("shape_func_tvm_ns", _PY_BROADCAST, (4, 4))):
        vm = VirtualMachine(shape_func_program(op, num_ops), "host")
        fn = vm["main"]
        got = tuple(fn(a, b))
        if got != want:
            raise AssertionError(f"vm_overhead: the shape function of {op} computed {got}, not {want}")
        cases.counts[name.removesuffix("_ns")] = _counts(vm, fn, a, b)
        cases.add(name, lambda f=fn: f(a, b), 1e9 / num_ops, 20)


def machine_reference() -> int:
    """The fixed workload behind ``machine_reference_us``."""
    total = 0
    for i in range(20000):
        total += i
    return total


# Ratios of two cases taken within each repetition (timed moments apart, so
# at the same machine speed), then the median over repetitions.
PAIRED_RATIOS = {
    "shapefn_dynamic_over_static": ("shapefn_dynamic_ns_per_op", "shapefn_static_ns_per_op"),
    "shapefn_over_relax_dynamic": ("shapefn_dynamic_ns_per_op", "relax_dynamic_ns_per_op"),
    "shapefn_over_relax_call": ("shapefn_call_us", "relax_call_us"),
}


def paired_ratios(wall: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(a / b for a, b in zip(wall[num], wall[den]))
            for name, (num, den) in PAIRED_RATIOS.items()}


def paired_targets(r: dict) -> list[tuple[str, float, float, bool]]:
    """The ratio targets on per-repetition ratios: robust to the machine's
    speed drifting between repetitions."""
    p = r["paired"]
    checks = [("shapefn dynamic / Relax dynamic <= 0.5", p["shapefn_over_relax_dynamic"], 0.5),
              ("shapefn dynamic / shapefn static <= 1.1", p["shapefn_dynamic_over_static"], 1.1),
              ("shapefn call / Relax call <= 1", p["shapefn_over_relax_call"], 1.0)]
    return [(what, value, limit, value <= limit) for what, value, limit in checks]


def machine_slowdown(r: dict) -> float:
    """How much slower the machine ran at the median than at its best."""
    return r["machine_reference_us"] / r["min"]["machine_reference_us"]


def measure(num_ops: int = 1000, repeat: int = 15, flush: bool = False) -> dict:
    """Builds every case, checks each runtime's result against numpy, and
    times them interleaved."""
    rng = np.random.default_rng(0)
    cases = _Cases()
    x_small = rng.standard_normal((CHAIN_ROWS, CHAIN_COLS)).astype(np.float32)
    _add_chains(cases, num_ops, x_small)
    _add_mlps(cases, rng.standard_normal((1, MLP_LAYERS[0])).astype(np.float32))
    _add_calls(cases, x_small)
    _add_shape_funcs(cases, num_ops)
    cases.add("machine_reference_us", machine_reference, 1e6, 5)

    for fn in cases.fns.values():  # warm-up: pools filled, code paged in
        fn()
    warm = timing.interleaved(cases.fns, repeat=repeat, number=cases.number)
    result, minimum = timing.summarize(warm["wall"], cases.scale)
    result["min"] = minimum
    result["cpu"], result["cpu_min"] = timing.summarize(warm["cpu"], cases.scale)
    result["paired"] = paired_ratios(warm["wall"])
    if flush:
        cold = timing.interleaved(cases.fns, repeat=repeat, flush=True)
        result["cold"], result["cold_min"] = timing.summarize(cold["wall"], cases.scale)
        result["cold_cpu"], _ = timing.summarize(cold["cpu"], cases.scale)
    result["counts"] = cases.counts
    result["config"] = {"ops": num_ops, "repeat": repeat, "cache_flush": flush, "chain_shape": ["n", CHAIN_COLS],
                        "chain_rows": CHAIN_ROWS, "mlp_layers": list(MLP_LAYERS)}
    return result


def targets(r: dict) -> list[tuple[str, float, float, bool]]:
    """The targets for this machine: (what, measured, limit, met), from one
    section of the results (the wall-clock medians, or ``r["cpu"]``, ...)."""
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
    parser.add_argument("--repeat", type=int, default=15, help="interleaved repetitions")
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
            ("call from Python, us", "call_us"), ("call from Python, numpy argument, us", "call_numpy_us")]
    lines = [f"{'':40}{'shapefn':>10}{'relax':>10}   wall median of {r['config']['repeat']} "
             "(wall min; cpu median)"]
    for label, key in rows:
        s, x = "shapefn_" + key, "relax_" + key
        lines.append(f"{label:40}{r[s]:>10.3g}{r[x]:>10.3g}   ({r['min'][s]:.3g} / {r['min'][x]:.3g}; "
                     f"{r['cpu'][s]:.3g} / {r['cpu'][x]:.3g})")
    for key in ("shape_func_native_ns", "shape_func_native_reshape_ns", "shape_func_tvm_ns", "machine_reference_us"):
        lines.append(f"{key:40}{r[key]:>10.3g}   ({r['min'][key]:.3g}; {r['cpu'][key]:.3g})")
    lines.append(f"the machine ran {machine_slowdown(r):.2f}x slower at the median than at its best "
                 "(machine_reference_us, median / min)")
    for section, label in ((r, "wall median"), (r["min"], "wall min"), (r["cpu"], "cpu median")):
        for what, value, limit, met in targets(section):
            lines.append(f"target ({label}): {what}: {value:.3g} vs {limit:.3g} -> {'met' if met else 'MISSED'}")
    for what, value, limit, met in paired_targets(r):
        lines.append(f"target (per-repetition ratio, median): {what}: {value:.3g} vs {limit:.3g} -> "
                     f"{'met' if met else 'MISSED'}")
    return "\n".join(lines)
