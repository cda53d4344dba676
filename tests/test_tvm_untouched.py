"""``import shapefn`` leaves TVM as it was for everyone else in the process:
shapefn's change to TVM's Python (the order of TE kernels' size parameters,
``compiler/kernels/te_params.py``) holds only inside shapefn's own compiles, its
OpenCL runtime adds what TVM's wheel lacks and replaces nothing, and sizing
TVM's thread pool writes no environment variable. Each check runs in a
fresh process, where nothing has touched TVM yet."""
import functools
import json
import operator
import os
import subprocess
import sys
import threading

from tvm import relax, te, tirx

from shapefn.compiler.kernels import te_params

# A small Relax module (legalized through TE), built without TVMScript,
# which needs a source file.
_MODULE = """
import tvm
from tvm import relax, tirx

def small_module(n):
    \"\"\"The rows' sums of squares of relu(x + y), for x[n, 3].\"\"\"
    x = relax.Var("x", relax.TensorType([n, 3], "float32"))
    y = relax.Var("y", relax.TensorType([3], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            relu = bb.emit(relax.op.nn.relu(relax.op.add(x, y)))
            total = bb.emit_output(relax.op.sum(relax.op.multiply(relu, relu), axis=[1]))
        bb.emit_func_output(total)
    return bb.get()
"""

_SNAPSHOTS = _MODULE + """
import importlib, json, os
import numpy as np
import onnx, tvm_ffi
from onnx import TensorProto, helper

CALLERS = ("tvm.relax.utils", "tvm.relax.block_builder", "tvm.relax.transform.legalize_ops.manipulate")
GLOBALS = ("target.build.opencl", "target.build.llvm", "device_api.opencl", "ffi.Module.load_from_bytes.opencl")

def snapshot():
    return ({name: importlib.import_module(name).gen_call_tir_inputs for name in CALLERS},
            {name: tvm_ffi.get_global_func(name, allow_missing=True) for name in GLOBALS},
            os.environ.get("TVM_NUM_THREADS"))

def changed(before, after):
    (functions, globals_, threads), (functions_now, globals_now, threads_now) = before, after
    names = [name for name in CALLERS if functions_now[name] is not functions[name]]
    names += [name for name in GLOBALS if globals_[name] is not None
              and (globals_now[name] is None or not globals_now[name].same_as(globals_[name]))]
    return names + ([f"TVM_NUM_THREADS={threads_now}"] if threads_now != threads else [])

before = snapshot()
stages = {"absent before import": [name for name in GLOBALS if before[1][name] is None]}
import shapefn
from shapefn.compiler import relax_vm
stages["import shapefn"] = changed(before, snapshot())
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
imported = shapefn.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
stages["shapefn.from_onnx"] = changed(before, snapshot())
exe = shapefn.compile(small_module(tirx.Var("n", "int64")), "host")
stages["shapefn.compile"] = changed(before, snapshot())
x, y = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
total = shapefn.VirtualMachine(exe, "host")(x, y).numpy()
assert (total == ((x + y) ** 2).sum(axis=1)).all(), total
stages["shapefn.VirtualMachine"] = changed(before, snapshot())
tvm.compile(imported, target="llvm", relax_pipeline=relax_vm.pipeline("llvm"))
stages["relax_vm.pipeline"] = changed(before, snapshot())
print(json.dumps(stages))
"""


def _fresh_process(script: str, env: dict, *args: str) -> dict:
    """What ``script`` prints last (JSON), run by a new interpreter."""
    run = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_tvm_is_the_same_after_import_compiles_and_runs(tmp_path):
    """TVM's functions shapefn touches are the same objects before ``import
    shapefn`` as after it, after an ONNX import, a compile, a VM run and a
    ``tvm.compile`` with shapefn's pipeline; ``TVM_NUM_THREADS`` stays
    unset; the OpenCL functions shapefn registers were not there before."""
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    env["SHAPEFN_CACHE_DIR"] = str(tmp_path)
    stages = _fresh_process(_SNAPSHOTS, env)
    assert stages == {
        "absent before import": ["device_api.opencl", "ffi.Module.load_from_bytes.opencl"],
        "import shapefn": [],
        "shapefn.from_onnx": [],
        "shapefn.compile": [],
        "shapefn.VirtualMachine": [],
        "relax_vm.pipeline": [],
    }


