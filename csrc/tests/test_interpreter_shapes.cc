// Instruction family: arithmetic on ints and shapes — add, sub, mul, floordiv,
// floormod, min, max, lt, eq, shape_of, shape_get, shape_make, shape_build,
// tensor_dim, shape_numel, match_shape — against tables of expected values (floor
// semantics, checked overflow), their disassembly, the errors they raise and
// the verifier's refusals. The family has no Python half.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

constexpr int64_t kBig = int64_t{1} << 40;
const std::vector<std::pair<int64_t, int64_t>> kPairs = {{7, 2}, {-7, 2}, {7, -2}, {-7, -2}, {0, 5}, {5, 5}, {kBig, 3}};

// `op` (written `mnemonic`) over kPairs: one program of load_int, load_int,
// op per pair.
std::vector<int64_t> Apply(Code& (Code::*op)(std::initializer_list<Operand>), const std::string& mnemonic) {
  Code code;
  List results{};
  int64_t r = 1;
  for (const auto& [a, b] : kPairs) {
    code.LoadInt({r, a}).LoadInt({r + 1, b});
    (code.*op)({r + 2, r, r + 1});
    results.items.push_back(r + 2);
    r += 3;
  }
  code.MakeTuple({r, results}).Ret({r});
  const std::string text = Executable(Main(code, r + 1)).Disassemble(true);
  EXPECT_NE(text.find("  2: " + mnemonic + " dst=%3, lhs=%1, rhs=%2\n"), std::string::npos) << text;
  Value result = RunMain(Main(code, r + 1), {Iota({1})}).result;
  std::vector<int64_t> out;
  for (size_t i = 0; i < kPairs.size(); ++i) {
    const Value& v = Field(result, i);
    EXPECT_EQ(v.kind, Value::Kind::kInt);
    out.push_back(v.i);
  }
  return out;
}

TEST(InterpreterShapes, ArithmeticFollowsFloorSemantics) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(Apply(&Code::Add, "add"), (V{9, -5, 5, -9, 5, 10, kBig + 3}));
  EXPECT_EQ(Apply(&Code::Sub, "sub"), (V{5, -9, 9, -5, -5, 0, kBig - 3}));
  EXPECT_EQ(Apply(&Code::Mul, "mul"), (V{14, -14, -14, 14, 0, 25, 3 * kBig}));
  // Rounded toward negative infinity, as Python's // (not C++'s /).
  EXPECT_EQ(Apply(&Code::FloorDiv, "floordiv"), (V{3, -4, -4, 3, 0, 1, 366503875925}));
  // The sign of the divisor, as Python's % (not C++'s %).
  EXPECT_EQ(Apply(&Code::FloorMod, "floormod"), (V{1, 1, -1, -1, 0, 0, 1}));
  EXPECT_EQ(Apply(&Code::Min, "min"), (V{2, -7, -2, -7, 0, 5, 3}));
  EXPECT_EQ(Apply(&Code::Max, "max"), (V{7, 2, 7, -2, 5, 5, kBig}));
  EXPECT_EQ(Apply(&Code::Lt, "lt"), (V{0, 1, 0, 1, 1, 0, 0}));
  EXPECT_EQ(Apply(&Code::Eq, "eq"), (V{0, 0, 0, 0, 0, 1, 0}));
}

// `op`(a, b) as main's result.
ExecutableParts Arithmetic(Code& (Code::*op)(std::initializer_list<Operand>), int64_t a, int64_t b) {
  Code code;
  code.LoadInt({1, a}).LoadInt({2, b});
  (code.*op)({3, 1, 2});
  code.Ret({3});
  return Main(code, 4);
}

TEST(InterpreterShapes, ArithmeticErrors) {
  EXPECT_SHAPEFN_ERROR(RunMain(Arithmetic(&Code::FloorDiv, 1, 0), {Iota({1})}), ErrorKind::kValue,
                       "floordiv by zero in shape arithmetic");
  EXPECT_SHAPEFN_ERROR(RunMain(Arithmetic(&Code::FloorMod, 1, 0), {Iota({1})}), ErrorKind::kValue,
                       "floormod by zero in shape arithmetic");
  const int64_t half = int64_t{1} << 62;
  EXPECT_SHAPEFN_ERROR(RunMain(Arithmetic(&Code::Add, half, half), {Iota({1})}), ErrorKind::kValue,
                       "add overflows int64 in shape arithmetic");
  EXPECT_SHAPEFN_ERROR(RunMain(Arithmetic(&Code::Sub, -half, half + 1), {Iota({1})}), ErrorKind::kValue,
                       "sub overflows int64");
  EXPECT_SHAPEFN_ERROR(RunMain(Arithmetic(&Code::Mul, int64_t{1} << 32, int64_t{1} << 31), {Iota({1})}),
                       ErrorKind::kValue, "mul overflows int64");
  // At the edges, but in range.
  EXPECT_EQ(Show(RunMain(Arithmetic(&Code::Add, INT64_MAX, 0), {Iota({1})}).result), std::to_string(INT64_MAX));
  EXPECT_EQ(Show(RunMain(Arithmetic(&Code::Sub, INT64_MIN + 1, 1), {Iota({1})}).result), std::to_string(INT64_MIN));
}

