"""The compiler's own time as the graph grows: it must grow linearly.

Generated graphs of ``--sizes`` ops (default 1k, 5k, 20k) on an ``(n, 16)``
float32 input with a symbolic ``n``: elementwise ops (unary, and binary on one
of the 8 latest values, so values live and die at different times), a
matmul with a constant weight every 50 ops, and every 100 ops a reshape to a
runtime shape (``shape_of -> tensor -> tensor_to_shape``, lowered through the
shape-function registry) reduced back into the chain. The graphs are
compiled without fusion (``relax_passes.without_fusion``), so they have the
same 13 distinct kernels at every size: kernel generation stays constant while everything
else scales with the graph.

Per size: ``seconds``, the compiler's own time (shapefn's lowering of
data-dependent ops, TVM's Relax passes, placement, scheduling and bytecode
generation), with the phases apart, and ``kernel_seconds`` (TVM generating
the kernels into an empty cache), reported separately. ``per_op_growth`` is
(seconds per op at the largest size) / (at the smallest): 1 for linear
growth; ``*_python_calls`` entries compare the Python calls shapefn's own
phases make (counted with cProfile in separate runs), which load on the
machine does not blur. A second ``shapefn.compile`` of the smallest model
with the cache the first filled must take the kernels from it
(``second_compile``).
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import os
import pstats
import statistics
import tempfile
import time

import numpy as np
import tvm
from tvm import relax, tirx

from ..compiler.build_target import BuildTarget
from ..compiler.codegen import bytecode as codegen
from ..compiler.passes import placement, readback_order
from ..compiler.passes.lower_dynamic import lower_dynamic_ops
from ..compiler.passes.relax_passes import without_fusion
from ..runtime import config
from . import timing

_compile_module = importlib.import_module("shapefn.compiler.compile")

SIZES = (1000, 5000, 20000)
WIDTH = 16
_UNARY = (relax.op.nn.relu, relax.op.tanh, relax.op.sigmoid, relax.op.negative)
_BINARY = (relax.op.add, relax.op.multiply, relax.op.subtract, relax.op.maximum)


def generated_graph(num_ops: int, seed: int = 0) -> tvm.IRModule:
    """A ``main(x: float32[n, 16])`` of about ``num_ops`` ops (a runtime
    reshape counts as the 5 ops it is written with)."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, WIDTH], "float32"))
    with bb.function("main", [x]):
        values = [x]
        ops = 0
        while ops < num_ops:
            a = values[-1]
            if ops % 100 >= 95:
                shape = bb.emit(relax.op.shape_to_tensor(relax.op.shape_of(a)))
                reshaped = bb.emit(relax.op.reshape(a, relax.op.tensor_to_shape(shape)))
                value = bb.emit(relax.op.add(a, bb.emit(relax.op.sum(reshaped))))
                ops += 5
            elif ops % 50 == 49:
                weight = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32)
                value = bb.emit(relax.op.matmul(a, relax.const(weight)))
                ops += 1
            elif rng.random() < 0.5:
                value = bb.emit(_UNARY[rng.integers(len(_UNARY))](a))
                ops += 1
            else:
                b = values[-1 - rng.integers(min(8, len(values)))]
                value = bb.emit(_BINARY[rng.integers(len(_BINARY))](a, b))
                ops += 1
            values.append(value)
        bb.emit_func_output(values[-1])
    return bb.get()


@tvm.instrument.pass_instrument
class _PassTimes:
    """Seconds per Relax pass (outermost passes only: the Sequential that
    holds them is not counted again)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._stack: list[float] = []

    def run_before_pass(self, mod, info):
        self._stack.append(time.perf_counter())

    def run_after_pass(self, mod, info):
        elapsed = time.perf_counter() - self._stack.pop()
        if len(self._stack) == 1:  # directly inside the pipeline's Sequential
            self.seconds[info.name] = self.seconds.get(info.name, 0.0) + elapsed


def _python_calls(fn, *args) -> int:
    """Python function calls ``fn(*args)`` makes (cProfile): a measure of
    work that load on the machine does not blur."""
    profile = cProfile.Profile()
    profile.runcall(fn, *args)
    return pstats.Stats(profile).total_calls


def compile_phases(mod: tvm.IRModule, device: str = "sim", count_calls: bool = False) -> dict:
    """``shapefn.compile``'s steps, each timed: the same calls in the same
    order (shapefn/compiler/compile.py), so that kernel generation can be
    told apart from the compiler's own work. ``count_calls`` also counts the
    Python calls of shapefn's own phases, in runs of their own (untimed)."""
    with _compile_module.gc_paused():  # as shapefn.compile runs
        return _compile_phases(mod, device, count_calls)


def _compile_phases(mod: tvm.IRModule, device: str, count_calls: bool) -> dict:
    phases = {}
    start = time.perf_counter()
    lowered = lower_dynamic_ops(mod)
    phases["lower_dynamic_ops"] = time.perf_counter() - start

    passes = _PassTimes()
    start = time.perf_counter()
    with without_fusion(instruments=[passes]):
        lowered = _compile_module.lower(lowered)
    phases["relax_passes"] = time.perf_counter() - start

    start = time.perf_counter()
    generated = _generate(lowered, device)
    phases["codegen"] = time.perf_counter() - start

    start = time.perf_counter()
    target = BuildTarget.of(device).target
    library, _ = _compile_module.build_kernels(_compile_module.schedule_kernels(lowered, generated, target), target)
    kernel_seconds = time.perf_counter() - start

    start = time.perf_counter()
    exe = generated.program.build(library=library)
    phases["codegen"] += time.perf_counter() - start  # (verifying the bytecode)

    result = {"seconds": sum(phases.values()), "kernel_seconds": kernel_seconds, "phases": phases,
              "relax_pass_seconds": passes.seconds, "kernels": len(generated.kernels),
              "instructions": exe.as_text().count("\n  ")}
    if count_calls:
        result["python_calls"] = {
            "lower_dynamic_ops": _python_calls(lower_dynamic_ops, mod),
            "codegen": _python_calls(lambda: _generate(lowered, device)),
        }
    return result


