// The instruction set as C++: opcodes, operand specs, decoded instructions
// and one operand view per instruction (`ops::Add(ins).lhs()`), all
// generated from the table in isa.def.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shapefn {

enum class Opcode : uint8_t {
#define SHAPEFN_OP(name, ...) k##name,
#include "isa.def"
#undef SHAPEFN_OP
  kCount
};
constexpr int kNumOpcodes = static_cast<int>(Opcode::kCount);

// The letters are the operand kinds of `_core.isa()`'s layout strings.
enum class OperandKind : char {
  kReg = 'r',
  kImm = 'i',
  kDevice = 'd',
  kDType = 't',
  kKernel = 'k',
  kShapeFunc = 's',
  kConst = 'c',
  kFunc = 'f',
  kTarget = 'j',
  kRegList = 'R',
  kImmList = 'I',
};
enum class OperandRole : uint8_t { kRead, kWrite };

constexpr bool IsList(OperandKind k) { return k == OperandKind::kRegList || k == OperandKind::kImmList; }
const char* KindName(OperandKind kind);  // "reg", "imm_list", ...
const char* RoleName(OperandRole role);  // "read", "write"

struct OperandSpec {
  const char* name;
  OperandKind kind;
  OperandRole role;
};

constexpr int kMaxLists = 3;  // lists one instruction may have

struct OpInfo {
  const char* mnemonic;
  const char* layout;  // the operand kinds' letters, in order
  const OperandSpec* operands;
  int num_operands;
};
const OpInfo& GetOpInfo(Opcode op);

// What a readback makes of each source: its values (an int for a 0-d
// tensor, else a shape), or the tensor itself on the host.
constexpr int64_t kReadValues = 0;
constexpr int64_t kReadTensor = 1;

// A list operand: its words in the function's code.
struct OperandList {
  const int64_t* data;
  int64_t size;
  const int64_t* begin() const { return data; }
  const int64_t* end() const { return data + size; }
  int64_t operator[](int64_t i) const { return data[i]; }
};

// One decoded instruction: operand words point into the function's code.
// Fixed operands are words[0..], list k starts at words[list_offset[k]]
// with its length. Read operands through the views in `ops`, by name.
struct Instruction {
  Opcode op;
  uint8_t num_lists = 0;
  uint32_t list_offset[kMaxLists] = {0, 0, 0};
  const int64_t* words = nullptr;

  // Operand `i` of the instruction's table entry, whatever its kind (a
  // fixed operand's list has one word).
  OperandList operand(int i) const;
};

// The position of operand `i` among the fixed operands or among the lists.
constexpr int OperandSlot(const OperandSpec* specs, int i) {
  int slot = 0;
  for (int j = 0; j < i; ++j) slot += IsList(specs[j].kind) == IsList(specs[i].kind);
  return slot;
}

namespace ops {

// Base of the per-instruction views: operand `I` by its table position.
template <const OperandSpec* kSpecs>
class OperandView {
 public:
  explicit OperandView(const Instruction& ins) : ins_(ins) {}

 protected:
  template <int I>
  auto Get() const {
    constexpr int slot = OperandSlot(kSpecs, I);
    if constexpr (IsList(kSpecs[I].kind)) {
      const int64_t* at = ins_.words + ins_.list_offset[slot];
      return OperandList{at + 1, at[0]};
    } else {
      return ins_.words[slot];
    }
  }

