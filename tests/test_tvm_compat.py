"""shapefn's seam to TVM's unpublished names (``shapefn/compiler/tvm_compat.py``):
each entry still does what shapefn needs of it in the TVM installed (a
failure names what TVM changed: the first thing to look at after an
upgrade), and no other module of the package uses a private TVM name."""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, te

from shapefn.compiler import tvm_compat

PACKAGE = Path(tvm_compat.__file__).resolve().parents[1]
SEAM = Path(tvm_compat.__file__).resolve()


def _changed(what: str) -> str:
    return f"TVM changed {what}, which shapefn.compiler.tvm_compat relies on: adapt the seam there"


def _add_model() -> onnx.ModelProto:
    bias = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "bias")
    node = helper.make_node("Add", ["x", "bias"], ["y"], name="add")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_tvm_onnx_converters_are_found_by_operator_and_opset():
    table = tvm_compat.onnx_convert_map()
    assert "Add" in table and "TopK" in table, _changed("the ONNX importer's converter table (_get_convert_map)")
    assert callable(table["Add"].get_converter(17)), _changed("the converters' get_converter(opset)")
    inputs = tvm_compat.onnx_input()
    inputs.append(None)
    assert list(inputs) == [None], _changed("onnx_input, the list converters take")


def test_a_named_dimension_is_one_size_variable_by_name():
    names: dict = {}
    n = tvm_compat.parse_shape_name("n", names)
    assert isinstance(n, tvm.tirx.Var) and n.name == "n", _changed("parse_shape_name")
    assert tvm_compat.parse_shape_name("n", names).same_as(n), _changed("parse_shape_name's reuse of names")


def test_every_importer_hook_is_called_by_tvms_from_onnx_and_reads_tvms_state():
    called = []

    class Recording(tvm_compat.OnnxGraphImporter):
        pass

    hooks = ["check_for_unsupported_ops", "parse_graph_input", "parse_attr", "construct_nodes", "convert_operator"]
    for hook in hooks:
        def recorded(self, *args, _hook=hook):
            called.append(_hook)
            return getattr(tvm_compat.OnnxGraphImporter, _hook)(self, *args)
        setattr(Recording, hook, recorded)

    model = _add_model()
    importer = Recording({"x": [2, 3]}, "float32", keep_params_in_input=False, sanitize=True)
    mod = importer.from_onnx(model.graph, 17)
    missing = [h for h in hooks if h not in called]
    assert not missing, _changed(f"ONNXGraphImporter.from_onnx, which no longer calls {missing}")
    assert isinstance(mod, tvm.IRModule) and "main" in [gv.name_hint for gv in mod.functions]
    assert {"x", "bias", "y"} <= set(importer.nodes), _changed("the importer's value table (_nodes)")
    assert list(importer.input_shapes.get("x", ())) == [2, 3], _changed("the importer's input shapes (_shape)")
    assert isinstance(importer.params, dict), _changed("the importer's parameters (_params)")
    array = importer.parse_array(model.graph.initializer[0])
    np.testing.assert_array_equal(array.numpy(), [1.0, 2.0, 3.0], err_msg=_changed("_parse_array"))
    assert importer.parse_value_proto(model.graph.output[0]) == "y", _changed("_parse_value_proto")


