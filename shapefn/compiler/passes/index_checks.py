"""Index checks: every kernel that reads an index from data checks it, on the
device it runs on, without a sync (docs/guarantees.md#indices-from-data).

Where a kernel reads an index from tensor values (Gather's indices,
ScatterND's, RoiAlign's batch indices, a Slice's run-time axes, ...), its
generator writes ``checked(index, low, high, what)``: a call of an op of
shapefn's that TVM's fusion and schedules carry like any pure expression
and no code generator lowers. After scheduling,
``materialize`` turns a kernel's markers into code: an index outside
``[low, high)`` is clamped into it, and the kernel writes the first such
index into its call's *check record*, a buffer it takes after its own
parameters, with the number of its *check site*, an int it takes after
that. Nothing is read or written outside a buffer. The code generator passes both (``check_record``, and the
executable's site number of the call's node and ``what``); the VM reads the
record where the device has synced anyway and raises ``IndexError`` naming
the node, the index and its bounds (``csrc/vm/index_checks.h``).

The record's words, which ``csrc/vm/index_checks.h`` reads: [0] 1 once an
index was out of range, [1] the site, [2] the index, [3] ``low``, [4] ``high``.
"""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from .. import tvm_compat

__all__ = ["RECORD_WORDS", "checked", "checked_tensor", "checks_of", "from_end", "materialize", "without_checks"]

MARKER = "shapefn.checked_index"
RECORD_WORDS = 8  # csrc/vm/index_checks.h: kCheckWords


def _register_marker() -> None:
    """The marker, an op no code generator lowers: a kernel built without
    ``materialize`` (or ``without_checks``) fails to build, naming it,
    rather than calling a function that does not exist."""
    if MARKER in ir.Op.list_op_names():
        return
    tvm_compat.register_op(MARKER, "an index read from data, checked by index_checks.materialize")
    ir.register_op_attr(MARKER, "TCallEffectKind", tirx.CallEffectKind.Pure.value)
    ir.register_op_attr(MARKER, "TScriptPrinterName", "shapefn_checked_index")


_register_marker()


def checked(index, low, high, what: str) -> tirx.PrimExpr:
    """``index``, which a kernel reads from data, checked to lie in ``[low,
    high)`` (int64 bounds); ``what`` names it in the error ("take: index
    along axis 1" gives "take: index along axis 1 is 10, outside [-10, 10)")."""
    return tirx.call_intrin(str(index.ty.dtype), MARKER, index, _int64(low), _int64(high), ir.StringImm(what))


def _int64(value) -> tirx.PrimExpr:
    return tirx.const(value, "int64") if isinstance(value, int) else tirx.Cast("int64", value)


def _is_marker(expr) -> bool:
    return isinstance(expr, ir.Call) and isinstance(expr.op, ir.Op) and expr.op.name == MARKER


def _under(expr, condition) -> tirx.PrimExpr:
    """``expr`` with each of its markers taken only where ``condition``
    holds (a fifth argument: the marker's own condition and this one)."""
    def under(call):
        if not _is_marker(call):
            return call
        taken = tirx.And(call.args[4], condition) if len(call.args) > 4 else condition
        return tirx.call_intrin(str(call.ty.dtype), MARKER, *call.args[:4], taken)

    return tvm_ffi.structural_map(expr, [(ir.Call, under)])


def _conditional(node):
    """``node`` with each marker inside a branch of an ``if_then_else``
    taken only under that branch's condition (innermost branches first):
    ``materialize`` reads a store's indices before the store, where the
    branch's condition does not guard them (the second half of a
    concatenation reads an index at a position the first half does not
    have)."""
    def branch(call):
        if not (isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name == "prim.if_then_else"):
            return call
        cond, then, other = call.args
        if _markers(cond) or not (_markers(then) or _markers(other)):
            # (a condition that reads a checked index itself, as ``from_end``'s
            # sign test: its branches' checks stay unconditional, since making
            # them conditional on it nests checks inside the conditions of
            # checks once per enclosing branch. An index such a branch alone
            # reads is then checked where the branch is not taken too: a
            # report it would not have made, never a read outside a buffer)
            return call
        return tirx.if_then_else(cond, _under(then, cond), _under(other, tirx.Not(cond)))

    return tvm_ffi.structural_map(node, [(ir.Call, branch)])


def _markers(node) -> list[tirx.Call]:
    found: list[tirx.Call] = []

    def visit(call):
        if _is_marker(call):
            found.append(call)

    tvm_ffi.structural_walk(node, [(ir.Call, visit)])
    return found


def checks_of(func: tirx.PrimFunc) -> list[str]:
    """What ``func`` checks, in the order of its sites ([] for a kernel that
    checks nothing): site ``base + i`` is ``checks_of(func)[i]``."""
    return sorted({m.args[3].value for m in _markers(func.body)})


def from_end(index, extent, what: str) -> tirx.PrimExpr:
    """An int64 index from data in ``[-extent, extent)``, counted from the
    end when negative (ONNX's rule for Gather, Scatter*, axes), checked."""
    extent = tirx.Cast("int64", extent)
    value = checked(tirx.Cast("int64", index), -extent, extent, what)
    return tirx.if_then_else(value < 0, value + extent, value)


