// Verification: after it the dispatch loop may trust every index, register
// number, jump target and table entry it reads. Operands are checked by
// their kind in isa.def; each instruction's own rules are the check named
// in its table entry.
#include "verifier.h"

#include <set>

#include "compiled_shape_func.h"
#include "shapefn/error.h"
#include "shapefn/tensor.h"

namespace shapefn {

namespace {

constexpr int64_t kMaxRegisters = 1 << 20;
// Bounds on what a carried shape function declares (outputs, and the rank
// of each output shape), far above any real op's.
constexpr int32_t kMaxShapeFuncOutputs = 1 << 10;
constexpr int32_t kMaxShapeFuncInputs = 1 << 16;
constexpr int64_t kMaxShapeRank = 1 << 10;

bool ValidDType(DLDataType t) {
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLInt:
    case kDLUInt:
    case kDLFloat:
      return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64 || (t.code == kDLUInt && t.bits == 1);
    case kDLBfloat: return t.bits == 16;
    case kDLBool: return t.bits == 8;
    default: return false;
  }
}

[[noreturn]] void Reject(const FunctionDef& f, size_t pc, const std::string& what) {
  Fail(ErrorKind::kFormat,
       "invalid executable: function '" + f.name + "' instruction " + std::to_string(pc) + ": " + what);
}

// What an instruction's check sees. `shape_funcs` is null at load and the
// VM's resolved entries when it links the executable.
struct InstructionCheck {
  const Executable& exe;
  const FunctionDef& function;
  size_t pc;
  const Instruction& ins;
  const std::vector<ShapeFuncEntryPtr>* shape_funcs;