def test_a_binding_block_opened_and_closed_holds_what_was_emitted_in_it():
    x = relax.Var("x", relax.TensorType([2], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        tvm_compat.begin_binding_block(bb)
        y = bb.emit(relax.op.add(x, x))
        block = tvm_compat.end_block(bb)
        assert isinstance(block, relax.BindingBlock) and not isinstance(block, relax.DataflowBlock), \
            _changed("BlockBuilder._begin_binding_block / _end_block")
        assert [b.var.same_as(y) for b in block.bindings] == [True], _changed("BlockBuilder._end_block")
        bb.emit_func_output(relax.SeqExpr([block], y))


def test_a_type_set_on_a_new_global_var_is_its_type():
    gv = tvm.ir.GlobalVar("f")
    ty = relax.FuncType([relax.TensorType([2], "float32")], relax.TensorType([2], "float32"), True)
    tvm_compat.update_type(gv, ty)
    tvm.ir.assert_structural_equal(gv.ty, ty)


def test_a_registered_op_is_found_by_name():
    name = "shapefn.test_tvm_compat_op"
    if name not in tvm.ir.Op.list_op_names():
        tvm_compat.register_op(name, "an op of this test")
    assert tvm.ir.Op.get(name).name == name, _changed("ir._ffi_api.RegisterOp")


def test_te_kernels_are_made_through_the_bindings_replaced():
    import importlib

    modules = [importlib.import_module(n) for n in tvm_compat.gen_call_tir_inputs_callers()]
    originals = [m.gen_call_tir_inputs for m in modules]
    assert len({id(f) for f in originals}) == 1, _changed("gen_call_tir_inputs (its callers bind different ones)")
    calls = []

    def wrap(original):
        def wrapper(*args, **kwargs):
            calls.append(args)
            return original(*args, **kwargs)
        return wrapper

    restore = tvm_compat.replace_gen_call_tir_inputs(wrap)
    try:
        x = relax.Var("x", relax.TensorType([4], "float32"))
        bb = relax.BlockBuilder()
        with bb.function("main", [x]):
            y = bb.emit_te(lambda a: te.compute(a.shape, lambda i: a[i] * 2), x)
            bb.emit_func_output(y)
    finally:
        restore()
    assert calls, _changed("BlockBuilder.emit_te, which no longer makes its kernel through gen_call_tir_inputs")
    assert [m.gen_call_tir_inputs for m in modules] == originals


# --- no private TVM name outside the seam -----------------------------------

def _private_members() -> set[str]:
    """The private members (one leading underscore) of the TVM classes
    shapefn builds on or holds, an importer's instance state included."""
    importer = tvm_compat.OnnxGraphImporter({}, "float32", keep_params_in_input=False, sanitize=True)
    names = set(vars(importer))
    for cls in (tvm_compat.OnnxGraphImporter.__mro__[1], relax.BlockBuilder, relax.PyExprMutator,
                relax.PyExprVisitor, tvm.IRModule, relax.Expr, tvm.tirx.PrimFunc, tvm.target.Target):
        names |= set(dir(cls))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _tvm_uses(path: Path, private_members: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    tvm_names, own = set(), set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("tvm", "tvm_ffi"):
                    tvm_names.add((alias.asname or alias.name).split(".")[0])
                    if any(p.startswith("_") for p in alias.name.split(".")) or "onnx_frontend" in alias.name:
                        found.append(f"{path}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("tvm", "tvm_ffi"):
            parts = [*node.module.split("."), *(a.name for a in node.names)]
            if any(p.startswith("_") for p in parts) or "onnx_frontend" in parts:
                found.append(f"{path}:{node.lineno}: from {node.module} import ...")
            tvm_names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute):
                        own.add(t.attr)
                    elif isinstance(t, ast.Name):
                        own.add(t.id)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        base = node.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in tvm_names:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif node.attr in private_members and node.attr not in own:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)} (a private member of a TVM class)")
    return found


def test_no_module_but_the_seam_uses_a_private_tvm_name():
    private_members = _private_members()
    sources = [p for p in sorted(PACKAGE.rglob("*.py")) if p.resolve() != SEAM]
    found = list(itertools.chain.from_iterable(_tvm_uses(p, private_members) for p in sources))
    assert not found, ("private TVM names outside shapefn/compiler/tvm_compat.py (give each an entry "
                       "there):\n" + "\n".join(found))


@pytest.mark.parametrize("source, expected", [
    ("from tvm.relax.expr import _update_type\n", "from tvm.relax.expr import"),
    ("import tvm\ntvm.ir._ffi_api.RegisterOp('a', 'b')\n", "tvm.ir._ffi_api"),
    ("from tvm.relax.frontend.onnx import onnx_frontend\n", "from tvm.relax.frontend.onnx import"),
    ("def f(bb):\n    return bb._end_block()\n", "bb._end_block"),
])
def test_the_check_finds_each_kind_of_private_use(tmp_path, source, expected):
    path = tmp_path / "module.py"
    path.write_text(source)
    found = _tvm_uses(path, _private_members())
    assert len(found) == 1 and expected in found[0], found
