// Instruction family: readbacks — readback's forms (the values, as an int
// for a 0-d tensor or a shape otherwise, or the tensor on the host), one
// sync per instruction however many sources, host tensors read in place,
// the dtypes it reads, and the verifier's rules on its lists. The builder's
// readback, which takes the forms as flags: tests/test_bytecode_readback.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

TEST(InterpreterReadback, DeviceTensorsAreReadWithOneSync) {
  Code code;
  code.Readback({List{2, 3, 4}, List{0, 1, 0}, List{kReadValues, kReadValues, kReadTensor}})
      .MakeTuple({5, List{2, 3, 4}})
      .Ret({5});
  ExecutableParts parts = Main(code, 6, {Param("v", kI64, {3}), Param("s", kI32, {})});
  Outcome run = RunMain(parts, {Tensor<int64_t>(kI64, {3}, {4, -1, 9}), Tensor<int32_t>(kI32, {}, {7})}, Sim());
  EXPECT_EQ(Show(run.result), "([4, -1, 9], 7, int64[3]@host)");
  EXPECT_EQ(Contents<int64_t>(Field(run.result, 2)), (std::vector<int64_t>{4, -1, 9}));
  EXPECT_EQ(run.counters.syncs, 1);  // three sources, one wait
  EXPECT_EQ(run.counters.d2h_copies, 3);
  EXPECT_EQ(run.counters.d2h_bytes, 24 + 4 + 24);
  const std::string text = Executable(parts).Disassemble(true);
  EXPECT_NE(text.find("readback dsts=[%2, %3, %4], srcs=[%0, %1, %0], forms=[0, 0, 1]"), std::string::npos) << text;
}

TEST(InterpreterReadback, HostTensorsAreReadInPlace) {
  Code code;
  code.Readback({List{1, 2}, List{0, 0}, List{kReadValues, kReadTensor}}).MakeTuple({3, List{1, 2}}).Ret({3});
  Value v = Tensor<int64_t>(kI64, {3}, {1, 2, 3});
  Outcome run = RunMain(Main(code, 4, {Param("v", kI64, {3}, kHostSlot)}), {v}, Sim());
  EXPECT_EQ(Show(run.result), "([1, 2, 3], int64[3]@host)");
  EXPECT_EQ(Field(run.result, 1).tensor, v.tensor);  // no copy
  EXPECT_EQ(run.counters.d2h_copies, 0);
  EXPECT_EQ(run.counters.syncs, 0);
}

TEST(InterpreterReadback, ValuesOfIntegerAndBoolTensors) {
  const std::vector<DLDataType> dtypes = {{kDLUInt, 8, 1}, {kDLInt, 16, 1}, {kDLBool, 8, 1}, {kDLUInt, 64, 1}};
  for (DLDataType dtype : dtypes) {
    SCOPED_TRACE(DTypeToString(dtype));
    Code code;
    code.Readback({List{1}, List{0}, List{kReadValues}}).Ret({1});
    std::vector<uint8_t> bytes(2 * dtype.bits / 8, 0);
    bytes[0] = 1;  // [1, 0] in little-endian
    Outcome run = RunMain(Main(code, 2, {Param("v", dtype, {2})}), {Tensor<uint8_t>(dtype, {2}, bytes)}, Sim());
    EXPECT_EQ(Show(run.result), "[1, 0]");
  }
}

TEST(InterpreterReadback, AValueOutsideInt64IsAValueError) {
  Code code;
  code.Readback({List{1}, List{0}, List{kReadValues}}).Ret({1});
  const DLDataType u64{kDLUInt, 64, 1};
  EXPECT_SHAPEFN_ERROR(
      RunMain(Main(code, 2, {Param("v", u64, {1})}), {Tensor<uint64_t>(u64, {1}, {uint64_t{1} << 63})}, Sim()),
      ErrorKind::kValue, "9223372036854775808 overflows int64");
}

TEST(InterpreterReadback, FloatTensorsAreReadAsTensorsOnly) {
  Code values;
  values.Readback({List{1}, List{0}, List{kReadValues}}).Ret({1});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(values, 2), {Iota({2})}, Sim()), ErrorKind::kType,
                       "readback reads integer or bool tensors, got float32");
  Code tensor;
  tensor.Readback({List{1}, List{0}, List{kReadTensor}}).Ret({1});
  Outcome run = RunMain(Main(tensor, 2), {Iota({2})}, Sim());
  EXPECT_EQ(Show(run.result), "float32[2]@host");
  EXPECT_EQ(Contents<float>(run.result), (std::vector<float>{0, 1}));
}

TEST(InterpreterReadback, SourcesMustBeTensors) {
  Code code;
  code.LoadInt({1, 3}).Readback({List{2}, List{1}, List{kReadValues}}).Ret({2});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(code, 3), {Iota({1})}, Sim()), ErrorKind::kType,
                       "readback expects a tensor, got int");
}

// fail_*: what the verifier refuses.
TEST(InterpreterReadback, VerifierRefusals) {
  EXPECT_REJECTED(Main(Code().Readback({List{1, 2}, List{0}, List{0}}).Ret({0}), 3),
                  "readback needs as many destinations and forms as sources");
  EXPECT_REJECTED(Main(Code().Readback({List{1}, List{0}, List{0, 1}}).Ret({0}), 3),
                  "readback needs as many destinations and forms as sources");
  EXPECT_REJECTED(Main(Code().Readback({List{1}, List{0}, List{2}}).Ret({0}), 3),
                  "readback form 2 is neither 0 (values) nor 1 (tensor) (operand 'forms')");
  EXPECT_REJECTED(Main(Code().Readback({List{8}, List{0}, List{0}}).Ret({0}), 3),
                  "readback uses register %8 of 3 (operand 'dsts')");
  EXPECT_REJECTED(Main(Code().Readback({List{1}, List{-2}, List{0}}).Ret({0}), 3),
                  "readback uses register %-2 of 3 (operand 'srcs')");
}

}  // namespace
}  // namespace shapefn::bytecode