def _generate(lowered: tvm.IRModule, device: str) -> codegen.GeneratedProgram:
    """The bytecode of ``lowered``: placement, readback scheduling and code generation."""
    places = placement.place_module(lowered, placement.policy_for(device))
    return codegen.generate(lowered, places, readback_order.order_module(lowered))


def _cache_files(directory: str) -> set[str]:
    return {os.path.join(root, f) for root, _, files in os.walk(directory) for f in files}


def _second_compile(num_ops: int) -> dict:
    """Two ``shapefn.compile`` calls of the same model (built twice) with one
    fresh kernel cache: the second must load the kernels, not generate them."""
    from ..compiler.compile import compile as shapefn_compile

    with tempfile.TemporaryDirectory() as cache:
        config.set_cache_dir(cache)
        try:
            with without_fusion():
                start = time.perf_counter()
                shapefn_compile(generated_graph(num_ops), "sim")
                first = time.perf_counter() - start
                files = _cache_files(cache)
                start = time.perf_counter()
                shapefn_compile(generated_graph(num_ops), "sim")
                second = time.perf_counter() - start
            new_files = _cache_files(cache) - files
        finally:
            config.set_cache_dir(None)
    return {"ops": num_ops, "first_seconds": first, "second_seconds": second,
            "files_written_by_second": len(new_files), "kernels_from_cache": not new_files}


def _measure_once(mod: tvm.IRModule, flush: bool, count_calls: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as cache:  # an empty kernel cache: generation is measured
        config.set_cache_dir(cache)
        try:
            if flush:
                timing.flush_caches()
            return compile_phases(mod, count_calls=count_calls)
        finally:
            config.set_cache_dir(None)


def _summarize(runs: list[dict], num_ops: int) -> dict:
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "ops": num_ops,
        "seconds": statistics.median(r["seconds"] for r in runs),
        "min_seconds": best["seconds"],
        "kernel_seconds": statistics.median(r["kernel_seconds"] for r in runs),
        "phases": {k: statistics.median(r["phases"][k] for r in runs) for k in best["phases"]},
        "relax_pass_seconds": best["relax_pass_seconds"],
        "kernels": best["kernels"],
        "instructions": best["instructions"],
        **({"python_calls": runs[0]["python_calls"]} if "python_calls" in runs[0] else {}),
    }


def _growth(sizes: list[dict]) -> dict:
    """Seconds per op at the largest size over that at the smallest, overall
    and per phase (1: linear)."""
    small, large = sizes[0], sizes[-1]
    scale = small["ops"] / large["ops"]
    ratio = {"seconds": large["seconds"] / small["seconds"] * scale}
    for phase in small["phases"]:
        if small["phases"][phase] > 0:
            ratio[phase] = large["phases"][phase] / small["phases"][phase] * scale
    for phase, calls in small.get("python_calls", {}).items():
        ratio[f"{phase}_python_calls"] = large["python_calls"][phase] / calls * scale
    return ratio


def measure(sizes=SIZES, repeat: int = 1, flush: bool = False) -> dict:
    sizes = sorted(sizes)
    graphs = {n: generated_graph(n) for n in sizes}
    compile_phases(generated_graph(100))  # warm-up: TVM's passes and Python code loaded
    runs = {n: [] for n in sizes}
    cold = {n: [] for n in sizes}
    for k in range(repeat):  # interleaved: each repetition compiles every size once
        for n in sizes:
            runs[n].append(_measure_once(graphs[n], flush=False, count_calls=(k == 0)))
            if flush:
                cold[n].append(_measure_once(graphs[n], flush=True))
    result = {"sizes": [_summarize(runs[n], n) for n in sizes]}
    result["per_op_growth"] = _growth(result["sizes"])
    if flush:
        result["cold"] = {"sizes": [_summarize(cold[n], n) for n in sizes]}
        result["cold"]["per_op_growth"] = _growth(result["cold"]["sizes"])
    result["second_compile"] = _second_compile(sizes[0])
    result["config"] = {"repeat": repeat, "cache_flush": flush, "width": WIDTH}
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench compile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="ops per generated graph")
    parser.add_argument("--repeat", type=int, default=1, help="compiles per size (interleaved); median reported")
    timing.add_cache_flush_argument(parser)
    args = parser.parse_args(argv)
    results = measure(args.sizes, args.repeat, args.cache_flush)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(format_table(results))


def format_table(r: dict) -> str:
    lines = [f"{'ops':>8}{'compiler s':>12}{'us/op':>8}{'kernels s':>11}  phases (s)"]
    for s in r["sizes"]:
        phases = ", ".join(f"{k} {v:.2f}" for k, v in s["phases"].items())
        lines.append(f"{s['ops']:>8}{s['seconds']:>12.2f}{s['seconds'] / s['ops'] * 1e6:>8.0f}"
                     f"{s['kernel_seconds']:>11.2f}  {phases}")
    growth = ", ".join(f"{k} {v:.2f}" for k, v in r["per_op_growth"].items())
    lines.append(f"per-op time, largest / smallest size: {growth}")
    sc = r["second_compile"]
    lines.append(f"second compile of the {sc['ops']}-op model: {sc['second_seconds']:.2f} s "
                 f"(first {sc['first_seconds']:.2f} s), kernels from the cache: {sc['kernels_from_cache']}")
    return "\n".join(lines)