// The one quotient that overflows int64: the instruction set promises
// checked arithmetic, so it must raise like add/sub/mul do, not trap the
// process (x86's idiv raises SIGFPE on INT64_MIN / -1, and C++ leaves it
// undefined).
TEST(InterpreterShapes, FloorDivOfInt64MinByMinusOneIsAnOverflowError) {
  EXPECT_SHAPEFN_ERROR(RunMain(Arithmetic(&Code::FloorDiv, INT64_MIN, -1), {Iota({1})}), ErrorKind::kValue,
                       "floordiv overflows int64");
}

// The remainder is 0, but C++'s % traps on the same operands.
TEST(InterpreterShapes, FloorModOfInt64MinByMinusOneIsZero) {
  EXPECT_EQ(Show(RunMain(Arithmetic(&Code::FloorMod, INT64_MIN, -1), {Iota({1})}).result), "0");
}

TEST(InterpreterShapes, ArithmeticTakesIntsOnly) {
  Code code;
  code.ShapeOf({1, 0}).LoadInt({2, 1}).Add({3, 1, 2}).Ret({3});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(code, 4), {Iota({1})}), ErrorKind::kType, "add expects an int, got shape");
  Code tensor;
  tensor.LoadInt({1, 1}).Lt({2, 1, 0}).Ret({2});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(tensor, 3), {Iota({1})}), ErrorKind::kType, "lt expects an int, got tensor");
}

TEST(InterpreterShapes, ShapeInstructions) {
  Code code;
  code.ShapeOf({1, 0})
      .ShapeGet({2, 1, 0})
      .ShapeGet({3, 1, -1})  // negative indices count from the end
      .TensorDim({4, 0, 1})
      .ShapeMake({5, List{4, 2}})
      .ShapeBuild({6, List{-2, 7, -1, -2}, List{2, 4}})  // [m, 7, n, m]
      .ShapeNumel({7, 6})
      .MakeTuple({8, List{1, 2, 3, 5, 6, 7}})
      .Ret({8});
  Outcome run = RunMain(Main(code, 9, {Param("x", kF32, {kN, kM})}), {Iota({3, 4})});
  EXPECT_EQ(Show(run.result), "([3, 4], 3, 4, [4, 3], [4, 7, 3, 4], 336)");
  EXPECT_EQ(run.counters.instructions, 9);
  const std::string text = Executable(Main(code, 9)).Disassemble(true);
  EXPECT_NE(text.find("shape_build dst=%6, pattern=[-2, 7, -1, -2], dims=[%2, %4]"), std::string::npos) << text;
}

TEST(InterpreterShapes, EmptyShapes) {
  Code code;
  code.ShapeOf({1, 0}).ShapeNumel({2, 1}).ShapeMake({3, List{}}).ShapeNumel({4, 3}).MakeTuple({5, List{1, 2, 3, 4}});
  code.Ret({5});
  // A 0-d tensor has the empty shape; its element count, like any empty product, is 1.
  Outcome run = RunMain(Main(code, 6, {Param("x", kF32, {})}), {Tensor<float>(kF32, {}, {2.5f})});
  EXPECT_EQ(Show(run.result), "([], 1, [], 1)");
  // A zero extent gives no elements.
  Outcome zero = RunMain(Main(Code().ShapeOf({1, 0}).ShapeNumel({2, 1}).Ret({2}), 3), {Iota({0})});
  EXPECT_EQ(Show(zero.result), "0");
}

TEST(InterpreterShapes, ShapeIndexOutOfRange) {
  EXPECT_SHAPEFN_ERROR(
      RunMain(Main(Code().ShapeOf({1, 0}).ShapeGet({2, 1, 2}).Ret({2}), 3, {Param("x", kF32, {kN, kM})}),
              {Iota({1, 1})}),
      ErrorKind::kIndex, "shape_get: index 2 out of range for rank 2");
  EXPECT_SHAPEFN_ERROR(
      RunMain(Main(Code().TensorDim({1, 0, -3}).Ret({1}), 2, {Param("x", kF32, {kN, kM})}), {Iota({1, 1})}),
      ErrorKind::kIndex, "tensor_dim: index -3 out of range for rank 2");
}

