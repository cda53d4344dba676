"""The Relax -> shapefn compiler: ``compile.py`` runs its passes in order
(docs/compiler.md lists them), one folder per role:

* ``passes/``: the passes over Relax, before and after TVM's own
  (placement, lowering of data-dependent ops, copies, index checks, ...);
* ``schedules/``: how each kernel is scheduled for the processor it runs on;
* ``codegen/``: Relax (after the passes) -> shapefn bytecode;
* ``kernels/``: shapefn's TIR kernel generators;
* ``machine_code/``: kernels compiled to machine code (the kernel cache,
  CUDA fatbins);
* ``shape_funcs/``: shape functions written in Python with TVM TE;
* ``relax_vm/``: the same lowering as a pipeline for TVM's own VM.

``ops.py`` and ``shape_calls.py`` are the Relax forms frontends emit for
data-dependent ops and shapes; ``interrupts.py`` makes Ctrl-C raise in every
phase; ``hand_built.py`` compiles kernels for hand-built VM programs;
``tvm_compat.py`` is the one module that uses TVM's private or unpublished
names (the ONNX importer's hooks among them), each under a name of shapefn's.

The package imports none of its modules, so importing one (as the
registry and the kernel cache do) does not import the whole compiler."""