  [[noreturn]] void Reject(const std::string& what) const { shapefn::Reject(function, pc, what); }
};
using CheckFn = void (*)(const InstructionCheck&);
constexpr CheckFn NoCheck = nullptr;

void CheckInvokeShapeFunc(const InstructionCheck& c) {
  if (c.shape_funcs == nullptr) return;
  ops::InvokeShapeFunc ins(c.ins);
  const ShapeFuncEntry& entry = *(*c.shape_funcs)[static_cast<size_t>(ins.shape_func())];
  if (entry.arity >= 0 && ins.inputs().size != entry.arity) {
    Fail(ErrorKind::kValue, "'" + c.function.name + "' calls the shape function of '" + entry.name + "' with " +
                                std::to_string(ins.inputs().size) + " inputs, it takes " + std::to_string(entry.arity));
  }
  if (entry.native != nullptr && ins.outputs().size != entry.num_outputs) {
    Fail(ErrorKind::kValue, "'" + c.function.name + "' expects " + std::to_string(ins.outputs().size) +
                                " shapes from the shape function of '" + entry.name + "', it gives " +
                                std::to_string(entry.num_outputs));
  }
}

void CheckReadback(const InstructionCheck& c) {
  ops::Readback ins(c.ins);
  if (ins.dsts().size != ins.srcs().size || ins.forms().size != ins.srcs().size) {
    c.Reject("readback needs as many destinations and forms as sources");
  }
  for (int64_t form : ins.forms()) {
    if (form != kReadValues && form != kReadTensor) {
      c.Reject("readback form " + std::to_string(form) + " is neither 0 (values) nor 1 (tensor) (operand 'forms')");
    }
  }
}

void CheckShapeBuild(const InstructionCheck& c) {
  ops::ShapeBuild ins(c.ins);
  for (int64_t p : ins.pattern()) {
    if (p < -ins.dims().size) c.Reject("shape_build template refers past its ints (operand 'pattern')");
  }
}

void CheckMatchShape(const InstructionCheck& c) {
  ops::MatchShape ins(c.ins);
  if (ins.rank() < 0) c.Reject("match_shape of a negative rank (operand 'rank')");
  if (ins.pattern().size != ins.axes().size)
    c.Reject("match_shape has a size for each axis (operands 'axes', 'pattern')");
  for (int64_t a : ins.axes()) {
    if (a < 0 || a >= ins.rank()) c.Reject("match_shape axis out of range for its rank (operand 'axes')");
  }
  for (int64_t p : ins.pattern()) {
    if (p < -ins.dims().size) c.Reject("match_shape pattern refers past its ints (operand 'pattern')");
  }
}

void CheckGetItem(const InstructionCheck& c) {
  if (ops::GetItem(c.ins).index() < 0) c.Reject("negative tuple index (operand 'index')");
}

// Needs every function's parameter count: the tables are read before code.
void CheckCall(const InstructionCheck& c) {
  ops::Call ins(c.ins);
  const FunctionDef& callee = c.exe.functions()[static_cast<size_t>(ins.function())];
  if (ins.args().size != static_cast<int64_t>(callee.params.size())) {
    c.Reject("call of '" + callee.name + "' passes " + std::to_string(ins.args().size) + " arguments, it takes " +
             std::to_string(callee.params.size()));
  }
}

constexpr CheckFn kChecks[] = {
#define SHAPEFN_OP(name, mnemonic, check, ...) check,
#include "isa.def"
#undef SHAPEFN_OP
};

// The checks every operand gets from its kind.
void CheckOperands(const InstructionCheck& c, int64_t num_instructions) {
  const OpInfo& info = GetOpInfo(c.ins.op);
  const Executable& exe = c.exe;
  for (int k = 0; k < info.num_operands; ++k) {
    const OperandSpec& spec = info.operands[k];
    // Built only for an error: verification runs over every operand of a program.
    auto operand = [&] { return std::string(" (operand '") + spec.name + "')"; };
    auto check_index = [&](int64_t v, size_t size, const char* table) {
      if (v < 0 || static_cast<size_t>(v) >= size) {
        c.Reject(std::string(info.mnemonic) + " refers to " + table + " #" + std::to_string(v) + " of " +
                 std::to_string(size) + operand());
      }
    };
    for (int64_t v : c.ins.operand(k)) {
      switch (spec.kind) {
        case OperandKind::kReg:
        case OperandKind::kRegList:
          if (v < 0 || v >= c.function.num_registers) {
            c.Reject(std::string(info.mnemonic) + " uses register %" + std::to_string(v) + " of " +
                     std::to_string(c.function.num_registers) + operand());
          }
          break;
        case OperandKind::kDevice: check_index(v, kNumDeviceSlots, "device slot"); break;
        case OperandKind::kDType:
          if (!ValidDType(DecodeDType(v))) c.Reject("invalid dtype code " + std::to_string(v) + operand());
          break;
        case OperandKind::kKernel: check_index(v, exe.kernels().size(), "kernel"); break;
        case OperandKind::kShapeFunc: check_index(v, exe.shape_funcs().size(), "shape function"); break;
        case OperandKind::kConst: check_index(v, exe.constants().size(), "constant"); break;
        case OperandKind::kFunc: check_index(v, exe.functions().size(), "function"); break;
        case OperandKind::kTarget: check_index(v, static_cast<size_t>(num_instructions), "instruction"); break;
        case OperandKind::kImm:
        case OperandKind::kImmList: break;  // immediates have no range of their own
      }
    }
  }
}

// Names reach Python as str, so they must be valid UTF-8.
bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

void CheckName(const std::string& name, const char* what) {
  if (name.empty() || !ValidUtf8(name)) {
    Fail(ErrorKind::kFormat, std::string("invalid executable: ") + what + " name is empty or not UTF-8");
  }
}

// Each carried shape function is one of the executable's shape functions,
// carried once, with a build per distinct signature that has the function's
// arity and outputs and names one of the executable's kernels.
void VerifyCarriedShapeFuncs(const Executable& exe) {
  std::set<int32_t> carried;
  for (const CarriedShapeFunc& c : exe.carried_shape_funcs()) {
    if (c.shape_func < 0 || static_cast<size_t>(c.shape_func) >= exe.shape_funcs().size()) {
      Fail(ErrorKind::kFormat,
           "invalid executable: a carried shape function has index " + std::to_string(c.shape_func) + ", out of range");
    }
    const std::string where =
        "invalid executable: carried shape function '" + exe.shape_funcs()[static_cast<size_t>(c.shape_func)].op + "'";
    const std::vector<bool>& mask = exe.shape_funcs()[static_cast<size_t>(c.shape_func)].mask;
    if (!carried.insert(c.shape_func).second) Fail(ErrorKind::kFormat, where + " is carried twice");
    if (c.num_outputs < 1 || c.num_outputs > kMaxShapeFuncOutputs) {
      Fail(ErrorKind::kFormat, where + " has " + std::to_string(c.num_outputs) + " outputs");
    }
    std::set<std::vector<uint64_t>> signatures;
    for (const CarriedShapeFunc::Build& b : c.builds) {
      const std::vector<uint64_t> key = ParseShapeFuncSignature(b.signature);
      if (key.size() != mask.size()) {
        Fail(ErrorKind::kFormat, where + " build (" + b.signature + ") has " + std::to_string(key.size()) +
                                     " inputs, its mask " + std::to_string(mask.size()));
      }
      if (!signatures.insert(key).second) Fail(ErrorKind::kFormat, where + " has two builds (" + b.signature + ")");
      if (b.kernel < 0 || static_cast<size_t>(b.kernel) >= exe.kernels().size()) {
        Fail(ErrorKind::kFormat,
             where + " build (" + b.signature + ") names kernel " + std::to_string(b.kernel) + ", out of range");
      }
      if (b.out_ndims.size() != static_cast<size_t>(c.num_outputs)) {
        Fail(ErrorKind::kFormat, where + " build (" + b.signature + ") gives " + std::to_string(b.out_ndims.size()) +
                                     " output ranks for " + std::to_string(c.num_outputs) + " outputs");
      }
      for (int64_t n : b.out_ndims) {
        if (n < 0 || n > kMaxShapeRank) {
          Fail(ErrorKind::kFormat, where + " build (" + b.signature + ") has output rank " + std::to_string(n));
        }
      }
    }
  }
}

}  // namespace

