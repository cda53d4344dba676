"""Small helpers for writing TIR kernels with TVM's IR builder: symbolic
sizes, buffer parameters, scalar locals, flat views and loop nests."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from tvm import te, tirx
from tvm.script.ir_builder import tirx as T


def sizes(prefix: str, ndim: int) -> list[tirx.Var]:
    return [te.var(f"{prefix}{i}", "int64") for i in range(ndim)]


def arg(name: str, shape: Sequence, dtype: str):
    """Declares a buffer parameter of the PrimFunc being built; returns a
    proxy that reads and writes it with ``buf[i, j]``."""
    return T.buffer_proxy(T.arg(name, tirx.decl_buffer(list(shape), dtype, name=name)))


def local(dtype: str, init):
    """A one-element thread-local scalar, initialised to ``init``."""
    buf = T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))
    buf[0] = tirx.const(init, dtype) if isinstance(init, int | float) else init
    return buf


def flat_view(buf, size, dtype: str):
    """A 1-D alias of ``buf``'s storage (row-major), ``size`` elements long."""
    return T.buffer_proxy(T.decl_buffer((size,), dtype, data=buf.data))


@contextlib.contextmanager
def loops(extents: Sequence, kind=T.serial) -> Iterator[list]:
    """Nested loops over ``extents`` (outermost first); yields the loop vars."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(kind(0, e)) for e in extents]


def i64(value: int):
    return tirx.const(value, "int64")
