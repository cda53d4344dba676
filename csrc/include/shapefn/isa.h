// Opcodes and decoded instructions, generated from isa.def.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shapefn {

enum class Opcode : uint8_t {
#define SHAPEFN_OP(name, mnemonic, operands) k##name,
#include "shapefn/isa.def"
#undef SHAPEFN_OP
  kCount
};

struct OpInfo {
  const char* mnemonic;
  const char* operands;  // operand kinds, see isa.def
};

const OpInfo& GetOpInfo(Opcode op);
constexpr int kNumOpcodes = static_cast<int>(Opcode::kCount);

// What a readback makes of each source: its values (an int for a 0-d
// tensor, else a shape), or the tensor itself on the host.
constexpr int64_t kReadValues = 0;
constexpr int64_t kReadTensor = 1;

// One decoded instruction: operand words point into the function's code.
// Fixed operands are op(0..); list k is list(k) with list_size(k) entries.
struct Instruction {
  Opcode op;
  uint8_t num_lists = 0;
  uint32_t list_offset[3] = {0, 0, 0};
  const int64_t* words = nullptr;

  int64_t op_at(int i) const { return words[i]; }
  int64_t list_size(int k) const { return words[list_offset[k]]; }
  const int64_t* list(int k) const { return words + list_offset[k] + 1; }
};

// dtype operands (kind t) pack code | bits << 8 | lanes << 16.
DLDataType DecodeDType(int64_t word);
inline int64_t EncodeDType(DLDataType t) {
  return static_cast<int64_t>(t.code) | (static_cast<int64_t>(t.bits) << 8) |
         (static_cast<int64_t>(t.lanes) << 16);
}

// Decodes `code` into instructions; throws Error(kFormat) on malformed code.
std::vector<Instruction> Decode(const std::vector<int64_t>& code);
std::string Disassemble(const std::vector<Instruction>& code);

}  // namespace shapefn
