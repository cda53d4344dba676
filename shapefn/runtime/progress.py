"""Progress of a long compile on stderr: the phase being run, and a bar over
the kernels being built (tqdm). Quiet unless asked for: ``progress=True``,
or ``"auto"`` (shown when stderr is a terminal, as the ``shapefn`` command
does by default)."""
from __future__ import annotations

import contextlib
import sys


class Progress:
    """Reports phases and kernel builds; the quiet one (``Progress(False)``)
    does nothing."""

    def __init__(self, enabled: bool = False, description: str = "shapefn.compile"):
        self.enabled = enabled
        self.description = description
        self._bar = None

    @classmethod
    def of(cls, setting) -> Progress:
        """From ``compile``'s ``progress`` argument: a bool, "auto" or a Progress."""
        if isinstance(setting, Progress):
            return setting
        if setting == "auto":
            return cls(sys.stderr.isatty())
        if isinstance(setting, bool):
            return cls(setting)
        raise ValueError(f"progress must be True, False or 'auto', got {setting!r}")

    @contextlib.contextmanager
    def phase(self, name: str):
        """Runs the body as the phase ``name``."""
        if self.enabled:
            print(f"{self.description}: {name}", file=sys.stderr, flush=True)
        yield

    @contextlib.contextmanager
    def kernels(self, total: int, what: str = "kernels built"):
        """A bar over ``total`` kernels; the body calls ``advance()`` per kernel."""
        if not self.enabled or total == 0:
            yield
            return
        from tqdm import tqdm

        with tqdm(total=total, desc=f"{self.description}: {what}", unit="kernel", file=sys.stderr,
                  leave=False, dynamic_ncols=True) as bar:
            self._bar = bar
            try:
                yield
            finally:
                self._bar = None

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)


QUIET = Progress(False)
