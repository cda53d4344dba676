"""pytest configuration for TVM's test_frontend_onnx.py (see run.py): with
SHAPEFN_SUITE=1 the test file's check_correctness and run_in_tvm run the
model through shapefn.from_onnx + shapefn.compile(..., "sim") and compare
with onnxruntime as TVM's do; otherwise the tests run as written."""
import os

import numpy as np
import pytest

if os.environ.get("SHAPEFN_SUITE") == "1":
    import onnxruntime
    import tvm

    import shapefn

    def _numpy(value):
        if isinstance(value, tuple):
            return [_numpy(v) for v in value]
        if hasattr(value, "numpy"):
            return value.numpy()
        return np.array(value)

    def _run(model, inputs, ir_version, opset):
        import test_frontend_onnx as t
        if ir_version is not None:
            model.ir_version = ir_version
        if opset is not None:
            for imp in model.opset_import:
                if imp.domain in ["", "ai.onnx"]:
                    imp.version = opset
                    break
        inputs = t.generate_random_inputs(model, inputs)
        mod = shapefn.from_onnx(model)
        exe = shapefn.compile(mod, "sim")
        vm = shapefn.VirtualMachine(exe, "sim")
        initializers = {i.name for i in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in initializers]
        out = vm(*[inputs[n] for n in names if n in inputs])
        return inputs, out

    def check_correctness(model, inputs=None, ir_version=8, opset=14, rtol=1e-7, atol=1e-5, check_dtypes=False):
        import test_frontend_onnx as t
        inputs_ = t.generate_random_inputs(model, inputs)
        if ir_version is not None:
            model.ir_version = ir_version
        if opset is not None:
            model.opset_import[0].version = opset
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ort_out = session.run([], inputs_)
        _, out = _run(model, inputs_, None, None)
        got = _numpy(out)
        if len(ort_out) == 1:
            got = [got]
        assert len(got) == len(ort_out), "Unequal number of outputs"
        def check(g, w):
            if isinstance(g, list) and isinstance(w, list):
                assert len(g) == len(w)
                for a, b in zip(g, w):
                    check(a, b)
                return
            g = np.asarray(g)
            if check_dtypes:
                assert g.dtype == w.dtype
            tvm.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        for g, w in zip(got, ort_out):
            if w is not None:
                check(g, w)

    def _tvm_value(value):
        """A shapefn result as relax.VirtualMachine returns it (the tests
        check for ``tvm.runtime.Tensor``): tensors as TVM tensors."""
        if isinstance(value, tuple):
            return tuple(_tvm_value(v) for v in value)
        if hasattr(value, "numpy"):
            return tvm.runtime.tensor(value.numpy())
        return value

    def run_in_tvm(model, inputs=None, ir_version=8, opset=14):
        _, out = _run(model, inputs, ir_version, opset)
        return _tvm_value(out)

    @pytest.fixture(autouse=True)
    def _through_shapefn(monkeypatch):
        import test_frontend_onnx as t
        monkeypatch.setattr(t, "check_correctness", check_correctness)
        monkeypatch.setattr(t, "run_in_tvm", run_in_tvm)
