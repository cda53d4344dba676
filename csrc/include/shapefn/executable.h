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
#include "shapefn/isa.h"
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

struct FunctionDef {
  std::string name;
  std::vector<ParamSpec> params;
  std::vector<std::string> symbols;  // names of symbolic dimensions
  int64_t num_registers = 0;
  std::vector<int64_t> code;
  std::vector<Instruction> decoded;  // filled by verification
};

struct ConstantDef {
  DLDataType dtype{};
  ShapeVec shape;
  int device_slot = kExecutionSlot;
  std::vector<uint8_t> bytes;
};

class Executable {
 public:
  static constexpr uint32_t kFormatVersion = 2;

  std::vector<FunctionDef> functions;
  std::vector<ConstantDef> constants;
  std::vector<std::string> kernels;      // kernel names, resolved when a VM is created
  std::vector<std::string> shape_funcs;  // registry op names
  std::string kernel_library;            // file beside the executable, "" if none

  // Checks every table and every instruction; decodes the code. Throws
  // Error(kFormat) naming the first problem. Must run before execution.
  void Verify();
  int FunctionIndex(const std::string& name) const;  // throws Error(kKey)
  std::string Disassemble() const;

  std::vector<uint8_t> Serialize() const;
  static std::shared_ptr<Executable> Deserialize(const uint8_t* data, size_t size);
  void Save(const std::string& path) const;
  static std::shared_ptr<Executable> Load(const std::string& path);
};

}  // namespace shapefn