DLDataType DecodeDType(int64_t word) {
  DLDataType t;
  t.code = static_cast<uint8_t>(word & 0xff);
  t.bits = static_cast<uint8_t>((word >> 8) & 0xff);
  t.lanes = static_cast<uint16_t>((word >> 16) & 0xffff);
  return t;
}

void VerifyExecutable(const Executable& exe) {
  const auto& kernels = exe.kernels();
  const auto& shape_funcs = exe.shape_funcs();
  const auto& kernel_library = exe.kernel_library();
  const auto& constants = exe.constants();
  const auto& functions = exe.functions();

  std::set<std::string> names;
  for (const auto& k : kernels) CheckName(k, "kernel");
  for (const ShapeFuncUse& s : shape_funcs) {
    CheckName(s.op, "shape function");
    if (s.mask.empty() || s.mask.size() > static_cast<size_t>(kMaxShapeFuncInputs)) {
      Fail(ErrorKind::kFormat, "invalid executable: the mask of shape function '" + s.op + "' has " +
                                   std::to_string(s.mask.size()) + " flags");
    }
  }
  for (const auto& f : exe.host_cpu_features()) CheckName(f, "host CPU feature");
  if (!IsDeviceCode(exe.device_code())) {
    Fail(ErrorKind::kFormat, "invalid executable: unknown device code '" + exe.device_code() +
                                 "' (expected cpu, cuda, opencl, vulkan, metal, rocm or ext_dev)");
  }
  // The kernel library is a file beside the executable, never a path.
  if (!kernel_library.empty() && (!ValidUtf8(kernel_library) || kernel_library.find('/') != std::string::npos ||
                                  kernel_library == "." || kernel_library == "..")) {
    Fail(ErrorKind::kFormat, "invalid executable: kernel library must be a file name beside the executable");
  }
  VerifyCarriedShapeFuncs(exe);
  for (size_t i = 0; i < constants.size(); ++i) {
    const ConstantDef& c = constants[i];
    std::string where = "invalid executable: constant " + std::to_string(i);
    if (!ValidDType(c.dtype)) Fail(ErrorKind::kFormat, where + " has an invalid dtype");
    if (c.device_slot < 0 || c.device_slot >= kNumDeviceSlots)
      Fail(ErrorKind::kFormat, where + " has an invalid device");
    for (int64_t d : c.shape) {
      if (d < 0) Fail(ErrorKind::kFormat, where + " has a negative dimension");
    }
    size_t nbytes;
    try {
      nbytes = CheckedNBytes(c.shape, c.dtype);
    } catch (const Error&) {
      Fail(ErrorKind::kFormat, where + " is too large");
    }
    if (nbytes != c.bytes.size())
      Fail(ErrorKind::kFormat,
           where + " has " + std::to_string(c.bytes.size()) + " bytes, its shape needs " + std::to_string(nbytes));
  }
  for (const FunctionDef& f : functions) {
    CheckName(f.name, "function");
    for (const ParamSpec& p : f.params) CheckName(p.name, "parameter");
    for (const std::string& sym : f.symbols) CheckName(sym, "symbol");
    if (!names.insert(f.name).second)
      Fail(ErrorKind::kFormat, "invalid executable: duplicate function '" + f.name + "'");
    if (f.num_registers < static_cast<int64_t>(f.params.size()) || f.num_registers > kMaxRegisters) {
      Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' has " + std::to_string(f.num_registers) +
                                   " registers for " + std::to_string(f.params.size()) + " parameters");
    }
    for (const ParamSpec& p : f.params) {
      std::string where = "invalid executable: function '" + f.name + "' parameter '" + p.name + "'";
      // Any-slot parameters too: their arguments go unchecked, but the
      // disassembler prints their dtype and dims.
      if (!ValidDType(p.dtype)) Fail(ErrorKind::kFormat, where + " has an invalid dtype");
      for (int64_t d : p.dims) {
        if (d < 0 && -1 - d >= static_cast<int64_t>(f.symbols.size())) {
          Fail(ErrorKind::kFormat, where + " names an unknown symbol");
        }
      }
      if (p.device_slot != kAnySlot && (p.device_slot < 0 || p.device_slot >= kNumDeviceSlots)) {
        Fail(ErrorKind::kFormat, where + " has an invalid device");
      }
    }
    const std::vector<Instruction> code = Decode(f.code);
    const int64_t num_instructions = static_cast<int64_t>(code.size());
    if (num_instructions == 0) Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' is empty");
    Opcode last = code.back().op;
    if (last != Opcode::kRet && last != Opcode::kGoto) {
      Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' can run past its end");
    }
    for (size_t pc = 0; pc < code.size(); ++pc) {
      const InstructionCheck c{exe, f, pc, code[pc], nullptr};
      CheckOperands(c, num_instructions);
      if (CheckFn check = kChecks[static_cast<int>(code[pc].op)]) check(c);
    }
    int64_t previous = -1;
    for (const SourceMark& mark : f.sources) {
      if (mark.instruction <= previous || mark.instruction >= num_instructions) {
        Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' has a source mark at instruction " +
                                     std::to_string(mark.instruction) + " (after " + std::to_string(previous) +
                                     ", of " + std::to_string(num_instructions) + ")");
      }
      previous = mark.instruction;
    }
  }
}

std::vector<std::vector<Instruction>> Link(const Executable& exe, const std::vector<ShapeFuncEntryPtr>& shape_funcs) {
  std::vector<std::vector<Instruction>> code;
  for (const FunctionDef& f : exe.functions()) {
    code.push_back(Decode(f.code));
    for (size_t pc = 0; pc < code.back().size(); ++pc) {
      const Instruction& ins = code.back()[pc];
      if (CheckFn check = kChecks[static_cast<int>(ins.op)]) check(InstructionCheck{exe, f, pc, ins, &shape_funcs});
    }
  }
  return code;
}

}  // namespace shapefn
