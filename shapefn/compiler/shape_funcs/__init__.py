"""Shape functions written in Python with TVM TE: ``registry.py`` registers
them (``shapefn.register_shape_func``) in the native registry with their
masks; ``te_shape_func.py`` traces them, verifies their masks and compiles
them to host code."""
