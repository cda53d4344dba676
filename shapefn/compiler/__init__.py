"""The Relax -> shapefn compiler: ``compile.py`` runs its passes in order
(docs/compiler.md lists them). The package imports none of its modules, so
importing one pass (as the registry and the kernel cache do) does not
import the whole compiler."""
