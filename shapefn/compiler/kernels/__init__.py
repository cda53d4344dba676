"""shapefn's TIR kernel generators, one module per family. Each generator
returns a PrimFunc with symbolic sizes; the compiler's legalizations and
lowering of data-dependent ops call them.

* ``dynamic``: top-k, tile, arange, pad, broadcast_to (sizes known at run time)
* ``resize``: 2-D resize
* ``count``: kernels whose output size depends on the data (nonzero,
  unique, NMS): results at the front of upper-bound buffers and a count
* ``scan``: cumulative sum and product
* ``concat``, ``scatter``, ``slicing``, ``elementwise``
* ``gpu``, ``gpu_count``, ``gpu_nms``: GPU forms of the above (same names and signatures;
  ``target_schedule.kernel_form`` picks them)
* ``tir_builder``, ``gpu_builder``, ``heap``: helpers for writing kernels
* ``te_params``: kernels made from TE computations, size parameters in a deterministic order
"""
