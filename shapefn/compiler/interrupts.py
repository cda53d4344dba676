"""Ctrl-C during a compile or an import raises ``KeyboardInterrupt``, in
every phase (docs/guarantees.md).

Most of a compile runs inside TVM's C++ passes, which call shapefn's
passes written in Python; a ``KeyboardInterrupt`` raised in one of those
comes back out of TVM's FFI as a bare ``RuntimeError``. While a compile runs
on the main thread under Python's default SIGINT handler, ``kept`` notes
that the signal arrived, and turns whatever error the compile then ends
with into ``KeyboardInterrupt`` (the error as its cause)."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["kept"]


@contextlib.contextmanager
def kept() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # (a handler of the caller's own, or a thread that receives no signals)
        return
    interrupted = False

    def on_interrupt(signum, frame):
        nonlocal interrupted
        interrupted = True
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    except Exception as error:
        if interrupted:
            raise KeyboardInterrupt("interrupted while compiling") from error
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
