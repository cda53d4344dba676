// shapefn._core: the pybind11 module. Each register_*.cc binds one family.
#include "common.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "shapefn's C++ core (private; use the shapefn package)";
  shapefn::python::RegisterErrors(m);
  shapefn::python::RegisterRegistry(m);
  shapefn::python::RegisterDevices(m);
  shapefn::python::RegisterExecutable(m);
  shapefn::python::RegisterVM(m);
}
