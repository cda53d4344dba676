// Load-time verification: after Verify() the dispatch loop may trust every
// index, register number, jump target and table entry it reads.
#include <set>

#include "shapefn/error.h"
#include "shapefn/executable.h"
#include "shapefn/tensor.h"

namespace shapefn {

namespace {

constexpr int64_t kMaxRegisters = 1 << 20;

bool ValidDType(DLDataType t) {
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLInt:
    case kDLUInt:
    case kDLFloat:
      return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64 ||
             (t.code == kDLUInt && t.bits == 1);
    case kDLBfloat:
      return t.bits == 16;
    case kDLBool:
      return t.bits == 8;
    default:
      return false;
  }
}

[[noreturn]] void Reject(const FunctionDef& f, size_t pc, const std::string& what) {
  Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' instruction " +
                               std::to_string(pc) + ": " + what);
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

}  // namespace

DLDataType DecodeDType(int64_t word) {
  DLDataType t;
  t.code = static_cast<uint8_t>(word & 0xff);
  t.bits = static_cast<uint8_t>((word >> 8) & 0xff);
  t.lanes = static_cast<uint16_t>((word >> 16) & 0xffff);
  return t;
}

void Executable::Verify() {
  std::set<std::string> names;
  for (const auto& k : kernels) CheckName(k, "kernel");
  for (const auto& s : shape_funcs) CheckName(s, "shape function");
  // The kernel library is a file beside the executable, never a path.
  if (!kernel_library.empty() &&
      (!ValidUtf8(kernel_library) || kernel_library.find('/') != std::string::npos ||
       kernel_library == "." || kernel_library == "..")) {
    Fail(ErrorKind::kFormat, "invalid executable: kernel library must be a file name beside the executable");
  }
  for (size_t i = 0; i < constants.size(); ++i) {
    const ConstantDef& c = constants[i];
    std::string where = "invalid executable: constant " + std::to_string(i);
    if (!ValidDType(c.dtype)) Fail(ErrorKind::kFormat, where + " has an invalid dtype");
    if (c.device_slot < 0 || c.device_slot >= kNumDeviceSlots) Fail(ErrorKind::kFormat, where + " has an invalid device");
    for (int64_t d : c.shape) {
      if (d < 0) Fail(ErrorKind::kFormat, where + " has a negative dimension");
    }
    size_t nbytes;
    try {
      nbytes = CheckedNBytes(c.shape, c.dtype);
    } catch (const Error&) {
      Fail(ErrorKind::kFormat, where + " is too large");
    }
    if (nbytes != c.bytes.size()) Fail(ErrorKind::kFormat, where + " has " + std::to_string(c.bytes.size()) + " bytes, its shape needs " + std::to_string(nbytes));
  }
  for (FunctionDef& f : functions) {
    CheckName(f.name, "function");
    for (const ParamSpec& p : f.params) CheckName(p.name, "parameter");
    for (const std::string& sym : f.symbols) CheckName(sym, "symbol");
    if (!names.insert(f.name).second) Fail(ErrorKind::kFormat, "invalid executable: duplicate function '" + f.name + "'");
    if (f.num_registers < static_cast<int64_t>(f.params.size()) || f.num_registers > kMaxRegisters) {
      Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' has " +
                                   std::to_string(f.num_registers) + " registers for " +
                                   std::to_string(f.params.size()) + " parameters");
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
    f.decoded = Decode(f.code);
    const int64_t num_instructions = static_cast<int64_t>(f.decoded.size());
    if (num_instructions == 0) Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' is empty");
    Opcode last = f.decoded.back().op;
    if (last != Opcode::kRet && last != Opcode::kGoto) {
      Fail(ErrorKind::kFormat, "invalid executable: function '" + f.name + "' can run past its end");
    }
    for (size_t pc = 0; pc < f.decoded.size(); ++pc) {
      const Instruction& ins = f.decoded[pc];
      const OpInfo& info = GetOpInfo(ins.op);
      int fixed = 0, list = 0;
      auto check_reg = [&](int64_t r) {
        if (r < 0 || r >= f.num_registers) Reject(f, pc, std::string(info.mnemonic) + " uses register %" + std::to_string(r) + " of " + std::to_string(f.num_registers));
      };
      auto check_index = [&](int64_t v, size_t size, const char* table) {
        if (v < 0 || static_cast<size_t>(v) >= size) Reject(f, pc, std::string(info.mnemonic) + " refers to " + table + " #" + std::to_string(v) + " of " + std::to_string(size));
      };
      for (const char* k = info.operands; *k; ++k) {
        if (*k == 'R' || *k == 'I') {
          if (*k == 'R') {
            for (int64_t i = 0; i < ins.list_size(list); ++i) check_reg(ins.list(list)[i]);
          }
          ++list;
          continue;
        }
        int64_t v = ins.op_at(fixed++);
        switch (*k) {
          case 'r': check_reg(v); break;
          case 'd': check_index(v, kNumDeviceSlots, "device slot"); break;
          case 't': if (!ValidDType(DecodeDType(v))) Reject(f, pc, "invalid dtype code " + std::to_string(v)); break;
          case 'k': check_index(v, kernels.size(), "kernel"); break;
          case 's': check_index(v, shape_funcs.size(), "shape function"); break;
          case 'c': check_index(v, constants.size(), "constant"); break;
          case 'f': check_index(v, functions.size(), "function"); break;
          case 'j': check_index(v, static_cast<size_t>(num_instructions), "instruction"); break;
          default: break;
        }
      }
      if (ins.op == Opcode::kGetItem && ins.op_at(2) < 0) Reject(f, pc, "negative tuple index");
      if (ins.op == Opcode::kShapeBuild) {
        for (int64_t i = 0; i < ins.list_size(0); ++i) {
          if (ins.list(0)[i] < -ins.list_size(1)) Reject(f, pc, "shape_build template refers past its ints");
        }
      }
      if (ins.op == Opcode::kReadback) {
        if (ins.list_size(0) != ins.list_size(1) || ins.list_size(2) != ins.list_size(1)) {
          Reject(f, pc, "readback needs as many destinations and forms as sources");
        }
        for (int64_t i = 0; i < ins.list_size(2); ++i) {
          if (ins.list(2)[i] != kReadValues && ins.list(2)[i] != kReadTensor) {
            Reject(f, pc, "readback form " + std::to_string(ins.list(2)[i]) + " is neither 0 (values) nor 1 (tensor)");
          }
        }
      }
    }
  }
  // Call arity needs every function's parameter count, so it is checked last.
  for (const FunctionDef& f : functions) {
    for (size_t pc = 0; pc < f.decoded.size(); ++pc) {
      const Instruction& ins = f.decoded[pc];
      if (ins.op != Opcode::kCall) continue;
      const FunctionDef& callee = functions[static_cast<size_t>(ins.op_at(1))];
      if (ins.list_size(0) != static_cast<int64_t>(callee.params.size())) {
        Reject(f, pc, "call of '" + callee.name + "' passes " + std::to_string(ins.list_size(0)) +
                          " arguments, it takes " + std::to_string(callee.params.size()));
      }
    }
  }
}

}  // namespace shapefn
