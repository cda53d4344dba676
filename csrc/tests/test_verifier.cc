// Load-time verification (the Executable constructor, which Deserialize and
// Load go through too): a well-formed executable is accepted and round-trips;
// each malformed one is refused with Error(kFormat) naming its problem and,
// for an operand, the operand. Executables are made from ExecutableParts
// (shapefn/executable.h); the code is written with the private instruction
// set (internal/isa.h) as the Python builder writes it.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "isa.h"
#include "shapefn/executable.h"

namespace shapefn {
namespace {

int64_t Op(Opcode op) { return static_cast<int64_t>(op); }

const DLDataType kF32{kDLFloat, 32, 1};

// main(x: float32[n]) with `code` over `num_registers` registers.
FunctionDef Function(std::vector<int64_t> code, const std::string& name = "main", int64_t num_registers = 4) {
  FunctionDef f;
  f.name = name;
  f.symbols = {"n"};
  ParamSpec x;
  x.name = "x";
  x.dtype = kF32;
  x.dims = {-1};
  f.params.push_back(x);
  f.num_registers = num_registers;
  f.code = std::move(code);
  return f;
}

ExecutableParts WithMain(std::vector<int64_t> code) {
  ExecutableParts parts;
  parts.functions.push_back(Function(std::move(code)));
  return parts;
}

// The message of the Error(kFormat) that making an executable of `parts`
// throws ("" if none).
std::string Rejection(ExecutableParts parts) {
  try {
    Executable exe(std::move(parts));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the executable was accepted";
  return "";
}

#define EXPECT_REJECTED(parts, fragment)                                    \
  do {                                                                      \
    const std::string message = Rejection(parts);                           \
    EXPECT_NE(message.find(fragment), std::string::npos)                    \
        << "expected '" << (fragment) << "' in the rejection: " << message; \
  } while (0)

TEST(Verifier, AcceptsAndRoundTripsAWellFormedExecutable) {
  ExecutableParts parts = WithMain({Op(Opcode::kShapeOf), 1, 0, Op(Opcode::kAllocTensor), 2, kExecutionSlot, 1,
                                    EncodeDType(kF32), Op(Opcode::kInvokeKernel), 0, 2, 0, 2, Op(Opcode::kRet), 2});
  parts.kernels = {"copy"};
  ConstantDef c;
  c.dtype = kF32;
  c.shape = {2};
  c.bytes.assign(8, 0);
  parts.constants.push_back(c);
  std::unique_ptr<Executable> exe;
  ASSERT_NO_THROW(exe = std::make_unique<Executable>(std::move(parts)));
  std::vector<Instruction> decoded = Decode(exe->functions()[0].code);
  ASSERT_EQ(decoded.size(), 4u);
  EXPECT_EQ(decoded[3].op, Opcode::kRet);
  EXPECT_NE(exe->Disassemble(true).find("3: ret value=%2"), std::string::npos) << exe->Disassemble(true);
  EXPECT_EQ(exe->FunctionIndex("main"), 0);

  std::vector<uint8_t> bytes = exe->Serialize();
  std::shared_ptr<Executable> loaded = Executable::Deserialize(bytes.data(), bytes.size());
  EXPECT_EQ(loaded->functions()[0].code, exe->functions()[0].code);
  EXPECT_EQ(loaded->kernels(), exe->kernels());
  ASSERT_EQ(loaded->constants().size(), 1u);
  EXPECT_EQ(loaded->constants()[0].bytes, c.bytes);
  EXPECT_EQ(loaded->Disassemble(), exe->Disassemble());
  EXPECT_EQ(loaded->Disassemble(true), exe->Disassemble(true));
}

TEST(Verifier, UnknownFunctionIsAKeyError) {
  Executable exe(WithMain({Op(Opcode::kRet), 0}));
  try {
    exe.FunctionIndex("absent");
    FAIL() << "FunctionIndex of an unknown function returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kKey);
  }
}

TEST(Verifier, RejectsBadRegisters) {
  EXPECT_REJECTED(WithMain({Op(Opcode::kLoadInt), 5, 1, Op(Opcode::kRet), 1}),
                  "load_int uses register %5 of 4 (operand 'dst')");
  EXPECT_REJECTED(WithMain({Op(Opcode::kMove), 1, -1, Op(Opcode::kRet), 1}),
                  "move uses register %-1 of 4 (operand 'src')");
  EXPECT_REJECTED(WithMain({Op(Opcode::kMakeTuple), 1, 2, 0, 9, Op(Opcode::kRet), 1}),
                  "make_tuple uses register %9 of 4 (operand 'fields')");
}

TEST(Verifier, RejectsMalformedCode) {
  EXPECT_REJECTED(WithMain({kNumOpcodes}), "bad opcode " + std::to_string(kNumOpcodes) + " at word 0");
  EXPECT_REJECTED(WithMain({-1}), "bad opcode -1 at word 0");
  EXPECT_REJECTED(WithMain({Op(Opcode::kRet), 0, Op(Opcode::kLoadInt), 1}), "truncated 'load_int' at word 2");
  EXPECT_REJECTED(WithMain({Op(Opcode::kMakeTuple), 1, 5, 0, Op(Opcode::kRet), 1}),
                  "bad list length in 'make_tuple' at word 0");
  EXPECT_REJECTED(WithMain({}), "function 'main' is empty");
  EXPECT_REJECTED(WithMain({Op(Opcode::kLoadInt), 1, 3}), "function 'main' can run past its end");
}

TEST(Verifier, RejectsBadIndices) {
  EXPECT_REJECTED(WithMain({Op(Opcode::kGoto), 7}), "goto refers to instruction #7 of 1 (operand 'target')");
  EXPECT_REJECTED(WithMain({Op(Opcode::kLoadConst), 1, 3, Op(Opcode::kRet), 1}),
                  "load_const refers to constant #3 of 0 (operand 'constant')");
  ExecutableParts kernel = WithMain({Op(Opcode::kInvokeKernel), 2, 1, 0, Op(Opcode::kRet), 0});
  kernel.kernels = {"scale"};
  EXPECT_REJECTED(kernel, "invoke_kernel refers to kernel #2 of 1 (operand 'kernel')");
  EXPECT_REJECTED(WithMain({Op(Opcode::kInvokeShapeFunc), 0, 1, 0, 1, 1, 0, Op(Opcode::kRet), 1}),
                  "invoke_shape_func refers to shape function #0 of 0 (operand 'shape_func')");
  EXPECT_REJECTED(WithMain({Op(Opcode::kCall), 1, 5, 1, 0, Op(Opcode::kRet), 1}),
                  "call refers to function #5 of 1 (operand 'function')");
  EXPECT_REJECTED(WithMain({Op(Opcode::kShapeOf), 1, 0, Op(Opcode::kAllocTensor), 2, kNumDeviceSlots, 1,
                            EncodeDType(kF32), Op(Opcode::kRet), 2}),
                  "alloc_tensor refers to device slot #2 of 2 (operand 'device')");
}

TEST(Verifier, RejectsCallsWithTheWrongArity) {
  ExecutableParts parts;
  parts.functions.push_back(Function({Op(Opcode::kCall), 1, 1, 2, 0, 0, Op(Opcode::kRet), 1}));
  parts.functions.push_back(Function({Op(Opcode::kRet), 0}, "helper"));
  EXPECT_REJECTED(parts, "function 'main' instruction 0: call of 'helper' passes 2 arguments, it takes 1");
}

TEST(Verifier, RejectsBadTables) {
  ExecutableParts dup;
  dup.functions.push_back(Function({Op(Opcode::kRet), 0}));
  dup.functions.push_back(Function({Op(Opcode::kRet), 0}));
  EXPECT_REJECTED(dup, "duplicate function 'main'");

  ExecutableParts constant = WithMain({Op(Opcode::kRet), 0});
  ConstantDef c;
  c.dtype = kF32;
  c.shape = {2, 3};
  c.bytes.assign(20, 0);
  constant.constants.push_back(c);
  EXPECT_REJECTED(constant, "constant 0 has 20 bytes, its shape needs 24");
  constant.constants[0].bytes.assign(24, 0);
  constant.constants[0].device_slot = kNumDeviceSlots;
  EXPECT_REJECTED(constant, "constant 0 has an invalid device");

  ExecutableParts name = WithMain({Op(Opcode::kRet), 0});
  name.kernels = {""};
  EXPECT_REJECTED(name, "kernel name is empty or not UTF-8");

  ExecutableParts registers = WithMain({Op(Opcode::kRet), 0});
  registers.functions[0].num_registers = 0;
  EXPECT_REJECTED(registers, "function 'main' has 0 registers for 1 parameters");

  ExecutableParts symbol = WithMain({Op(Opcode::kRet), 0});
  symbol.functions[0].params[0].dims = {-1, -2};
  EXPECT_REJECTED(symbol, "function 'main' parameter 'x' names an unknown symbol");
}

TEST(Verifier, DeserializeRejectsWhatIsNotAnExecutable) {
  const std::string junk = "not an executable at all";
  try {
    Executable::Deserialize(reinterpret_cast<const uint8_t*>(junk.data()), junk.size());
    FAIL() << "junk was deserialized";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  }
  // A valid file cut short.
  std::vector<uint8_t> bytes = Executable(WithMain({Op(Opcode::kRet), 0})).Serialize();
  try {
    Executable::Deserialize(bytes.data(), bytes.size() / 2);
    FAIL() << "a truncated executable was deserialized";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  }
}

TEST(Verifier, LoadOfAMissingFileIsAValueError) {
  try {
    Executable::Load("/nonexistent/shapefn/missing.sfx");
    FAIL() << "a missing file was loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("cannot open executable"), std::string::npos);
  }
}

}  // namespace
}  // namespace shapefn
