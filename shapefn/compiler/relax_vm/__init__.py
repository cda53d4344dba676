"""shapefn inside TVM's own VM: a Relax pipeline for ``tvm.compile`` whose
result runs on an unmodified ``tvm.relax.VirtualMachine``.

    from shapefn.compiler.relax_vm import pipeline
    ex = tvm.compile(mod, target="llvm", relax_pipeline=pipeline("llvm"))
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())

Data-dependent ops are lowered through shapefn's registry, as for shapefn's
own VM, into calls of the builtins the C++ core registers with tvm-ffi
(``csrc/relax/builtins.cc``): a shape function gets the shapes of the
inputs its mask marks ``False`` and the values of the others only;
count-sized ops (nonzero, unique, NMS, users' count-sized kernels) read back
their counts alone, the independent counts of a phase in one sync
(``read_counts.py``). Everything else goes through TVM's default pipeline
for the target, unchanged.

TVM's wheel has no OpenCL runtime: an OpenCL module from ``tvm.compile``
runs once ``runnable`` has handed its device code to shapefn's (or after a
save and a load, which goes through shapefn's loader).

    from shapefn.compiler.relax_vm import pipeline, runnable
    ex = runnable(tvm.compile(mod, target="opencl", relax_pipeline=pipeline("opencl")))

``compile.py`` holds the pipeline and its passes; ``host_shapes.py`` and
``read_counts.py`` the passes particular to TVM's VM.
"""
from .compile import SHAPE_FUNC_PER_OP, pipeline, runnable

__all__ = ["SHAPE_FUNC_PER_OP", "pipeline", "runnable"]
