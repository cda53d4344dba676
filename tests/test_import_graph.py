"""The package's import graph has no cycles, and its dependencies point one
way: runtime <- compiler <- frontends <- tools (``LAYERS``), each layer a
folder of the package.

The graph is read from the source (``ast`` over ``shapefn/**/*.py``), with
every import statement wherever it stands: at module level, inside a
function (a lazy import hides a cycle, it does not remove it) or under
``TYPE_CHECKING``. Importing ``a.b.c`` runs ``a/b/__init__.py`` first, so
a module depends on the ``__init__`` of each subpackage it imports from
(not of its own packages: those are imported before it runs). The root
package's ``__init__`` is the public facade every import of shapefn runs
first; it is left out as a target (every module would close a cycle
through it), and its own imports are checked like any other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "shapefn"
PACKAGE = "shapefn"


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, known: dict) -> str | None:
    """The module of the package ``name`` names (itself or the module its
    attribute comes from), or None outside the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, known: dict) -> set[str]:
    """The package's modules ``module`` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names = [source] + [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name, known)
            if target is None:
                continue
            out.add(target)
            # Importing a.b.c runs a.b's __init__ (and a's, the facade, left out).
            parent = target.rpartition(".")[0]
            while parent and parent != PACKAGE:
                out.add(parent)
                parent = parent.rpartition(".")[0]
    own_packages = {module.rsplit(".", k)[0] for k in range(1, module.count(".") + 1)}
    return out - own_packages - {module, PACKAGE}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the modules along it (first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == 1:
                return path[path.index(succ):] + [succ]
            if succ not in state:
                found = visit(succ)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 20 and "shapefn.compiler.compile" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_graph_sees_function_level_and_relative_imports():
    """The reader finds what a cycle check needs: imports inside functions,
    relative imports of modules and of names, and subpackage __init__s."""
    graph = import_graph()
    assert "shapefn.frontend" in graph["shapefn"]  # shapefn/__init__: a lazy ``from .frontend import``
    assert "shapefn.compiler.passes.placement" in graph["shapefn.compiler.codegen.bytecode"]
    assert "shapefn.compiler" in graph["shapefn.frontend.onnx.ops.shapes"]  # shapefn.compiler.x's __init__
    assert "shapefn.compiler" not in graph["shapefn.compiler.codegen.bytecode"]  # its own package
    assert "shapefn.runtime.config" in graph["shapefn.compiler.machine_code.kernel_cache"]  # ``from ...runtime import``


# The layers, lowest first, each a folder of the package: a module may
# import its own layer and those below it. The runtime loads and runs
# executables; the compiler turns Relax modules (and shape functions written
# in Python) into them; frontends turn other formats into Relax modules.
# Everything else (the facade, the commands, the benchmarks) is the tools'
# layer, above them all.
LAYERS = ["runtime", "compiler", "frontend", "tools"]


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``module``'s layer: the folder it is in."""
    folder = module.split(".")[1] if module.count(".") else None
    return LAYERS.index(folder) if folder in LAYERS[:-1] else len(LAYERS) - 1


def test_the_layers_are_the_package_folders():
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert set(LAYERS[:-1]) <= folders
    assert layer_of("shapefn.runtime.vm") == 0 and layer_of("shapefn.compiler.passes.placement") == 1
    assert layer_of("shapefn.frontend.onnx.importer") == 2 and layer_of("shapefn.cli") == layer_of("shapefn") == 3


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    names = LAYERS
    return sorted(f"{m} ({names[layer_of(m)]}) imports {t} ({names[layer_of(t)]})"
                  for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))


def test_every_module_is_in_one_layer_and_imports_only_its_own_or_lower_ones():
    graph = import_graph()
    assert upward_imports(graph) == []


def test_an_upward_import_is_found():
    graph = {"shapefn.runtime.vm": {"shapefn.compiler.compile"}, "shapefn.compiler.compile": {"shapefn.runtime.vm"}}
    assert upward_imports(graph) == ["shapefn.runtime.vm (runtime) imports shapefn.compiler.compile (compiler)"]


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"b2"}, "b2": set(), "c": {"c"}}, ["c", "c"]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
])
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


RUN_SAVED = """
import json, sys
import numpy as np
import shapefn

exe = shapefn.Executable.load(sys.argv[1])
out = shapefn.VirtualMachine(exe, sys.argv[2])(np.array([[-1.0, 2.0, -3.0]], np.float32)).numpy()
print(json.dumps({"out": out.tolist(), "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("device", ["host", "sim"])
def test_a_saved_executable_runs_without_the_compiler_or_tvms_python_package(tmp_path, device):
    import json
    import subprocess
    import sys

    import numpy as np
    from onnx import TensorProto, helper

    import shapefn

    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])],
                              "m", [vi("x", TensorProto.FLOAT, ["n", 3])], [vi("y", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.sfx"
    shapefn.compile(shapefn.from_onnx(model), device).save(path)
    run = subprocess.run([sys.executable, "-c", RUN_SAVED, str(path), device], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    np.testing.assert_array_equal(result["out"], [[0.0, 4.0, 0.0]])
    imported = [m for m in result["modules"]
                if m == "tvm" or m.startswith(("tvm.", "shapefn.compiler", "shapefn.frontend", "onnx"))]
    assert imported == []
    assert "shapefn.runtime.vm" in result["modules"] and "tvm_ffi" in result["modules"]
