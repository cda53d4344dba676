"""The registry as Python sees it: masks, levels, aliases, errors, and shape
functions written in Python (TE) checked against their masks."""

import numpy as np
import pytest

import shapefn
from shapefn import DataDependenceError, OverDeclaredWarning, register_shape_func

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)


def test_builtin_masks_and_aliases():
    assert shapefn.data_dependence("relax.dynamic_strided_slice") == [False, True, True, True]
    assert shapefn.data_dependence("dyn.strided_slice") == [False, True, True, True]
    assert shapefn.data_dependence("dyn.topk") == [False, True]
    assert shapefn.data_dependence("dyn.zeros") == [True]
    info = shapefn.shape_func_info("dyn.reshape")
    assert info["name"] == "relax.reshape" and info["kind"] == "native"
    assert "dyn.strided_slice" in shapefn.registered_ops()
    assert "relax.dynamic_strided_slice" in shapefn.registered_ops()


def test_unknown_op_raises_key_error_naming_it():
    with pytest.raises(KeyError, match="no.such.op"):
        shapefn.data_dependence("no.such.op")


def test_mask_of_wrong_length_for_known_op():
    with pytest.raises(ValueError, match="takes 4 inputs"):
        @register_shape_func("dyn.strided_slice", [False, True], level=20)
        def f(data, begin):
            return [begin[0]]


def test_non_bool_mask_entries_raise_type_error():
    with pytest.raises(TypeError, match=r"data_dependent\[1\]"):
        register_shape_func("test.bad_mask", [False, 1])
    with pytest.raises(TypeError):
        register_shape_func("test.bad_mask", "yes")


def test_levels_and_override():
    @register_shape_func("test.levels", [False, True])
    def first(data, n):
        return [n[0]]

    with pytest.raises(ValueError, match="already registered at level 10"):
        @register_shape_func("test.levels", [False, True])
        def again(data, n):
            return [n[0]]

    @register_shape_func("test.levels", [False, True], level=20)
    def higher(data, n):
        return [n[0], data.shape[0]]

    assert shapefn.shape_func_info("test.levels")["level"] == 20

    # A lower level does not replace a higher one.
    @register_shape_func("test.levels", [False, False], level=5)
    def lower(data, n):
        return [data.shape[0]]

    assert shapefn.data_dependence("test.levels") == [False, True]

    @register_shape_func("test.levels", [True, True], level=20, override=True)
    def overridden(data, n):
        return [n[0] + data[0]]

    assert shapefn.data_dependence("test.levels") == [True, True]


def test_single_bool_mask_applies_to_every_input():
    @register_shape_func("test.uniform", True)
    def f(a, b):
        return [a[0] + b[0]]

    assert shapefn.data_dependence("test.uniform") == [True, True]


def test_reading_values_of_shape_only_input_raises():
    with pytest.raises(DataDependenceError, match="input 1"):
        @register_shape_func("test.liar", [False, False])
        def f(data, k):
            return [data.shape[0], k[0]]


def test_over_declared_input_warns():
    with pytest.warns(OverDeclaredWarning, match="input 0"):
        @register_shape_func("test.over", [True, True])
        def f(data, k):
            return [data.shape[0] * k[0]]


def test_builtin_shape_funcs_are_native_and_mask_driven():
    data = np.zeros((5, 6, 7, 8), np.float32)
    # The data input is given as a shape only: the built-in never needs it.
    out = shapefn._core.eval_shape_func(
        "dyn.strided_slice",
        [data.shape, np.array([1, 0, -1, 0]), np.array([4, 6, -8, 8]), np.array([2, 3, -2, 1])])
    assert out == [data[1:4:2, 0:6:3, -1:-8:-2, 0:8:1].shape]


def test_concurrent_registration_and_lookup():
    import threading

    errors = []

    def work(k):
        try:
            for i in range(50):
                shapefn._core.register(f"test.thread{k}.{i}", [False, True], 10, False, 2)
                assert shapefn.data_dependence(f"test.thread{k}.{i}") == [False, True]
                assert shapefn.data_dependence("dyn.topk") == [False, True]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    names = shapefn.registered_ops()
    assert all(f"test.thread{k}.{i}" in names for k in range(4) for i in range(50))
