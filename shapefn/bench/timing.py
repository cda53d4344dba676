"""Timing shared by the benchmarks: interleaved repetitions, median and
minimum, and optional eviction of the CPU caches between iterations.

A kernel timed alone in a loop runs with its code, its data and the VM's
bookkeeping all in cache; inside a whole network they are not. With
``flush=True`` every timed call follows a write over a buffer larger than the
last-level cache (outside the timed region), so it is measured cold.
"""
from __future__ import annotations

import argparse
import glob
import statistics
import time
from collections.abc import Callable, Mapping

import numpy as np

from ..compiler.compile import gc_paused

_FALLBACK_LLC_BYTES = 64 << 20
_flush_buffer: np.ndarray | None = None


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    for suffix, scale in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(text[:-1]) * scale
    return int(text)


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache, from sysfs (64 MiB if unknown)."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                sizes.append(_parse_size(f.read()))
        except (OSError, ValueError):
            continue
    return max(sizes) if sizes else _FALLBACK_LLC_BYTES


def flush_caches() -> None:
    """Evicts the caches: writes every cache line of a buffer twice the size
    of the last-level cache."""
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = np.zeros(2 * last_level_cache_bytes() // 8, dtype=np.int64)
    _flush_buffer += 1


def add_cache_flush_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-flush", action="store_true",
                        help="also time every call cold, after evicting the CPU caches (adds 'cold' figures)")


def samples(fn: Callable[[], object], *, number: int = 1, flush: bool = False) -> tuple[float, float]:
    """Wall and CPU seconds per call of ``fn``: the mean of ``number``
    back-to-back calls, or of one call after a cache flush with
    ``flush=True``. CPU time is this thread's: on a machine shared with
    other work it leaves out the time the thread waited for a core."""
    if flush:
        flush_caches()
        number = 1
    start, start_cpu = time.perf_counter(), time.thread_time()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number, (time.thread_time() - start_cpu) / number


def interleaved(cases: Mapping[str, Callable[[], object]], *, repeat: int, number: int | Mapping[str, int] = 1,
                flush: bool = False) -> dict[str, dict[str, list[float]]]:
    """Wall (``"wall"``) and CPU (``"cpu"``) seconds per call of every case,
    ``repeat`` times, round-robin: each repetition times every case once, so
    load from other processes spreads over all cases instead of landing on
    one."""
    times: dict[str, dict[str, list[float]]] = {"wall": {name: [] for name in cases},
                                                "cpu": {name: [] for name in cases}}
    with gc_paused():  # as timeit does: a collection is not what any case costs
        for _ in range(repeat):
            for name, fn in cases.items():
                n = number[name] if isinstance(number, Mapping) else number
                wall, cpu = samples(fn, number=n, flush=flush)
                times["wall"][name].append(wall)
                times["cpu"][name].append(cpu)
    return times


def summarize(times: Mapping[str, list[float]], scale: Mapping[str, float]) -> tuple[dict, dict]:
    """``(median, minimum)`` of each case, each multiplied by ``scale[name]``
    (a unit conversion, or 1 / the number of ops a call runs)."""
    return ({name: statistics.median(t) * scale[name] for name, t in times.items()},
            {name: min(t) * scale[name] for name, t in times.items()})
