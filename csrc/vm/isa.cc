// Decoder and disassembler, both driven by the table in isa.def.
#include "shapefn/isa.h"

#include <cstring>
#include <sstream>

#include "shapefn/error.h"

namespace shapefn {

namespace {
const OpInfo kOpInfo[] = {
#define SHAPEFN_OP(name, mnemonic, operands) {mnemonic, operands},
#include "shapefn/isa.def"
#undef SHAPEFN_OP
};

bool IsList(char kind) { return kind == 'R' || kind == 'I'; }
}  // namespace

const OpInfo& GetOpInfo(Opcode op) { return kOpInfo[static_cast<int>(op)]; }

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
    const char* kinds = kOpInfo[word].operands;
    size_t pos = 0;  // relative to words
    for (const char* k = kinds; *k; ++k) {
      if (pc + 1 + pos >= n) {
        Fail(ErrorKind::kFormat, std::string("truncated '") + kOpInfo[word].mnemonic +
                                     "' at word " + std::to_string(pc));
      }
      if (IsList(*k)) {
        int64_t count = code[pc + 1 + pos];
        if (count < 0 || static_cast<uint64_t>(count) > n - (pc + 2 + pos)) {
          Fail(ErrorKind::kFormat, std::string("bad list length in '") + kOpInfo[word].mnemonic +
                                       "' at word " + std::to_string(pc));
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

std::string Disassemble(const std::vector<Instruction>& code) {
  std::ostringstream os;
  for (size_t pc = 0; pc < code.size(); ++pc) {
    const Instruction& ins = code[pc];
    const OpInfo& info = GetOpInfo(ins.op);
    os << "  " << pc << ": " << info.mnemonic;
    int fixed = 0, list = 0;
    for (const char* k = info.operands; *k; ++k) {
      os << (k == info.operands ? " " : ", ");
      if (IsList(*k)) {
        os << "[";
        for (int64_t i = 0; i < ins.list_size(list); ++i) {
          os << (i ? ", " : "") << (*k == 'R' ? "%" : "") << ins.list(list)[i];
        }
        os << "]";
        ++list;
        continue;
      }
      int64_t v = ins.op_at(fixed++);
      switch (*k) {
        case 'r': os << "%" << v; break;
        case 'd': os << (v == 0 ? "@host" : "@device"); break;
        case 'k': os << "kernel#" << v; break;
        case 's': os << "shape_func#" << v; break;
        case 'c': os << "const#" << v; break;
        case 'f': os << "func#" << v; break;
        case 'j': os << "->" << v; break;
        case 't': os << "dtype:" << v; break;
        default: os << v; break;
      }
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace shapefn
