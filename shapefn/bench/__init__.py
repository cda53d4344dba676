"""Benchmarks: ``python -m shapefn.bench NAME``."""
