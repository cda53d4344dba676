"""Ctrl-C during an import or a compile raises KeyboardInterrupt, whatever
phase it lands in (inside TVM's C++ passes too, which call shapefn's Python
passes), and the kernel cache stays usable: the next compile in the same
process works (docs/guarantees.md).

Each case delivers SIGINT from inside a function the phase calls, so the
signal lands there every time; each runs in a fresh process, whose main
thread receives it."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# (module, function): where the signal is delivered, one per phase.
PHASES = {
    "import": ("shapefn.frontend.onnx.ops.indexing", "gather"),
    "lowering data-dependent ops": ("shapefn.compiler.passes.lower_dynamic", "lower_dynamic_ops"),
    "a Python pass inside TVM's pass manager": ("shapefn.compiler.passes.rewrites", "reshapes_as_views"),
    "placement": ("shapefn.compiler.passes.placement", "place_module"),
    "scheduling": ("shapefn.compiler.schedules.target_schedule", "schedule"),
    "building kernels": ("shapefn.compiler.machine_code.kernel_cache", "_compile"),
}

SCRIPT = textwrap.dedent("""
    import importlib, os, signal, sys
    import numpy as np
    from onnx import TensorProto, helper
    import shapefn

    shapefn.set_cache_dir(sys.argv[3])
    module = importlib.import_module(sys.argv[1])
    original = getattr(module, sys.argv[2])
    fired = []

    def interrupted(*args, **kwargs):
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    interrupted.takes_scalars = getattr(original, "takes_scalars", False)  # (a converter's attribute)

    def patch(function):
        # function in place of the original wherever the compile looks it up
        setattr(module, sys.argv[2], function)
        if sys.argv[1] == "shapefn.frontend.onnx.ops.indexing":
            from shapefn.frontend.onnx import registry
            registry.CONVERTERS[("", "Gather")] = function
        for name in ("shapefn.compiler.compile", "shapefn.compiler.passes.relax_passes"):
            m = importlib.import_module(name)
            if hasattr(m, sys.argv[2]):
                setattr(m, sys.argv[2], function)

    patch(interrupted)

    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="g"),
             helper.make_node("Reshape", ["g", "flat"], ["f"], name="flat"),
             helper.make_node("NonZero", ["f"], ["y"], name="nz")]
    graph = helper.make_graph(nodes, "m", [vi("x", TensorProto.FLOAT, ["n", 3]), vi("i", TensorProto.INT64, ["k"])],
                              [vi("y", TensorProto.INT64, [1, "c"])],
                              initializer=[helper.make_tensor("flat", TensorProto.INT64, [1], [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    try:
        shapefn.compile(shapefn.from_onnx(model), "sim")
        print("finished" if fired else "never called")
    except KeyboardInterrupt as e:
        print("KeyboardInterrupt", "fired" if fired else "")
    except BaseException as e:
        print("RAISED", type(e).__name__, e)
    patch(original)
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), "sim"), "sim")
    print("then", vm(np.array([[0, 1, 0], [2, 0, 3]], np.float32), np.array([1])).numpy().tolist())
""")


@pytest.mark.parametrize("phase", list(PHASES))
def test_ctrl_c_raises_keyboard_interrupt_in_every_phase_and_the_next_compile_works(phase, tmp_path):
    module, function = PHASES[phase]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, module, function, str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "KeyboardInterrupt fired", (lines, proc.stderr[-3000:])
    assert lines[1] == "then [[0, 2]]"