_TVM_BUILD = _MODULE + """
import hashlib, json, sys, tempfile
from tvm import te
if sys.argv[1] == "shapefn":
    import shapefn
    shapefn.compile(small_module(tirx.Var("n", "int64")), "host")  # (and a shapefn compile first)

def digest(data):
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()

built = {}
# TVM's own code generation orders a symbolic module's shape arithmetic
# differently from run to run: its object code is compared at static sizes.
for name, n in (("static", 4), ("symbolic", tirx.Var("n", "int64"))):
    target = tvm.target.Target("llvm")
    with target:
        built[f"{name}: TVM's pipeline"] = digest(relax.get_default_pipeline(target)(small_module(n)).script())
    ex = tvm.compile(small_module(n), target=target)
    built[f"{name}: VM code"] = digest(ex.as_text())
    if name == "static":
        with tempfile.TemporaryDirectory() as directory:
            ex.mod.imports[0].write_to_file(f"{directory}/kernels.o")
            with open(f"{directory}/kernels.o", "rb") as f:
                built[f"{name}: object code"] = digest(f.read())
n = tirx.Var("n", "int64")
a = te.placeholder((n,), "float32", name="a")
schedule = tvm.s_tir.Schedule(te.create_prim_func([a, te.compute((n,), lambda i: a[i] * 2, name="b")]))
outer, inner = schedule.split(schedule.get_loops(schedule.get_sblock("b"))[0], [None, 64])
schedule.bind(outer, "blockIdx.x")
schedule.bind(inner, "threadIdx.x")
(device,) = tvm.tirx.build(schedule.mod, tvm.target.Target("opencl", host="llvm")).imports
built["OpenCL module"] = [device.kind, device.is_runnable(), digest(device.inspect_source())]
print(json.dumps(built))
"""


def test_a_tvm_build_is_the_same_with_and_without_shapefn(tmp_path):
    """TVM's Relax pipeline, ``tvm.compile`` (object code, VM code) and
    TVM's OpenCL code generator give the same results in a process that
    imported shapefn and compiled with it as in one that did not: the
    OpenCL module is TVM's (not runnable without ``relax_vm.runnable``)."""
    env = {**os.environ, "SHAPEFN_CACHE_DIR": str(tmp_path)}
    without, with_shapefn = (_fresh_process(_TVM_BUILD, env, imported) for imported in ("tvm", "shapefn"))
    assert with_shapefn == without
    assert without["OpenCL module"][:2] == ["opencl", False]


# The TVM modules that call gen_call_tir_inputs by a name of their own.
_CALLERS = (relax.utils, relax.block_builder, relax.transform.legalize_ops.manipulate)


def test_tvms_function_is_replaced_only_while_a_thread_is_inside_in_order():
    """shapefn's wrapper is in TVM's modules inside ``in_order`` (nested
    too) and TVM's own function is back after it."""
    originals = [module.gen_call_tir_inputs for module in _CALLERS]
    with te_params.in_order():
        wrapped = [module.gen_call_tir_inputs for module in _CALLERS]
        assert not any(w is o for w, o in zip(wrapped, originals))
        with te_params.in_order():  # (re-entrant: the inner exit restores nothing)
            pass
        assert all(module.gen_call_tir_inputs is w for module, w in zip(_CALLERS, wrapped))
    assert all(module.gen_call_tir_inputs is o for module, o in zip(_CALLERS, originals))


def _sizes_passed(names: str) -> tuple[str, str]:
    """The scalar parameters of the kernel ``call_te`` makes of a copy of
    ``x[a * b * ...]`` (one size per letter of ``names``), and the sizes
    its call passes after ``x``: the shape binds none of them, so each is
    an extra parameter."""
    sizes = [tirx.Var(name, "int64") for name in names]
    x = relax.Var("x", relax.TensorType([functools.reduce(operator.mul, sizes)], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        call = bb.call_te(lambda t: te.compute(t.shape, lambda i: t[i]), x, primfunc_name_hint="copy")
        bb.emit_func_output(bb.emit(call))
    kernel = bb.get()[call.args[0]]
    return ("".join(p.name for p in kernel.params[1:-1]), "".join(v.name for v in call.args[1].fields[1:]))


def test_kernels_made_inside_take_their_sizes_in_order_of_first_occurrence():
    """TVM orders them as a Python set (by address: eight sizes come out
    scrambled, differently from process to process); in shapefn's compiles
    they follow the input's shape."""
    with te_params.in_order():
        assert _sizes_passed("abcdefgh") == ("abcdefgh", "abcdefgh")
        assert _sizes_passed("hgfedcba") == ("hgfedcba", "hgfedcba")


def test_another_threads_calls_get_tvms_result_while_a_compile_runs(monkeypatch):
    """The wrapper is a module attribute every thread sees: it reorders
    only for the thread inside ``in_order``."""
    reordering_threads = []
    canonical = te_params.canonical

    def spy(*args):
        reordering_threads.append(threading.current_thread().name)
        return canonical(*args)

    monkeypatch.setattr(te_params, "canonical", spy)
    built_outside = []
    with te_params.in_order():
        other = threading.Thread(target=lambda: built_outside.append(_sizes_passed("ab")), name="outside")
        other.start()
        other.join()
        _sizes_passed("ab")
    assert len(built_outside) == 1
    assert reordering_threads == [threading.current_thread().name]
    _sizes_passed("ab")
    assert len(reordering_threads) == 1
