"""The compiler's passes over Relax, in the order ``compile.py`` runs them:
``rewrites`` (fewer kernels before legalization), ``lower_dynamic`` (data-
dependent ops through the shape-function registry), ``relax_passes`` (TVM's
own passes, with shapefn's ``legalize``, ``fold_constants`` and
``fusion_repairs``), ``placement`` (which tensors live on the host),
``host_params`` (a loop's shape-only inputs read once), ``copies``,
``index_checks`` (indices from data checked where kernels read them),
``dataflow_regions`` and ``readback_order`` (reads of device values
together)."""
