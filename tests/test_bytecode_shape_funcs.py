"""Bytecode family: shape-function calls — invoke_shape_func with a shape
function written in Python (TVM-compiled when the VM first needs it). The
instruction with native shape functions (built-ins and registered probes:
shapes in, values only where the mask says, attributes, what the shape
function gives checked, a shape function the executable carries) and the
arity, output counts and masks checked when the VM is made are tested in
csrc/tests/test_interpreter_shape_funcs.cc."""
import numpy as np
import pytest
from bytecode import program, run

import shapefn

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def test_python_shape_function(tmp_path):
    shapefn.set_cache_dir(tmp_path)
    try:
        @shapefn.register_shape_func("test.bytecode.pair", [False, False], level=10, override=True)
        def pair(a, b):
            return [a.shape[0] + b.shape[0], b.shape[1]]

        pb, fb = program([("a", "float32", ["n", 2]), ("b", "float32", ["m", 2])])
        (shape,) = fb.shape_func("test.bytecode.pair", fb.args)
        fb.ret(shape)
        result, counters = run(pb, np.zeros((2, 2), np.float32), np.zeros((5, 2), np.float32))
        assert result == (7, 2) and counters["shape_func_calls"] == 1
    finally:
        shapefn.set_cache_dir(None)
