"""Code generation: Relax (after the passes) -> shapefn bytecode.
``bytecode.py`` walks the functions and emits instructions;
``size_registers.py`` keeps symbolic sizes in int64 registers,
``register_cache.py`` values already in registers, and ``sources.py`` what
each instruction was generated for, so that a run-time error names the
model's node."""
