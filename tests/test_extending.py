"""docs/extending.md's recipe for an ONNX operator converter, followed end to
end: its example family module, as written there, loaded as a module of
``shapefn.frontend.onnx.ops`` in a fresh process (so that this process's
registry is untouched), registers a converter for an operator of a made-up
domain; a model using it is imported, compiled for ``host`` and run against
numpy; and a second registration of the same (domain, operator) is refused."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from test_docs import HEADING, parse

EXTENDING = Path(__file__).resolve().parents[1] / "docs" / "extending.md"

# Loads the family module at argv[1] as the ops package's module "example".
LOAD = textwrap.dedent("""
    import importlib.util, sys

    def load_family(path):
        spec = importlib.util.spec_from_file_location("shapefn.frontend.onnx.ops.example", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
""")

END_TO_END = LOAD + textwrap.dedent("""
    import numpy as np
    from onnx import TensorProto, helper

    import shapefn

    load_family(sys.argv[1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    nodes = [helper.make_node("ScaledSquare", ["x"], ["s"], domain="com.example", scale=0.5),
             helper.make_node("Sub", ["s", "x"], ["y"])]
    graph = helper.make_graph(nodes, "scaled_square", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])

    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), "host"), "host")
    rng = np.random.default_rng(0)
    for n in (4, 1, 0):
        a = rng.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(vm(a).numpy(), 0.5 * a * a - a, rtol=1e-6, atol=1e-6)
    print("matches numpy")
""")

TWICE = LOAD + textwrap.dedent("""
    load_family(sys.argv[1])
    try:
        load_family(sys.argv[1])
    except ValueError as err:
        print("refused:", err)
""")


def example_family(tmp_path: Path) -> Path:
    """The first ``python`` block of the page's converter section, as a file."""
    prose, blocks = parse(EXTENDING.read_text())
    start = next(number for number, line in enumerate(prose, 1)
                 if (h := HEADING.match(line)) and h.group(2) == "An ONNX operator converter")
    block = next(b for b in blocks if b.line > start and b.lang == "python")
    path = tmp_path / "example.py"
    path.write_text(block.text)
    return path


def run(script: str, tmp_path: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", script, str(example_family(tmp_path))], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_converter_recipe_imports_compiles_and_runs_a_model(tmp_path):
    assert run(END_TO_END, tmp_path).splitlines() == ["matches numpy"]


def test_a_second_converter_for_the_same_domain_and_operator_is_refused(tmp_path):
    assert run(TWICE, tmp_path).splitlines() == [
        "refused: ONNX operator 'com.example.ScaledSquare' already has a converter: "
        "shapefn.frontend.onnx.ops.example.scaled_square"]
