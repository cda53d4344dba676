"""``python -m shapefn.bench NAME [options]``: run one benchmark."""
import importlib
import sys

BENCHMARKS = {
    "copy_elimination": "shapefn.bench.copy_elimination",
    "models": "shapefn.bench.models",
    "vm_overhead": "shapefn.bench.vm_overhead",
    "compile": "shapefn.bench.compile_time",
    "report": "shapefn.bench.report",
    "relax_vm": "shapefn.bench.relax_vm",
    "kernels": "shapefn.bench.kernels",
    "index_checks": "shapefn.bench.index_checks",
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
        print(f"usage: python -m shapefn.bench {{{','.join(BENCHMARKS)}}} [--json] [--cache-flush] [options]",
              file=sys.stderr)
        sys.exit(2)
    importlib.import_module(BENCHMARKS[sys.argv[1]]).main(sys.argv[2:])


if __name__ == "__main__":
    main()
