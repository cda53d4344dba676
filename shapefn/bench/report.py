"""``python -m shapefn.bench report DIR``: runs the benchmarks and writes
``DIR/report.md`` with PNG figures (matplotlib) and ``DIR/results.json``.

Benchmarks: ``vm_overhead``, ``compile`` and ``copy_elimination`` at their
default sizes (``--quick``: tiny ones, seconds in all). ``--cache-flush``
is passed to each and adds cold figures.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform

import tvm

from . import compile_time, copy_elimination, timing, vm_overhead

FULL = {"vm_overhead": {"num_ops": 1000, "repeat": 15},
        "compile": {"sizes": compile_time.SIZES, "repeat": 1},
        "copy_elimination": {"num_rois": 100, "fmap_shape": (64, 256, 56, 56)}}
QUICK = {"vm_overhead": {"num_ops": 50, "repeat": 3},
         "compile": {"sizes": (100, 200), "repeat": 1},
         "copy_elimination": {"num_rois": 4, "fmap_shape": (2, 4, 16, 16)}}


def run(quick: bool = False, flush: bool = False) -> dict:
    sizes = QUICK if quick else FULL
    return {
        "machine": machine(),
        "vm_overhead": vm_overhead.measure(**sizes["vm_overhead"], flush=flush),
        "compile": compile_time.measure(**sizes["compile"], flush=flush),
        "copy_elimination": copy_elimination.measure(**sizes["copy_elimination"], flush=flush),
    }


def machine() -> dict:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "last_level_cache_bytes": timing.last_level_cache_bytes(),
            "python": platform.python_version(), "tvm": tvm.__version__,
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


# ---- figures -----------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, groups: list[str], series: dict[str, list[float]], ylabel: str, title: str) -> None:
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_ylim(0, 1.35 * max(max(v) for v in series.values()))  # room for the legend above the bars
    ax.legend(fontsize=7, ncol=2, loc="upper left")


def plot_vm_overhead(r: dict, path: pathlib.Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    runs = [("", "wall"), ("cpu", "thread CPU")]

    def series(keys_by_runtime):
        out = {}
        for section, label in runs:
            source = r[section] if section else r
            for runtime, keys in keys_by_runtime.items():
                out[f"{runtime} ({label})"] = [source[k] for k in keys]
        return out

    _bars(axes[0, 0], ["static", "dynamic"],
          series({rt: [f"{rt}_static_ns_per_op", f"{rt}_dynamic_ns_per_op"] for rt in ("shapefn", "relax")}),
          "ns per op", f"unfused chain of {r['config']['ops']} elementwise ops")
    _bars(axes[0, 1], ["static", "dynamic"],
          series({rt: [f"{rt}_mlp_static_us", f"{rt}_mlp_dynamic_us"] for rt in ("shapefn", "relax")}),
          "us per inference", "MLP 1024-512-256-128, batch 1")
    _bars(axes[1, 0], ["own tensor types", "numpy array"],
          series({rt: [f"{rt}_call_us", f"{rt}_call_numpy_us"] for rt in ("shapefn", "relax")}),
          "us per call", "a call of an identity function from Python")
    _bars(axes[1, 1], ["native broadcast", "native reshape", "TVM-compiled"],
          series({"shapefn": ["shape_func_native_ns", "shape_func_native_reshape_ns", "shape_func_tvm_ns"]}),
          "ns per call", "one shape-function call from the VM")
    fig.suptitle("shapefn VM vs TVM Relax VM on the CPU (medians of interleaved repetitions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_compile(r: dict, path: pathlib.Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = r["sizes"]
    ops = [s["ops"] for s in sizes]
    ax.plot(ops, [s["seconds"] for s in sizes], "o-", label="compiler (own time)")
    for phase in sizes[0]["phases"]:
        ax.plot(ops, [s["phases"][phase] for s in sizes], ".--", label=phase)
    ax.plot(ops, [s["kernel_seconds"] for s in sizes], "s:", label="kernel generation (13 kernels)")
    per_op = sizes[0]["seconds"] / sizes[0]["ops"]
    ax.plot([0, ops[-1]], [0, per_op * ops[-1]], color="gray", lw=0.8, label="linear from the smallest")
    ax.set_xlabel("ops in the generated graph")
    ax.set_ylabel("seconds")
    ax.set_title(f"compile time; per-op growth (largest / smallest) {r['per_op_growth']['seconds']:.2f}",
                 fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_copy_elimination(r: dict, path: pathlib.Path) -> None:
    plt = _pyplot()
    modes = ["per_op", "per_input", "per_input_host_params"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "d2h_bytes", "device-to-host bytes"), (axes[1], "syncs", "syncs")):
        values = [max(r[m][key], 0.5) for m in modes]  # (0 on a log axis)
        bars = ax.bar(modes, values)
        ax.bar_label(bars, labels=[f"{r[m][key]:,}" for m in modes], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(label, fontsize=10)
    cfg = r["config"]
    fig.suptitle(f"copy elimination: {cfg['num_rois']} dynamic slices of a {cfg['fmap_bytes']:,}-byte feature map")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- markdown ----------------------------------------------------------------
def _vm_table(r: dict) -> list[str]:
    rows = [("chain of elementwise ops, static, ns/op", "static_ns_per_op"),
            ("chain of elementwise ops, dynamic, ns/op", "dynamic_ns_per_op"),
            ("MLP 1024-512-256-128, static, us", "mlp_static_us"),
            ("MLP 1024-512-256-128, dynamic, us", "mlp_dynamic_us"),
            ("empty call from Python (own tensor types), us", "call_us"),
            ("empty call from Python (numpy array), us", "call_numpy_us")]
    sections = [("", "wall"), ("min", "wall min"), ("cpu", "CPU")] + ([("cold", "cold")] if "cold" in r else [])
    lines = ["| | " + " | ".join(f"shapefn {label} | Relax {label}" for _, label in sections) + " |",
             "|---" + "|---:" * (2 * len(sections)) + "|"]

    def cell(section, key):
        source = r[section] if section else r
        return f"{source[key]:.3g}" if key in source else ""

    for label, key in rows:
        lines.append(f"| {label} | " + " | ".join(f"{cell(s, 'shapefn_' + key)} | {cell(s, 'relax_' + key)}"
                                                  for s, _ in sections) + " |")
    for label, key in (("shape function, native (`shapefn.broadcast`), ns", "shape_func_native_ns"),
                       ("shape function, native (`relax.reshape`), ns", "shape_func_native_reshape_ns"),
                       ("shape function, TVM-compiled (Python), ns", "shape_func_tvm_ns"),
                       ("machine reference (a fixed Python loop), us", "machine_reference_us")):
        lines.append(f"| {label} | " + " | ".join(f"{cell(s, key)} | " for s, _ in sections) + " |")
    target_sections = [("wall median", r), ("wall min", r["min"]), ("CPU median", r["cpu"])]
    lines += ["", "| target | " + " | ".join(f"{label} | limit | " for label, _ in target_sections) + "|",
              "|---" + "|---:|---:|---" * len(target_sections) + "|"]
    for rows in zip(*(vm_overhead.targets(section) for _, section in target_sections)):
        lines.append(f"| {rows[0][0]} | " + " | ".join(
            f"{value:.3g} | {limit:.3g} | {'met' if met else '**missed**'}" for _, value, limit, met in rows) + " |")
    lines += ["", "Ratios taken within each repetition (the two cases timed moments apart, at the same machine "
              "speed), median over repetitions:", "", "| target | ratio | limit | |", "|---|---:|---:|---|"]
    lines += [f"| {what} | {value:.3g} | {limit:.3g} | {'met' if met else '**missed**'} |"
              for what, value, limit, met in vm_overhead.paired_targets(r)]
    lines += ["", f"The machine itself ran {vm_overhead.machine_slowdown(r):.2f}x slower at the median than at "
              "its best during this run (`machine_reference_us`, a fixed Python loop timed interleaved with the "
              "rest: median / min). Medians move with it; the ratios between runtimes, timed interleaved, much less."]
    return lines


def _compile_table(r: dict) -> list[str]:
    phases = list(r["sizes"][0]["phases"])
    lines = ["| ops | compiler s | us per op | " + " | ".join(phases) + " | kernel generation s | instructions |",
             "|---:" * (5 + len(phases)) + "|"]
    for s in r["sizes"]:
        lines.append(f"| {s['ops']:,} | {s['seconds']:.2f} | {s['seconds'] / s['ops'] * 1e6:.0f} | " +
                     " | ".join(f"{s['phases'][p]:.2f}" for p in phases) +
                     f" | {s['kernel_seconds']:.2f} | {s['instructions']:,} |")
    growth = ", ".join(f"{k} {v:.2f}" for k, v in r["per_op_growth"].items())
    sc = r["second_compile"]
    largest = r["sizes"][-1]
    slowest = sorted(largest["relax_pass_seconds"].items(), key=lambda kv: -kv[1])[:4]
    lines += ["", f"Per-op time, largest size / smallest size (1 = linear): {growth}.",
              f"Slowest Relax passes at {largest['ops']:,} ops: " +
              ", ".join(f"{name} {sec:.2f} s" for name, sec in slowest) + ".",
              f"Second `shapefn.compile` of the {sc['ops']:,}-op model: {sc['second_seconds']:.2f} s "
              f"(first {sc['first_seconds']:.2f} s); kernels from the cache: "
              f"{'yes' if sc['kernels_from_cache'] else 'no'} ({sc['files_written_by_second']} files written)."]
    return lines


def _copy_table(r: dict) -> list[str]:
    modes = ["per_op", "per_input", "per_input_host_params"]
    lines = ["| | " + " | ".join(f"`{m}`" for m in modes) + " |", "|---" + "|---:" * len(modes) + "|"]
    for key in ("d2h_copies", "d2h_bytes", "syncs", "shape_func_calls", "modelled_transfer_s", "wall_s"):
        lines.append(f"| {key} | " + " | ".join(
            f"{r[m][key]:.3g}" if isinstance(r[m][key], float) else f"{r[m][key]:,}" for m in modes) + " |")
    if "cold" in r:
        lines.append("| wall_s, cold | " + " | ".join(f"{r['cold'][m]['wall_s']:.3g}" for m in modes) + " |")
    return lines


def write_report(results: dict, directory: str | os.PathLike, command: str) -> pathlib.Path:
    out = pathlib.Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    plot_vm_overhead(results["vm_overhead"], out / "vm_overhead.png")
    plot_compile(results["compile"], out / "compile_time.png")
    plot_copy_elimination(results["copy_elimination"], out / "copy_elimination.png")
    (out / "results.json").write_text(json.dumps(results, indent=2))
    m = results["machine"]
    lines = ["# shapefn benchmarks", "",
             f"`{command}` on {m['cpu']} ({m['cores']} cores, {m['last_level_cache_bytes'] >> 20} MiB last-level "
             f"cache), Python {m['python']}, TVM {m['tvm']}, {m['date']}. Raw figures: `results.json`. "
             "Times are medians of interleaved repetitions ('min': the fastest); 'CPU' is the "
             "benchmark thread's CPU time, which leaves out waiting for a core when other work shares "
             "the machine; 'cold' figures (with `--cache-flush`) time each call alone after evicting "
             "the CPU caches.", "",
             "## VM overhead: shapefn vs TVM's Relax VM", "",
             "`python -m shapefn.bench vm_overhead --json`: the same Relax modules on the CPU in one process, "
             "tensors small enough that kernel time is negligible.", "",
             *_vm_table(results["vm_overhead"]), "", "![VM overhead](vm_overhead.png)", "",
             "## Compile time", "", "`python -m shapefn.bench compile --json`", "",
             *_compile_table(results["compile"]), "", "![compile time](compile_time.png)", "",
             "## Copy elimination", "", "`python -m shapefn.bench copy_elimination --json`", "",
             *_copy_table(results["copy_elimination"]), "", "![copy elimination](copy_elimination.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shapefn.bench report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", help="where report.md, the PNG figures and results.json go")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the report, not the machine")
    timing.add_cache_flush_argument(parser)
    args = parser.parse_args(argv)
    command = "python -m shapefn.bench report " + " ".join(argv if argv is not None else [args.directory])
    path = write_report(run(args.quick, args.cache_flush), args.directory, command)
    print(f"wrote {path}")
