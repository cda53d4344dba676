// Bindings of the shape-function registry.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "common.h"
#include "shapefn/error.h"
#include "shapefn/registry.h"
#include "shapefn/tensor.h"

namespace shapefn::python {

namespace {

py::dict EntryInfo(const ShapeFuncEntry& e) {
  py::dict d;
  d["name"] = e.name;
  d["mask"] = e.mask;
  d["arity"] = e.arity;
  d["num_outputs"] = e.num_outputs;
  d["level"] = e.level;
  d["count_sized"] = e.count_sized;
  d["kind"] = e.native != nullptr ? "native" : (e.compiler.defined() ? "python" : "mask-only");
  return d;
}

DLDataType DTypeOfArray(const py::array& a) {
  py::dtype dt = a.dtype();
  char kind = dt.kind();
  uint8_t bits = static_cast<uint8_t>(dt.itemsize() * 8);
  switch (kind) {
    case 'i': return DLDataType{kDLInt, bits, 1};
    case 'u': return DLDataType{kDLUInt, bits, 1};
    case 'f': return DLDataType{kDLFloat, bits, 1};
    case 'b': return DLDataType{kDLBool, 8, 1};
    default: Fail(ErrorKind::kType, "unsupported numpy dtype " + py::str(dt).cast<std::string>());
  }
}

// Runs a native built-in on numpy arrays (values) or tuples (shapes only).
py::list EvalShapeFunc(const std::string& op, const py::list& inputs, const std::vector<int64_t>& attrs) {
  ShapeFuncEntryPtr entry = ShapeFuncRegistry::Global().Lookup(op);
  if (entry->native == nullptr) Fail(ErrorKind::kValue, "'" + op + "' has no native shape function");
  const size_t n = inputs.size();
  if (entry->arity >= 0 && static_cast<int>(n) != entry->arity) {
    Fail(ErrorKind::kValue, "'" + op + "' takes " + std::to_string(entry->arity) + " inputs, got " + std::to_string(n));
  }
  std::vector<py::array> arrays(n);
  std::vector<ShapeVec> shapes(n);
  std::vector<DLTensor> values(n);
  std::vector<ShapeFuncInput> in(n);
  for (size_t i = 0; i < n; ++i) {
    py::handle item = inputs[i];
    if (py::isinstance<py::tuple>(item)) {
      if (entry->NeedsValue(static_cast<int>(i))) {
        Fail(ErrorKind::kValue, "'" + op + "' input " + std::to_string(i) + " needs a value, got only a shape");
      }
      shapes[i] = item.cast<ShapeVec>();
      in[i] =
          ShapeFuncInput{shapes[i].data(), static_cast<int>(shapes[i].size()), DLDataType{kDLFloat, 32, 1}, nullptr};
      continue;
    }
    arrays[i] = py::array::ensure(item, py::array::c_style);
    if (!arrays[i]) Fail(ErrorKind::kType, "input " + std::to_string(i) + " must be a numpy array or a shape tuple");
    const py::array& a = arrays[i];
    shapes[i].assign(a.shape(), a.shape() + a.ndim());
    DLDataType dtype = DTypeOfArray(a);
    values[i] = DLTensor{const_cast<void*>(a.data()),
                         DLDevice{kDLCPU, 0},
                         static_cast<int32_t>(a.ndim()),
                         dtype,
                         shapes[i].data(),
                         nullptr,
                         0};
    in[i] = ShapeFuncInput{shapes[i].data(), static_cast<int>(shapes[i].size()), dtype,
                           entry->NeedsValue(static_cast<int>(i)) ? &values[i] : nullptr};
  }
  std::vector<ShapeVec> out(static_cast<size_t>(entry->num_outputs));
  ShapeFuncAttrs a{attrs.data(), static_cast<int>(attrs.size())};
  entry->native(in.data(), static_cast<int>(n), a, out.data());
  py::list result;
  for (const ShapeVec& s : out) result.append(py::tuple(py::cast(s)));
  return result;
}

std::vector<bool> CheckMask(const py::object& mask) {
  std::vector<bool> out;
  if (py::isinstance<py::bool_>(mask)) return {mask.cast<bool>()};
  if (!py::isinstance<py::sequence>(mask) || py::isinstance<py::str>(mask)) {
    Fail(ErrorKind::kType,
         "data_dependent must be a bool or a list of bools, got " + py::str(py::type::of(mask)).cast<std::string>());
  }
  size_t i = 0;
  for (py::handle item : mask) {
    if (!py::isinstance<py::bool_>(item)) {
      Fail(ErrorKind::kType, "data_dependent[" + std::to_string(i) + "] must be a bool, got " +
                                 py::str(py::type::of(item)).cast<std::string>());
    }
    out.push_back(item.cast<bool>());
    ++i;
  }
  if (out.empty()) Fail(ErrorKind::kValue, "data_dependent must not be empty");
  return out;
}

}  // namespace

void RegisterRegistry(py::module_& m) {
  m.def(
      "register",
      [](const std::string& name, const py::object& mask, int level, bool override_equal, int arity,
         const py::object& compiler) {
        ShapeFuncEntry entry;
        entry.name = name;
        entry.mask = CheckMask(mask);
        entry.level = level;
        entry.arity = arity;
        if (!compiler.is_none()) entry.compiler = FunctionFromPython(compiler);
        return ShapeFuncRegistry::Global().Register(std::move(entry), override_equal);
      },
      py::arg("name"), py::arg("mask"), py::arg("level"), py::arg("override"), py::arg("arity") = -1,
      py::arg("compiler") = py::none(),
      "Registers a mask (and optionally a compiler of a Python shape function) for an op.");
  m.def(
      "resolve_mask",
      [](const std::string& name, const py::object& mask, int arity) {
        return ShapeFuncRegistry::Global().ResolveMask(name, CheckMask(mask), arity);
      },
      py::arg("name"), py::arg("mask"), py::arg("arity") = -1,
      "The per-input mask `mask` (a bool or a list of bools) stands for, for `name` with `arity` inputs.");
  m.def("entry_info", [](const std::string& name) { return EntryInfo(*ShapeFuncRegistry::Global().Lookup(name)); });
  m.def("registered_ops", [] { return ShapeFuncRegistry::Global().Names(); });
  m.def("eval_shape_func", &EvalShapeFunc, py::arg("op"), py::arg("inputs"), py::arg("attrs") = std::vector<int64_t>{},
        "Runs a native shape function on numpy values / shape tuples (for tests and tools).");
}

}  // namespace shapefn::python
