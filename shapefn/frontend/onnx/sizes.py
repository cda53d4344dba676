"""Size arithmetic the importer does itself where TVM's leaves a quotient
its simplifier cannot reduce: a Reshape's ``-1`` inferred by cancelling the
target's sizes against the data's, factor by factor."""
from __future__ import annotations

import functools

import tvm
from tvm import sym


def is_int(value, n: int) -> bool:
    return isinstance(value, tvm.tirx.IntImm) and value.value == n


def _factors(expr) -> list:
    """``expr`` as the factors of its products (``a * (b + c) * 64`` ->
    ``[a, b + c, 64]``)."""
    if isinstance(expr, tvm.tirx.Mul):
        return _factors(expr.a) + _factors(expr.b)
    return [expr]


def infer_minus_one(data, values) -> list | None:
    """``values`` with its one ``-1`` replaced by the size it stands for,
    where that size is a product left once the other target sizes cancel
    against the data's sizes factor by factor (so ``[s, n + p, 64]`` to
    ``[n + p, 16, -1]`` gives ``s * 4``, a quotient TVM's simplifier keeps
    as a floordiv); else None (TVM's converter infers it)."""
    if sum(is_int(v, -1) for v in values) != 1 or any(is_int(v, 0) for v in values):
        return None
    numerator = [f for dim in data.ty.shape.values for f in _factors(dim)]
    analyzer = sym.Analyzer()
    constant = 1
    for value in values:
        if is_int(value, -1):
            continue
        for factor in _factors(value):
            if isinstance(factor, tvm.tirx.IntImm):
                constant *= factor.value
                continue
            match = next((i for i, n in enumerate(numerator) if analyzer.can_prove_equal(n, factor)), None)
            if match is None:
                return None
            del numerator[match]
    ints = [n.value for n in numerator if isinstance(n, tvm.tirx.IntImm)]
    symbolic = [n for n in numerator if not isinstance(n, tvm.tirx.IntImm)]
    total = functools.reduce(lambda a, b: a * b, ints, 1)
    if constant <= 0 or total % constant or not symbolic:
        return None  # (all static: TVM's converter infers it exactly)
    size = functools.reduce(lambda a, b: a * b, symbolic, tvm.tirx.IntImm("int64", total // constant))
    return [analyzer.simplify(size) if is_int(v, -1) else v for v in values]