def materialize(func: tirx.PrimFunc, name: str = "", whats: list[str] | None = None) -> tirx.PrimFunc:
    """``func`` with its markers as code writing its check record (a buffer
    parameter) and check site (an int parameter), both added after its own
    parameters; ``func`` itself when it checks nothing. ``whats`` are the
    checks its call sites were numbered for (by default its own): those of
    the kernel before scheduling, which may have dropped a marker (a reshape
    of a scalar ignores the index into it) but keeps the parameters.

    A checked index out of range is reported and clamped into range; a
    store whose index range is empty (an axis of extent 0) is skipped. So a
    kernel touches no memory outside its buffers whatever the data say, and
    the results of a call that reported one are never handed out."""
    whats = checks_of(func) if whats is None else whats
    if not whats:
        return func
    ordinal = {what: i for i, what in enumerate(whats)}
    unknown = set(checks_of(func)) - set(whats)
    if unknown:
        raise ValueError(f"kernel {name or '(unnamed)'} checks {sorted(unknown)}, which its calls were not "
                         "numbered for")
    record = tirx.decl_buffer([RECORD_WORDS], "int64", name="check_record")  # (a buffer is a parameter itself)
    site = tirx.Var("check_site", "int64")
    zero, one = tirx.const(0, "int64"), tirx.const(1, "int64")

    def store(stmt: tirx.BufferStore):
        if not _markers(stmt):
            return stmt
        stmt = _conditional(stmt)
        markers = _markers(stmt)  # (innermost first: an index may be read at a checked index)
        seen: dict[int, tuple] = {}  # structural hash of a marker, its inner ones replaced -> (var, clamped)

        def replaced(expr):
            def replace(call):
                if _is_marker(call):
                    known = seen.get(tvm_ffi.structural_hash(call))
                    if known is not None:
                        return known[1]
                return call
            return tvm_ffi.structural_map(expr, [(ir.Call, replace)])

        binds, reports, nonempty = [], [], []
        for original in markers:
            m = replaced(original)
            if not _is_marker(m):  # (the same index at several places of one store: seen already)
                continue
            key = tvm_ffi.structural_hash(m)
            index, low, high, what = m.args[0], m.args[1], m.args[2], m.args[3].value
            taken = m.args[4] if len(m.args) > 4 else None  # (read only where a branch's condition holds)
            dtype = str(index.ty.dtype)
            var = tirx.Var("checked", dtype)
            binds.append(tirx.Bind(var, index if taken is None
                                   else tirx.if_then_else(taken, index, tirx.Cast(dtype, low))))
            wide = tirx.Cast("int64", var)
            top = tirx.Max(high - one, low)
            seen[key] = (var, tirx.Cast(dtype, tirx.Max(tirx.Min(wide, top), low)))
            fields = [one, site + ordinal[what], wide, low, high]
            writes = tirx.SeqStmt([tirx.BufferStore(record, v, [tirx.const(k, "int64")])
                                   for k, v in enumerate(fields)])
            outside = tirx.Or(wide < low, wide >= high)
            if taken is not None:
                outside = tirx.And(taken, outside)
            first = tirx.BufferLoad(record, [zero]) == zero
            reports.append(tirx.IfThenElse(tirx.And(outside, first), writes, None))
            nonempty.append(low < high if taken is None else tirx.Or(tirx.Not(taken), low < high))
        guard = nonempty[0]
        for n in nonempty[1:]:
            guard = tirx.And(guard, n)
        return tirx.SeqStmt([*binds, *reports, tirx.IfThenElse(guard, replaced(stmt), None)])

    body = tvm_ffi.structural_map(func.body, [(tirx.BufferStore, store)])
    if _markers(body):
        raise ValueError(f"kernel {name or '(unnamed)'} checks an index outside a buffer store, where "
                         "index_checks.materialize cannot check it")
    return tirx.PrimFunc([*func.params, record, site], body, func.ret_type, func.attrs)


def without_checks(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each checked index clamped into its range instead: for
    TVM's own VM, which has no check records (docs/relax_vm.md)."""
    if not _markers(func.body):
        return func

    def clamp(call):
        if not _is_marker(call):
            return call
        index, low, high = call.args[0], call.args[1], call.args[2]
        dtype = str(index.ty.dtype)
        top = tirx.Cast(dtype, tirx.Max(high - 1, low))
        return tirx.Max(tirx.Min(index, top), tirx.Cast(dtype, low))

    return func.with_body(tvm_ffi.structural_map(func.body, [(ir.Call, clamp)]))


def checked_tensor(x, extent, what: str, negative: bool = True):
    """A TE compute: ``x``'s indices checked against an axis of ``extent``
    (``[-extent, extent)`` counted from the end when ``negative``, else
    ``[0, extent)``), as int64 in ``[0, extent)``: for an index that a
    kernel of TVM's reads later (RoiAlign's batch indices, a Slice's axes)."""
    from tvm import te  # noqa: PLC0415  (the module is imported by TIR-only users too)

    def value(*i):
        if negative:
            return from_end(x(*i), extent, what)
        return checked(tirx.Cast("int64", x(*i)), tirx.const(0, "int64"), tirx.Cast("int64", extent), what)

    return te.compute(x.shape, value, name="checked")
