"""shapefn's ONNX converters, one module per operator family. Importing the
package imports every module in it, and each module registers its
converters (``registry.converter``) as it is imported: a new family needs
no list to be added to."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
