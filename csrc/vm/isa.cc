// The instruction table at run time, the decoder and the disassembler, all
// driven by the operand specs of isa.def.
#include "isa.h"

#include <sstream>

#include "shapefn/device_slot.h"
#include "shapefn/error.h"

namespace shapefn {

namespace {

struct OpTable {
  OpInfo info[kNumOpcodes];
  std::string layouts[kNumOpcodes];

  OpTable() {
    int i = 0;
#define SHAPEFN_OP(name, mnemonic, check, ...) \
  info[i++] = OpInfo{mnemonic, nullptr, ops::k##name##Operands, static_cast<int>(std::size(ops::k##name##Operands))};
#include "isa.def"
#undef SHAPEFN_OP
    for (int op = 0; op < kNumOpcodes; ++op) {
      for (int k = 0; k < info[op].num_operands; ++k) layouts[op] += static_cast<char>(info[op].operands[k].kind);
      info[op].layout = layouts[op].c_str();
    }
  }
};

const OpTable& Table() {
  static const OpTable table;
  return table;
}

}  // namespace

const OpInfo& GetOpInfo(Opcode op) { return Table().info[static_cast<int>(op)]; }

const char* KindName(OperandKind kind) {
  switch (kind) {
    case OperandKind::kReg: return "reg";
    case OperandKind::kImm: return "imm";
    case OperandKind::kDevice: return "device";
    case OperandKind::kDType: return "dtype";
    case OperandKind::kKernel: return "kernel";
    case OperandKind::kShapeFunc: return "shape_func";
    case OperandKind::kConst: return "const";
    case OperandKind::kFunc: return "func";
    case OperandKind::kTarget: return "target";
    case OperandKind::kRegList: return "reg_list";
    case OperandKind::kImmList: return "imm_list";
  }
  return "?";
}

const char* RoleName(OperandRole role) { return role == OperandRole::kWrite ? "write" : "read"; }

OperandList Instruction::operand(int i) const {
  const OperandSpec* specs = GetOpInfo(op).operands;
  const int slot = OperandSlot(specs, i);
  if (IsList(specs[i].kind)) {
    const int64_t* at = words + list_offset[slot];
    return OperandList{at + 1, at[0]};
  }
  return OperandList{words + slot, 1};
}

std::vector<Instruction> Decode(const std::vector<int64_t>& code) {
  std::vector<Instruction> out;
  size_t pc = 0;
  const size_t n = code.size();
  while (pc < n) {
    int64_t word = code[pc];
    if (word < 0 || word >= kNumOpcodes) {
      Fail(ErrorKind::kFormat, "bad opcode " + std::to_string(word) + " at word " + std::to_string(pc));
    }
    Instruction ins;
    ins.op = static_cast<Opcode>(word);
    ins.words = code.data() + pc + 1;
    const OpInfo& info = GetOpInfo(ins.op);
    size_t pos = 0;  // relative to words
    for (int k = 0; k < info.num_operands; ++k) {
      if (pc + 1 + pos >= n) {
        Fail(ErrorKind::kFormat, std::string("truncated '") + info.mnemonic + "' at word " + std::to_string(pc));
      }
      if (IsList(info.operands[k].kind)) {
        int64_t count = code[pc + 1 + pos];
        if (count < 0 || static_cast<uint64_t>(count) > n - (pc + 2 + pos)) {
          Fail(ErrorKind::kFormat,
               std::string("bad list length in '") + info.mnemonic + "' at word " + std::to_string(pc));
        }
        ins.list_offset[ins.num_lists++] = static_cast<uint32_t>(pos);
        pos += 1 + static_cast<size_t>(count);
      } else {
        pos += 1;
      }
    }
    out.push_back(ins);
    pc += 1 + pos;
  }
  return out;
}

namespace {

void PrintWord(std::ostream& os, OperandKind kind, int64_t v) {
  switch (kind) {
    case OperandKind::kReg:
    case OperandKind::kRegList: os << "%" << v; break;
    // Only verified code is disassembled: a device operand is a slot of a VM.
    case OperandKind::kDevice: os << "@" << DeviceSlotName(static_cast<int>(v)); break;
    case OperandKind::kKernel: os << "kernel#" << v; break;
    case OperandKind::kShapeFunc: os << "shape_func#" << v; break;
    case OperandKind::kConst: os << "const#" << v; break;
    case OperandKind::kFunc: os << "func#" << v; break;
    case OperandKind::kTarget: os << "->" << v; break;
    case OperandKind::kDType: os << "dtype:" << v; break;
    case OperandKind::kImm:
    case OperandKind::kImmList: os << v; break;
  }
}

}  // namespace

std::string Disassemble(const std::vector<Instruction>& code, bool operand_names) {
  std::ostringstream os;
  for (size_t pc = 0; pc < code.size(); ++pc) {
    const Instruction& ins = code[pc];
    const OpInfo& info = GetOpInfo(ins.op);
    os << "  " << pc << ": " << info.mnemonic;
    for (int k = 0; k < info.num_operands; ++k) {
      const OperandSpec& spec = info.operands[k];
      os << (k == 0 ? " " : ", ");
      if (operand_names) os << spec.name << "=";
      OperandList words = ins.operand(k);
      if (!IsList(spec.kind)) {
        PrintWord(os, spec.kind, words[0]);
        continue;
      }
      os << "[";
      for (int64_t i = 0; i < words.size; ++i) {
        os << (i ? ", " : "");
        PrintWord(os, spec.kind, words[i]);
      }
      os << "]";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace shapefn
