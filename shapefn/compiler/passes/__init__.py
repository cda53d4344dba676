"""The compiler's passes over Relax (``compile.py`` runs them, one line
each): ``lower_dynamic`` (data-dependent ops through the shape-function
registry), ``relax_passes`` (TVM's own passes, with shapefn's ``rewrites``,
``legalize``, ``fold_constants``, ``fusion_repairs`` and
``dataflow_regions``), ``host_params`` (a loop's shape-only inputs read
once), ``placement`` (which tensors live on the host), ``readback_order``
(reads of device values together), ``copies`` (where code generation copies
a tensor to the other side) and ``index_checks`` (indices from data checked
where kernels read them, applied as kernels are scheduled)."""
