"""Kernels compiled to machine code: ``kernel_cache.py`` compiles the
kernels of a module (batched into object files, keyed by content, linked
into one shared library) and keeps them on disk; ``cuda_fatbin.py`` builds
CUDA device code with the machine's nvcc."""
