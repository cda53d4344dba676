"""Kernels made from TE computations with their size parameters in a
deterministic order.

TVM's ``relax.utils.gen_call_tir_inputs`` (behind ``BlockBuilder.call_te``,
``emit_te`` and the legalization of ``layout_transform``) passes a kernel
the sizes its tensors' shapes do not bind as extra scalar parameters, in the
order of a Python set of TIR variables: by object address, so from process
to process. A kernel's structural hash follows its parameter order, and with
it the kernel cache's keys (``kernel_cache.py``), the kernels
``LegalizeOps`` merges as equal, their names, and the OpenCL source PoCL
caches: a warm compile rebuilt kernels and an OpenCL one its whole library.

Inside ``in_order()`` the scalar parameters are put in the order they
first occur in the buffers' shapes, then in the body, and the call's
trailing size arguments follow them. shapefn's compiles run inside it
(``shapefn.compile``, its passes, ``shapefn.compiler.relax_vm.pipeline``, the ONNX
importer); TVM used without shapefn keeps TVM's order.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import tvm
from tvm.ir import Var

from .. import tvm_compat


def canonical(tir_func: tvm.tirx.PrimFunc, call_args: list) -> tuple[tvm.tirx.PrimFunc, list]:
    """``tir_func`` and ``call_args`` (tensors, then the sizes of the scalar
    parameters that follow the tensor inputs) with those scalar parameters
    in order of first occurrence."""
    sizes = sum(1 for arg in call_args if tvm.ir.is_prim_expr(arg))
    if sizes < 2:
        return tir_func, call_args
    inputs = len(call_args) - sizes
    params = list(tir_func.params)
    scalars = params[inputs:inputs + sizes]
    rank = _first_occurrence(tir_func)
    order = sorted(range(sizes), key=lambda i: rank.get(scalars[i], len(rank) + i))
    if order == list(range(sizes)):
        return tir_func, call_args
    params[inputs:inputs + sizes] = [scalars[i] for i in order]
    reordered = tvm.tirx.PrimFunc(params, tir_func.body, tir_func.ret_type, tir_func.attrs)
    values = call_args[inputs:]
    return reordered, [*call_args[:inputs], *(values[i] for i in order)]


def _first_occurrence(func: tvm.tirx.PrimFunc) -> dict[Var, int]:
    """Each variable of ``func``'s buffer shapes (parameters in order, dims
    in order) and then of its body, by first occurrence."""
    rank: dict[Var, int] = {}

    def note(var) -> None:
        if isinstance(var, Var) and var not in rank:
            rank[var] = len(rank)

    for param in func.params:
        for dim in getattr(param.ty, "shape", None) or ():
            for var in tvm.tirx.analysis.undefined_vars(dim):
                note(var)
    for var in tvm.tirx.analysis.undefined_vars(func.body):
        note(var)
    return rank


# TVM's function is replaced only while some thread is inside ``in_order``:
# a module attribute is seen by every thread, so the wrapper reorders only
# for the threads inside (``_inside.depth``) and passes other threads'
# calls straight through; the last thread out puts TVM's function back.
_lock = threading.Lock()
_inside = threading.local()
_threads_inside = 0
_restore = None  # puts TVM's function back (tvm_compat.replace_gen_call_tir_inputs)


@contextlib.contextmanager
def in_order():
    """Within: the kernels TVM makes from TE computations in this thread
    (``call_te``, ``emit_te``, legalizations) take their size parameters in
    order of first occurrence. Re-entrant; usable as a decorator. TVM's
    ``gen_call_tir_inputs`` is back in its modules once no thread is inside."""
    depth = getattr(_inside, "depth", 0)
    if depth == 0:
        _enter()
    _inside.depth = depth + 1
    try:
        yield
    finally:
        _inside.depth = depth
        if depth == 0:
            _leave()


def _enter() -> None:
    global _threads_inside, _restore
    with _lock:
        if _threads_inside == 0:
            _restore = tvm_compat.replace_gen_call_tir_inputs(_in_order_inside)
        _threads_inside += 1


def _leave() -> None:
    global _threads_inside, _restore
    with _lock:
        _threads_inside -= 1
        if _threads_inside == 0:
            _restore()
            _restore = None


def _in_order_inside(gen_call_tir_inputs):
    @functools.wraps(gen_call_tir_inputs)
    def wrapper(*args, **kwargs):
        if not getattr(_inside, "depth", 0):
            return gen_call_tir_inputs(*args, **kwargs)
        tir_func, call_args, output_ty = gen_call_tir_inputs(*args, **kwargs)
        tir_func, call_args = canonical(tir_func, list(call_args))
        return tir_func, call_args, output_ty
    return wrapper
