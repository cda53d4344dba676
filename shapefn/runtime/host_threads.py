"""How many threads run the parallel loops of shapefn's host kernels.

Host kernels are TVM-compiled code: a parallel loop runs on TVM's thread
pool, whose size TVM takes from ``TVM_NUM_THREADS`` (or ``OMP_NUM_THREADS``)
or else from half the logical CPUs on x86 (it assumes two hardware threads
per core: on a 2-CPU machine one thread, which runs every loop serially).
shapefn gives the pool every CPU the process may use, unless
``TVM_NUM_THREADS`` chooses a count, when its first VM is made: not at
``import shapefn`` or in a compile, and without writing the environment
(so child processes and TVM used without shapefn's VM see what they did).

It does so with TVM's ``runtime.config_threadpool``, which sets TVM's
thread count for the whole process: TVM has one (each parallel launch
reads it, and runs serially when it is 1) and no pool per library, so the
pool shapefn's kernels run on is the pool every TVM kernel in the process
runs on. The calling thread's pool is made at that size (and other threads'
pools when they first run a parallel loop); a pool a thread made before,
from TVM's count, keeps its threads (TVM cannot grow one).
"""
from __future__ import annotations

import os
import threading

import tvm_ffi

# TVM's affinity mode "one core per thread" (ThreadGroup::kSpecifyOneCorePerThread):
# the pool's workers on the CPUs listed, as TVM places them by default on
# all the machine's, and the calling thread free to run on any of them.
_ONE_CORE_PER_THREAD = -2

_lock = threading.Lock()
_sized = False


def pool_threads() -> int:
    """The threads of TVM's pool on the calling thread, once shapefn has
    sized the pool (see the module's docstring)."""
    global _sized
    with _lock:
        if not _sized and "TVM_NUM_THREADS" not in os.environ:
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
            tvm_ffi.get_global_func("runtime.config_threadpool")(_ONE_CORE_PER_THREAD, 0, [str(c) for c in cpus])
        _sized = True
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())