 private:
  const Instruction& ins_;
};

#define SHAPEFN_PP_CAT_(a, b) a##b
#define SHAPEFN_PP_CAT(a, b) SHAPEFN_PP_CAT_(a, b)
#define SHAPEFN_PP_NARGS_(a, b, c, d, e, f, n, ...) n
#define SHAPEFN_PP_NARGS(...) SHAPEFN_PP_NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define SHAPEFN_PP_UNPACK(...) __VA_ARGS__
// M(index, (name, kind, role)) for each operand (at most 6 per instruction).
#define SHAPEFN_FOR_EACH_OPERAND(M, ...) SHAPEFN_PP_CAT(SHAPEFN_FE_, SHAPEFN_PP_NARGS(__VA_ARGS__))(M, __VA_ARGS__)
#define SHAPEFN_FE_1(M, a) M(0, a)
#define SHAPEFN_FE_2(M, a, b) SHAPEFN_FE_1(M, a) M(1, b)
#define SHAPEFN_FE_3(M, a, b, c) SHAPEFN_FE_2(M, a, b) M(2, c)
#define SHAPEFN_FE_4(M, a, b, c, d) SHAPEFN_FE_3(M, a, b, c) M(3, d)
#define SHAPEFN_FE_5(M, a, b, c, d, e) SHAPEFN_FE_4(M, a, b, c, d) M(4, e)
#define SHAPEFN_FE_6(M, a, b, c, d, e, f) SHAPEFN_FE_5(M, a, b, c, d, e) M(5, f)

#define SHAPEFN_OPERAND_SPEC_(name, kind, role) OperandSpec{#name, OperandKind::k##kind, OperandRole::k##role},
#define SHAPEFN_OPERAND_SPEC(i, operand) SHAPEFN_OPERAND_SPEC_ operand
#define SHAPEFN_OPERAND_ACCESSOR_(i, name, kind, role) \
  auto name() const { return Get<i>(); }
#define SHAPEFN_OPERAND_ACCESSOR_I(...) SHAPEFN_OPERAND_ACCESSOR_(__VA_ARGS__)
#define SHAPEFN_OPERAND_ACCESSOR(i, operand) SHAPEFN_OPERAND_ACCESSOR_I(i, SHAPEFN_PP_UNPACK operand)

// k<Name>Operands: the operand specs of each instruction.
#define SHAPEFN_OP(name, mnemonic, check, ...) \
  inline constexpr OperandSpec k##name##Operands[] = {SHAPEFN_FOR_EACH_OPERAND(SHAPEFN_OPERAND_SPEC, __VA_ARGS__)};
#include "isa.def"
#undef SHAPEFN_OP

template <size_t N>
constexpr int NumLists(const OperandSpec (&specs)[N]) {
  int n = 0;
  for (const OperandSpec& s : specs) n += IsList(s.kind);
  return n;
}
// Instruction::list_offset has room for every entry's lists.
#define SHAPEFN_OP(name, mnemonic, check, ...) \
  static_assert(NumLists(k##name##Operands) <= kMaxLists, #name " has more lists than Instruction holds");
#include "isa.def"
#undef SHAPEFN_OP

// ops::<Name>: an instruction's operands by name.
#define SHAPEFN_OP(name, mnemonic, check, ...)                      \
  class name : public OperandView<k##name##Operands> {              \
   public:                                                          \
    using OperandView::OperandView;                                 \
    SHAPEFN_FOR_EACH_OPERAND(SHAPEFN_OPERAND_ACCESSOR, __VA_ARGS__) \
  };
#include "isa.def"
#undef SHAPEFN_OP

// Whether two instructions have the same operands (names, kinds, roles):
// handlers shared by several instructions rely on it.
template <size_t N, size_t M>
constexpr bool SameOperands(const OperandSpec (&a)[N], const OperandSpec (&b)[M]) {
  if (N != M) return false;
  for (size_t i = 0; i < N; ++i) {
    if (a[i].kind != b[i].kind || a[i].role != b[i].role) return false;
    const char *x = a[i].name, *y = b[i].name;
    while (*x != 0 && *x == *y) ++x, ++y;
    if (*x != *y) return false;
  }
  return true;
}

}  // namespace ops

// dtype operands pack code | bits << 8 | lanes << 16.
DLDataType DecodeDType(int64_t word);
inline int64_t EncodeDType(DLDataType t) {
  return static_cast<int64_t>(t.code) | (static_cast<int64_t>(t.bits) << 8) | (static_cast<int64_t>(t.lanes) << 16);
}

// Decodes `code` into instructions; throws Error(kFormat) on malformed code.
std::vector<Instruction> Decode(const std::vector<int64_t>& code);
// One line per instruction of verified code; `operand_names` prints each
// operand as name=value.
std::string Disassemble(const std::vector<Instruction>& code, bool operand_names = false);

}  // namespace shapefn
