// Bindings of Executable: built from the Python builder's parts, saved, loaded.
#include <pybind11/stl.h>

#include <map>

#include "common.h"
#include "cpu_features.h"
#include "digest.h"
#include "isa.h"
#include "shapefn/executable.h"
#include "shapefn/kernel_library.h"
#include "shapefn/registry.h"
#include "shapefn/tensor.h"

namespace shapefn::python {

namespace {

DLDataType DTypeArg(const py::handle& h) { return DTypeFromString(h.cast<std::string>()); }

// A carried shape function as Python sees it: {"shape_func": index,
// "mask": [bool], "num_outputs": n, "builds": [{"signature": str,
// "kernel": index, "out_ndims": [int]}]} (the mask is its use's).
CarriedShapeFunc CarriedFromPython(const py::handle& h) {
  py::dict d = h.cast<py::dict>();
  CarriedShapeFunc c;
  c.shape_func = d["shape_func"].cast<int32_t>();
  c.num_outputs = d["num_outputs"].cast<int32_t>();
  for (py::handle b : d["builds"].cast<py::list>()) {
    py::dict bd = b.cast<py::dict>();
    c.builds.push_back(CarriedShapeFunc::Build{bd["signature"].cast<std::string>(), bd["kernel"].cast<int32_t>(),
                                               bd["out_ndims"].cast<std::vector<int64_t>>()});
  }
  return c;
}

py::dict CarriedToPython(const Executable& e, const CarriedShapeFunc& c) {
  py::list builds;
  for (const CarriedShapeFunc::Build& b : c.builds) {
    py::dict bd;
    bd["signature"] = b.signature;
    bd["kernel"] = b.kernel;
    bd["out_ndims"] = b.out_ndims;
    builds.append(bd);
  }
  py::dict d;
  d["shape_func"] = c.shape_func;
  d["mask"] = e.shape_funcs()[static_cast<size_t>(c.shape_func)].mask;
  d["num_outputs"] = c.num_outputs;
  d["builds"] = builds;
  return d;
}

// Each of `shape_funcs` is an op's name, or an (op, mask) pair. The mask of
// a name is its carried function's, else the one this process registers
// (what the program was compiled under).
std::shared_ptr<Executable> FromParts(const py::list& functions, const py::list& constants,
                                      const std::vector<std::string>& kernels, const py::list& shape_funcs,
                                      const std::string& kernel_library, const py::list& carried_shape_funcs,
                                      const std::vector<std::string>& host_cpu_features, const std::string& device_code,
                                      const py::list& check_sites) {
  ExecutableParts parts;
  for (py::handle site : check_sites) {
    auto [source, what] = site.cast<std::pair<std::string, std::string>>();
    parts.check_sites.push_back(CheckSite{std::move(source), std::move(what)});
  }
  parts.kernels = kernels;
  std::map<int32_t, std::vector<bool>> carried_masks;
  for (py::handle c : carried_shape_funcs) {
    parts.carried_shape_funcs.push_back(CarriedFromPython(c));
    carried_masks[parts.carried_shape_funcs.back().shape_func] =
        py::cast<py::dict>(c)["mask"].cast<std::vector<bool>>();
  }
  for (size_t i = 0; i < shape_funcs.size(); ++i) {
    if (!py::isinstance<py::str>(shape_funcs[i])) {
      py::tuple pair = shape_funcs[i].cast<py::tuple>();
      parts.shape_funcs.push_back(ShapeFuncUse{pair[0].cast<std::string>(), pair[1].cast<std::vector<bool>>()});
      continue;
    }
    const std::string op = shape_funcs[i].cast<std::string>();
    auto carried = carried_masks.find(static_cast<int32_t>(i));
    parts.shape_funcs.push_back(ShapeFuncUse{
        op, carried != carried_masks.end() ? carried->second : ShapeFuncRegistry::Global().Lookup(op)->mask});
  }
  parts.kernel_library = kernel_library;
  parts.host_cpu_features = host_cpu_features;
  parts.device_code = device_code;
  for (py::handle c : constants) {
    py::dict d = c.cast<py::dict>();
    ConstantDef def;
    def.dtype = DTypeArg(d["dtype"]);
    def.shape = d["shape"].cast<ShapeVec>();
    def.device_slot = d["device"].cast<int>();
    std::string bytes = d["data"].cast<std::string>();
    def.bytes.assign(bytes.begin(), bytes.end());
    parts.constants.push_back(std::move(def));
  }
  for (py::handle f : functions) {
    py::dict d = f.cast<py::dict>();
    FunctionDef def;
    def.name = d["name"].cast<std::string>();
    def.symbols = d["symbols"].cast<std::vector<std::string>>();
    def.num_registers = d["num_registers"].cast<int64_t>();
    def.code = d["code"].cast<std::vector<int64_t>>();
    if (d.contains("sources")) {
      for (py::handle mark : d["sources"].cast<py::list>()) {
        auto [instruction, source] = mark.cast<std::pair<int64_t, std::string>>();
        def.sources.push_back(SourceMark{instruction, std::move(source)});
      }
    }
    for (py::handle p : d["params"].cast<py::list>()) {
      py::dict pd = p.cast<py::dict>();
      ParamSpec spec;
      spec.name = pd["name"].cast<std::string>();
      spec.dtype = DTypeArg(pd["dtype"]);
      spec.dims = pd["dims"].cast<std::vector<int64_t>>();
      spec.device_slot = pd["device"].cast<int>();
      def.params.push_back(std::move(spec));
    }
    parts.functions.push_back(std::move(def));
  }
  return std::make_shared<Executable>(std::move(parts));
}

}  // namespace

void RegisterExecutable(py::module_& m) {
  m.def("isa", [] {
    py::list out;
    for (int i = 0; i < kNumOpcodes; ++i) {
      const OpInfo& info = GetOpInfo(static_cast<Opcode>(i));
      out.append(py::make_tuple(info.mnemonic, info.layout));
    }
    return out;
  });
  // Per instruction: (mnemonic, [(operand name, kind letter, "read" | "write")]).
  m.def("isa_operands", [] {
    py::list out;
    for (int i = 0; i < kNumOpcodes; ++i) {
      const OpInfo& info = GetOpInfo(static_cast<Opcode>(i));
      py::list operands;
      for (int k = 0; k < info.num_operands; ++k) {
        const OperandSpec& spec = info.operands[k];
        operands.append(py::make_tuple(spec.name, std::string(1, static_cast<char>(spec.kind)), RoleName(spec.role)));
      }
      out.append(py::make_tuple(info.mnemonic, operands));
    }
    return out;
  });
  m.def(
      "load_kernel_library",
      [](const std::string& executable_path, const Executable& exe, const py::object& receive) {
        KernelLibrary library = LoadKernelLibrary(executable_path, exe);
        tvm::ffi::Map<tvm::ffi::String, tvm::ffi::Function> kernels;
        for (const auto& [name, fn] : library.kernels) kernels.Set(name, fn);
        // tvm-ffi hands the module and functions to Python as its own objects.
        FunctionFromPython(receive)(library.path, library.module, kernels);
      },
      py::arg("executable_path"), py::arg("executable"), py::arg("receive"),
      "Loads an executable's kernel library (shapefn::LoadKernelLibrary) and calls the tvm_ffi.Function "
      "`receive(path, module, kernels)` with it.");
  m.def("checkable_cpu_features", &CheckableCpuFeatures,
        "The CPU features (LLVM's names) a VM checks before it runs host kernels that use them.");
  m.def("encode_dtype", [](const std::string& dtype) { return EncodeDType(DTypeFromString(dtype)); });

  py::class_<Executable, std::shared_ptr<Executable>>(m, "Executable")
      .def_static("from_parts", &FromParts, py::arg("functions"), py::arg("constants"), py::arg("kernels"),
                  py::arg("shape_funcs"), py::arg("kernel_library"), py::arg("carried_shape_funcs") = py::list(),
                  py::arg("host_cpu_features") = std::vector<std::string>{}, py::arg("device_code") = "",
                  py::arg("check_sites") = py::list())
      .def_static("load", &Executable::Load)
      .def_static("deserialize",
                  [](const py::bytes& b) {
                    std::string s = b;
                    return Executable::Deserialize(reinterpret_cast<const uint8_t*>(s.data()), s.size());
                  })
      .def("save", &Executable::Save)
      .def("serialize",
           [](const Executable& e) {
             std::vector<uint8_t> v = e.Serialize();
             return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
           })
      .def("disassemble", &Executable::Disassemble, py::arg("operand_names") = false)
      .def("function_index", &Executable::FunctionIndex)
      .def_property_readonly("function_names",
                             [](const Executable& e) {
                               std::vector<std::string> names;
                               for (const auto& f : e.functions()) names.push_back(f.name);
                               return names;
                             })
      .def_property_readonly("kernels", [](const Executable& e) { return e.kernels(); })
      // {function name: [(first instruction, source)]}: what the code was generated for.
      .def_property_readonly("sources",
                             [](const Executable& e) {
                               py::dict out;
                               for (const FunctionDef& f : e.functions()) {
                                 py::list marks;
                                 for (const SourceMark& m : f.sources)
                                   marks.append(py::make_tuple(m.instruction, m.source));
                                 out[py::str(f.name)] = marks;
                               }
                               return out;
                             })
      .def_property_readonly("host_cpu_features", [](const Executable& e) { return e.host_cpu_features(); })
      .def_property_readonly("device_code", [](const Executable& e) { return e.device_code(); })
      .def_property_readonly("shape_funcs",
                             [](const Executable& e) {
                               std::vector<std::string> ops;
                               for (const ShapeFuncUse& s : e.shape_funcs()) ops.push_back(s.op);
                               return ops;
                             })
      .def_property_readonly("shape_func_masks",
                             [](const Executable& e) {
                               py::dict out;
                               for (const ShapeFuncUse& s : e.shape_funcs()) out[py::str(s.op)] = s.mask;
                               return out;
                             })
      .def_property_readonly("carried_shape_funcs",
                             [](const Executable& e) {
                               py::list out;
                               for (const CarriedShapeFunc& c : e.carried_shape_funcs())
                                 out.append(CarriedToPython(e, c));
                               return out;
                             })
      .def_property_readonly("kernel_library", [](const Executable& e) { return e.kernel_library(); })
      // (size, FNV-1a 64) of the library it was saved with; (0, 0) for none.
      .def_property_readonly("kernel_library_digest",
                             [](const Executable& e) {
                               return py::make_tuple(e.kernel_library_digest().size, e.kernel_library_digest().fnv1a);
                             })
      .def(
          "set_kernel_library",
          [](Executable& e, const std::string& name, const std::string& path) {
            e.set_kernel_library(name, path.empty() ? LibraryDigest{} : FileDigest(path));
          },
          py::arg("name"), py::arg("path"),
          "Names the kernel library file the executable is saved with, and records the digest of `path`, "
          "that file (none for an empty path).")
      // [(source, what)]: where its checked kernels read indices from data.
      .def_property_readonly("check_sites", [](const Executable& e) {
        py::list out;
        for (const CheckSite& site : e.check_sites()) out.append(py::make_tuple(site.source, site.what));
        return out;
      });
}

}  // namespace shapefn::python
