// An executable: functions of bytecode, constants, and the names of the
// kernels and shape functions it calls. Created from parts or loaded from a
// file; either way fully verified before anything runs it.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shapefn/device_slot.h"
#include "shapefn/shape_func.h"

namespace shapefn {

struct ParamSpec {
  std::string name;
  DLDataType dtype{};
  // Per dimension: >= 0 a fixed extent, -1 - k the function's symbol k.
  std::vector<int64_t> dims;
  // kAnySlot: not a tensor argument the entry checks (internal functions
  // take shapes, ints and tuples too).
  int device_slot = kExecutionSlot;
};

// What the instructions from `instruction` on (up to the next mark) were
// generated for: "ONNX node 'x' (Concat)", or "" for nothing the user named.
// A VM starts the message of an error those instructions raise with it.
struct SourceMark {
  int64_t instruction = 0;  // an index into the decoded instructions
  std::string source;
};

struct FunctionDef {
  std::string name;
  std::vector<ParamSpec> params;
  std::vector<std::string> symbols;  // names of symbolic dimensions
  int64_t num_registers = 0;
  std::vector<int64_t> code;        // bytecode words (the instruction set: csrc/internal/isa.def)
  std::vector<SourceMark> sources;  // by increasing instruction

  // The source of instruction `pc`: "" where none is recorded.
  const std::string& SourceOf(size_t pc) const;
};

struct ConstantDef {
  DLDataType dtype{};
  ShapeVec shape;
  int device_slot = kExecutionSlot;
  std::vector<uint8_t> bytes;
};

// A shape function the program calls, with the data-dependence mask it was
// compiled under (one flag per input, or one for every input of a variadic
// op): where the mask says true the program copies the input's value for it.
// A VM refuses an executable whose mask differs from the one this process
// registers for the op, unless the executable carries the function.
struct ShapeFuncUse {
  std::string op;  // a registry name
  std::vector<bool> mask;
};

// A shape function the executable carries: one registered from Python,
// compiled ahead of time to host code for each input signature the program
// calls it with. A VM made from the executable uses it (with the use's mask)
// in place of the registry's entry, so no registration is needed where the
// executable runs.
struct CarriedShapeFunc {
  struct Build {
    std::string signature;           // per input "dtype:ndim", comma-separated: "int64:1,float32:4"
    int32_t kernel = 0;              // index into kernels: the compiled host function
    std::vector<int64_t> out_ndims;  // the length of each output shape
  };
  int32_t shape_func = 0;  // index into shape_funcs
  int32_t num_outputs = 1;
  std::vector<Build> builds;
};

// Where a checked kernel reads an index from data (docs/index_checks.md):
// the node it was generated for and what it reads. A kernel that finds an
// index out of range writes the site's number into its call's check record,
// and the VM raises with both.
struct CheckSite {
  std::string source;  // "ONNX node 'g' (Gather)", or ""
  std::string what;    // "take: index along axis 1"
};

// The kernel library a saved executable was written with: a library of
// another size or digest beside it is refused before it is loaded.
struct LibraryDigest {
  uint64_t size = 0;
  uint64_t fnv1a = 0;  // FNV-1a 64 of the file's bytes
  bool operator==(const LibraryDigest& other) const { return size == other.size && fnv1a == other.fnv1a; }
};

// What an executable is made of, as the Python builder or a file gives it.
struct ExecutableParts {
  std::vector<FunctionDef> functions;
  std::vector<ConstantDef> constants;
  std::vector<std::string> kernels;  // kernel names, resolved when a VM is created
  std::vector<ShapeFuncUse> shape_funcs;
  std::vector<CarriedShapeFunc> carried_shape_funcs;
  std::string kernel_library;           // file beside the executable, "" if none
  LibraryDigest kernel_library_digest;  // set when the executable is saved with its library
  std::vector<CheckSite> check_sites;
  // The CPU features (LLVM's names) the library's host code may use: a VM
  // refuses to run the executable on a CPU that lacks one.
  std::vector<std::string> host_cpu_features;
  // What the library's kernels were compiled for: "cpu" (CPU code, which the
  // host and the sim device run), "cuda", "opencl", ...; "" when nobody said
  // (a program built by hand), which no device refuses.
  std::string device_code;
};

// A verified executable: constructing one checks every table and every
// instruction, so nothing unverified can reach a VM. Immutable but for the
// name of its kernel library (checked again when a saved file is loaded).
class Executable {
 public:
  static constexpr uint32_t kFormatVersion = 7;

  // Throws Error(kFormat) naming the first problem.
  explicit Executable(ExecutableParts parts);
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  Executable(Executable&&) = default;
  Executable& operator=(Executable&&) = default;

  const std::vector<FunctionDef>& functions() const { return parts_.functions; }
  const std::vector<ConstantDef>& constants() const { return parts_.constants; }
  const std::vector<std::string>& kernels() const { return parts_.kernels; }
  const std::vector<ShapeFuncUse>& shape_funcs() const { return parts_.shape_funcs; }
  const std::vector<CarriedShapeFunc>& carried_shape_funcs() const { return parts_.carried_shape_funcs; }
  // The carried shape function of shape_funcs()[index], or null.
  const CarriedShapeFunc* CarriedShapeFuncOf(size_t index) const;
  const std::string& kernel_library() const { return parts_.kernel_library; }
  const LibraryDigest& kernel_library_digest() const { return parts_.kernel_library_digest; }
  const std::vector<CheckSite>& check_sites() const { return parts_.check_sites; }
  const std::vector<std::string>& host_cpu_features() const { return parts_.host_cpu_features; }
  const std::string& device_code() const { return parts_.device_code; }
  void set_kernel_library(std::string name, LibraryDigest digest) {
    parts_.kernel_library = std::move(name);
    parts_.kernel_library_digest = digest;
  }

  int FunctionIndex(const std::string& name) const;  // throws Error(kKey)
  // One line per instruction; `operand_names` writes each operand as name=value.
  std::string Disassemble(bool operand_names = false) const;

  std::vector<uint8_t> Serialize() const;
  static std::shared_ptr<Executable> Deserialize(const uint8_t* data, size_t size);
  void Save(const std::string& path) const;
  static std::shared_ptr<Executable> Load(const std::string& path);

 private:
  ExecutableParts parts_;
};

// Whether `kind` is a device_code value an executable may hold.
bool IsDeviceCode(const std::string& kind);
// The device code a device runs: "cpu" for the host and sim (kernels see
// their memory as CPU memory), else the TVM kind of `kernel_device`.
std::string DeviceCodeOf(DLDevice kernel_device);
// Throws Error(kValue), naming both, when `exe`'s kernels were compiled for
// another kind of device than `device_code` (DeviceCodeOf the device, or of
// a device name: DeviceCodeOfName).
void RequireDeviceCode(const Executable& exe, const std::string& device_code, const std::string& device_name);
// The device code the device named `name` ("host", "sim", "opencl:1",
// "cuda", ...) runs, known without making the device.
std::string DeviceCodeOfName(const std::string& name);

}  // namespace shapefn
