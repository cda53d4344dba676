// Helpers of the interpreter's per-family tests (test_interpreter_*.cc), as
// tests/bytecode.py is of the Python ones: code written with the private
// instruction set (internal/isa.h) through methods generated from its table,
// executables verified and sent through a save/load round trip before they
// run, VMs on the host or on a sim device of their own, host tensors in and
// results shown as text.
#pragma once

#include <gtest/gtest.h>
#include <tvm/ffi/function.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "isa.h"
#include "shapefn/executable.h"
#include "shapefn/registry.h"
#include "shapefn/tensor.h"
#include "shapefn/value.h"
#include "shapefn/vm.h"
#include "tests/expect_error.h"

namespace shapefn::bytecode {

inline constexpr DLDataType kF32{kDLFloat, 32, 1};
inline constexpr DLDataType kI64{kDLInt, 64, 1};
inline constexpr DLDataType kI32{kDLInt, 32, 1};
// Parameter dimensions naming the symbols of every test function, n and m.
inline constexpr int64_t kN = -1;
inline constexpr int64_t kM = -2;

// A list operand: written as its length, then its words.
struct List {
  List(std::initializer_list<int64_t> items) : items(items) {}
  std::vector<int64_t> items;
};

// One operand: a word (register, immediate, index, dtype word), or a list.
struct Operand {
  Operand(int64_t word) : words{word} {}  // NOLINT(runtime/explicit): operands read as plain numbers
  Operand(List list) : words{static_cast<int64_t>(list.items.size())} {  // NOLINT(runtime/explicit)
    words.insert(words.end(), list.items.begin(), list.items.end());
  }
  std::vector<int64_t> words;
};

// The code of one function, an instruction at a time: one method per entry
// of isa.def (`code.LoadInt({1, 7}).Ret({1})`), operands in table order.
// Jump targets are instruction indices, counted by hand where they are used.
class Code {
 public:
#define SHAPEFN_OP(name, mnemonic, check, ...) \
  Code& name(std::initializer_list<Operand> operands) { return Emit(Opcode::k##name, operands); }
#include "isa.def"
#undef SHAPEFN_OP

  const std::vector<int64_t>& words() const { return words_; }

 private:
  Code& Emit(Opcode op, std::initializer_list<Operand> operands) {
    words_.push_back(static_cast<int64_t>(op));
    for (const Operand& o : operands) words_.insert(words_.end(), o.words.begin(), o.words.end());
    return *this;
  }
  std::vector<int64_t> words_;
};

inline ParamSpec Param(std::string name, DLDataType dtype, std::vector<int64_t> dims, int slot = kExecutionSlot) {
  ParamSpec p;
  p.name = std::move(name);
  p.dtype = dtype;
  p.dims = std::move(dims);
  p.device_slot = slot;
  return p;
}

// An int (or shape, or tuple) parameter of an internal function.
inline ParamSpec AnyParam(std::string name) { return Param(std::move(name), kI64, {}, kAnySlot); }

inline FunctionDef Function(std::string name, std::vector<ParamSpec> params, int64_t num_registers, const Code& code) {
  FunctionDef f;
  f.name = std::move(name);
  f.params = std::move(params);
  f.symbols = {"n", "m"};
  f.num_registers = num_registers;
  f.code = code.words();
  return f;
}

// An executable of one function, main(params) (by default x: float32[n]).
inline ExecutableParts Main(const Code& code, int64_t num_registers,
                            std::vector<ParamSpec> params = {Param("x", kF32, {kN})}) {
  ExecutableParts parts;
  parts.functions.push_back(Function("main", std::move(params), num_registers, code));
  return parts;
}

// Verifying `parts` fails with Error(kFormat) naming `fragment`.
#define EXPECT_REJECTED(parts, fragment) \
  EXPECT_SHAPEFN_ERROR(::shapefn::Executable rejected_executable_(parts), ::shapefn::ErrorKind::kFormat, fragment)

// A use of `op`'s shape function under the mask this process registers.
inline ShapeFuncUse Registered(const std::string& op) {
  return ShapeFuncUse{op, ShapeFuncRegistry::Global().Lookup(op)->mask};
}

// `parts` verified, saved and loaded back, so tests run what a file gives;
// the disassembly survives the round trip.
inline std::shared_ptr<const Executable> Load(ExecutableParts parts) {
  Executable built(std::move(parts));
  std::vector<uint8_t> bytes = built.Serialize();
  std::shared_ptr<const Executable> loaded = Executable::Deserialize(bytes.data(), bytes.size());
  EXPECT_EQ(loaded->Disassemble(true), built.Disassemble(true));
  return loaded;
}

using Kernels = std::map<std::string, tvm::ffi::Function>;

inline std::shared_ptr<Device> Sim() { return MakeSimDevice(SimConfig{}); }

inline std::unique_ptr<VirtualMachine> MakeVM(ExecutableParts parts, std::shared_ptr<Device> device = HostDevice(),
                                              VMOptions options = {}, const Kernels& kernels = {}) {
  return std::make_unique<VirtualMachine>(Load(std::move(parts)), std::move(device), options, kernels);
}

struct Outcome {
  Value result;
  Counters counters;  // of the call
};

// main(args) on a VM of its own.
inline Outcome RunMain(ExecutableParts parts, std::vector<Value> args, std::shared_ptr<Device> device = HostDevice(),
                       VMOptions options = {}, const Kernels& kernels = {}) {
  std::unique_ptr<VirtualMachine> vm = MakeVM(std::move(parts), std::move(device), options, kernels);
  Value result = vm->Invoke("main", std::move(args));
  return Outcome{std::move(result), vm->counters()};
}

inline const std::shared_ptr<MemoryPool>& HostPool() {
  static const std::shared_ptr<MemoryPool> pool = std::make_shared<MemoryPool>(HostDevice());
  return pool;
}

// A host tensor holding `values` (which must fill it).
template <typename T>
Value Tensor(DLDataType dtype, ShapeVec shape, const std::vector<T>& values) {
  TensorRef t = AllocTensor(HostPool(), shape, dtype);
  EXPECT_EQ(t->nbytes(), values.size() * sizeof(T)) << "the values do not fill the tensor";
  const size_t n = std::min(t->nbytes(), values.size() * sizeof(T));
  if (n > 0) std::memcpy(t->data(), values.data(), n);  // (an empty vector's data() may be null)
  return Value::Tensor(std::move(t));
}

// A float32 tensor of `shape` holding 0, 1, 2, ...
inline Value Iota(ShapeVec shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return Tensor(kF32, std::move(shape), values);
}

// A tensor's elements, copied to the host from wherever it lives.
template <typename T>
std::vector<T> Contents(const Value& v) {
  EXPECT_EQ(v.kind, Value::Kind::kTensor);
  if (v.kind != Value::Kind::kTensor) return {};
  std::vector<T> out(v.tensor->nbytes() / sizeof(T));
  CopyTensorToHost(*v.tensor, out.data());
  return out;
}

inline const Value& Field(const Value& tuple, size_t i) {
  static const Value kNone;
  EXPECT_EQ(tuple.kind, Value::Kind::kTuple);
  if (tuple.kind != Value::Kind::kTuple || i >= tuple.tuple->size()) {
    ADD_FAILURE() << "no field " << i;
    return kNone;
  }
  return (*tuple.tuple)[i];
}

// A value as text: 7, [2, 0, 5], (7, [2]), float32[2, 3]@sim, empty.
inline std::string Show(const Value& v) {
  auto list = [](const ShapeVec& dims) {
    std::string s;
    for (int64_t d : dims) s += (s.empty() ? "" : ", ") + std::to_string(d);
    return s;
  };
  switch (v.kind) {
    case Value::Kind::kEmpty: return "empty";
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kShape: return "[" + list(v.shape) + "]";
    case Value::Kind::kTensor:
      return DTypeToString(v.tensor->dtype) + "[" + list(v.tensor->shape) + "]@" + v.tensor->device()->name();
    case Value::Kind::kTuple: {
      std::string s;
      for (const Value& field : *v.tuple) s += (s.empty() ? "" : ", ") + Show(field);
      return "(" + s + ")";
    }
  }
  return "?";
}

}  // namespace shapefn::bytecode