TEST(InterpreterShapes, ShapeOperandsMustBeShapes) {
  EXPECT_SHAPEFN_ERROR(RunMain(Main(Code().LoadInt({1, 2}).ShapeGet({2, 1, 0}).Ret({2}), 3), {Iota({1})}),
                       ErrorKind::kType, "shape_get expects a shape, got int");
  EXPECT_SHAPEFN_ERROR(RunMain(Main(Code().ShapeOf({1, 0}).ShapeMake({2, List{1}}).Ret({2}), 3), {Iota({1})}),
                       ErrorKind::kType, "shape_make expects an int, got shape");
  EXPECT_SHAPEFN_ERROR(RunMain(Main(Code().ShapeOf({1, 0}).ShapeOf({2, 1}).Ret({2}), 3), {Iota({1})}), ErrorKind::kType,
                       "shape_of expects a tensor, got shape");
}

TEST(InterpreterShapes, ShapeNumelOverflow) {
  Code code;
  code.LoadInt({1, int64_t{1} << 32}).ShapeMake({2, List{1, 1}}).ShapeNumel({3, 2}).Ret({3});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(code, 4), {Iota({1})}), ErrorKind::kValue, "mul overflows int64");
}

TEST(InterpreterShapes, MatchShapeChecksRankAndSizes) {
  // x: [n, m]; match_shape x as [3, m] (axis 0 the literal 3, axis 1 the int in %1), and its shape too.
  Code code;
  code.TensorDim({1, 0, 1}).MatchShape({0, 2, List{0, 1}, List{3, -1}, List{1}}).ShapeOf({2, 0});
  code.MatchShape({2, 2, List{0}, List{3}, List{}}).Ret({2});
  ExecutableParts main = Main(code, 3, {Param("x", kF32, {kN, kM})});
  EXPECT_EQ(Show(RunMain(main, {Iota({3, 5})}).result), "[3, 5]");
  EXPECT_SHAPEFN_ERROR(RunMain(main, {Iota({4, 5})}), ErrorKind::kValue,
                       "a tensor of size 4 along axis 0 where the program expects 3 (shape [4, 5])");
  Code rank;
  rank.ShapeOf({1, 0}).MatchShape({1, 1, List{}, List{}, List{}}).Ret({1});
  EXPECT_SHAPEFN_ERROR(RunMain(Main(rank, 2, {Param("x", kF32, {kN, kM})}), {Iota({2, 2})}), ErrorKind::kValue,
                       "a shape of rank 2 where the program expects rank 1");
  const std::string text = Executable(main).Disassemble(true);
  EXPECT_NE(text.find("match_shape value=%0, rank=2, axes=[0, 1], pattern=[3, -1], dims=[%1]"), std::string::npos)
      << text;
}

// fail_*: what the verifier refuses.
TEST(InterpreterShapes, VerifierRefusals) {
  EXPECT_REJECTED(Main(Code().MatchShape({0, 1, List{1}, List{2}, List{}}).Ret({0}), 1),
                  "match_shape axis out of range for its rank (operand 'axes')");
  EXPECT_REJECTED(Main(Code().MatchShape({0, 1, List{0}, List{-2}, List{0}}).Ret({0}), 1),
                  "match_shape pattern refers past its ints (operand 'pattern')");
  EXPECT_REJECTED(Main(Code().MatchShape({0, 1, List{0}, List{}, List{}}).Ret({0}), 1),
                  "match_shape has a size for each axis (operands 'axes', 'pattern')");
  EXPECT_REJECTED(Main(Code().LoadInt({1, 1}).ShapeBuild({2, List{-3}, List{1, 1}}).Ret({2}), 3),
                  "shape_build template refers past its ints (operand 'pattern')");
  EXPECT_REJECTED(Main(Code().ShapeMake({1, List{0, 4}}).Ret({1}), 2),
                  "shape_make uses register %4 of 2 (operand 'dims')");
  EXPECT_REJECTED(Main(Code().Add({1, 0, 2}).Ret({1}), 2), "add uses register %2 of 2 (operand 'rhs')");
  EXPECT_REJECTED(Main(Code().FloorMod({1, 3, 0}).Ret({1}), 2), "floormod uses register %3 of 2 (operand 'lhs')");
}

}  // namespace
}  // namespace shapefn::bytecode
