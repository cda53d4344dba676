// The built-in native shape functions (csrc/shape), called through the
// registry as the VM calls them, against shapes worked out by hand from each
// op's definition (numpy slicing, ONNX Reshape, numpy broadcasting, ...).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shapefn/registry.h"

namespace shapefn {
namespace {

// One input of a shape function: its shape and, where the op's mask reads
// it, its int64 values.
struct In {
  ShapeVec shape;
  std::vector<int64_t> values;
  bool has_value = false;

  static In Shape(ShapeVec s) { return In{std::move(s), {}, false}; }
  static In Vector(std::vector<int64_t> v) { return In{{static_cast<int64_t>(v.size())}, std::move(v), true}; }
  static In Scalar(int64_t v) { return In{{}, {v}, true}; }
};

// Runs the registered shape function of `op` and returns its output shapes.
std::vector<ShapeVec> OutputsOf(const std::string& op, std::vector<In> ins, std::vector<int64_t> attrs = {}) {
  ShapeFuncEntryPtr entry = ShapeFuncRegistry::Global().Lookup(op);
  EXPECT_NE(entry->native, nullptr) << op;
  const int n = static_cast<int>(ins.size());
  std::vector<DLTensor> tensors(ins.size());
  std::vector<ShapeFuncInput> inputs(ins.size());
  for (int i = 0; i < n; ++i) {
    In& in = ins[static_cast<size_t>(i)];
    const int ndim = static_cast<int>(in.shape.size());
    tensors[static_cast<size_t>(i)] =
        DLTensor{in.values.data(), DLDevice{kDLCPU, 0}, ndim, DLDataType{kDLInt, 64, 1}, in.shape.data(), nullptr, 0};
    const bool value = entry->NeedsValue(i);
    EXPECT_EQ(value, in.has_value) << op << " input " << i;
    inputs[static_cast<size_t>(i)] = ShapeFuncInput{in.shape.data(), ndim, DLDataType{kDLInt, 64, 1},
                                                    value ? &tensors[static_cast<size_t>(i)] : nullptr};
  }
  std::vector<ShapeVec> outputs(static_cast<size_t>(entry->num_outputs));
  entry->native(inputs.data(), n, ShapeFuncAttrs{attrs.data(), static_cast<int>(attrs.size())}, outputs.data());
  return outputs;
}

ShapeVec OutputOf(const std::string& op, std::vector<In> ins, std::vector<int64_t> attrs = {}) {
  std::vector<ShapeVec> out = OutputsOf(op, std::move(ins), std::move(attrs));
  EXPECT_EQ(out.size(), 1u);
  return out.empty() ? ShapeVec{} : out[0];
}

// The message of the shapefn::Error of kind kValue that `f` throws.
template <typename F>
std::string ValueError(F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no shapefn::Error was thrown";
  return "";
}

ShapeVec Slice(ShapeVec data, std::vector<int64_t> begin, std::vector<int64_t> end, std::vector<int64_t> strides) {
  return OutputOf("dyn.strided_slice",
                  {In::Shape(std::move(data)), In::Vector(begin), In::Vector(end), In::Vector(strides)});
}

// -- strided_slice: len(range(n)[begin:end:stride]) per sliced axis ----------

TEST(StridedSlice, PositiveStrides) {
  EXPECT_EQ(Slice({10, 6}, {2}, {8}, {1}), (ShapeVec{6, 6}));            // 2..7
  EXPECT_EQ(Slice({10, 6}, {1, 0}, {10, 6}, {3, 4}), (ShapeVec{3, 2}));  // 1,4,7 ; 0,4
  EXPECT_EQ(Slice({10}, {-3}, {100}, {1}), (ShapeVec{3}));               // 7,8,9
  EXPECT_EQ(Slice({10}, {-100}, {100}, {1}), (ShapeVec{10}));            // clipped to the whole axis
}

TEST(StridedSlice, NegativeStrides) {
  EXPECT_EQ(Slice({10}, {8}, {2}, {-2}), (ShapeVec{3}));     // 8,6,4
  EXPECT_EQ(Slice({10}, {9}, {-11}, {-1}), (ShapeVec{10}));  // the whole axis reversed
  EXPECT_EQ(Slice({10}, {-1}, {-4}, {-1}), (ShapeVec{3}));   // 9,8,7
  EXPECT_EQ(Slice({10}, {100}, {0}, {-3}), (ShapeVec{3}));   // 9,6,3 (index 0 excluded)
}

TEST(StridedSlice, EmptyAndZeroSizes) {
  EXPECT_EQ(Slice({10, 4}, {5}, {5}, {1}), (ShapeVec{0, 4}));
  EXPECT_EQ(Slice({10}, {2}, {8}, {-1}), (ShapeVec{0}));
  EXPECT_EQ(Slice({0, 3}, {0}, {5}, {1}), (ShapeVec{0, 3}));
  EXPECT_EQ(Slice({0}, {-1}, {-10}, {-1}), (ShapeVec{0}));
}

TEST(StridedSlice, RejectsZeroStrideAndMismatchedLengths) {
  EXPECT_NE(ValueError([] { Slice({10}, {0}, {5}, {0}); }).find("strides[0] is 0"), std::string::npos);
  EXPECT_NE(ValueError([] { Slice({10, 2}, {0, 0}, {5}, {1, 1}); }).find("equal lengths"), std::string::npos);
  EXPECT_NE(ValueError([] { Slice({10}, {0, 0}, {5, 5}, {1, 1}); }).find("has only 1 dims"), std::string::npos);
}

// -- reshape: ONNX Reshape (0 copies the input dim unless allowzero; one -1) --

ShapeVec Reshape(ShapeVec data, std::vector<int64_t> newshape, std::vector<int64_t> attrs = {}) {
  return OutputOf("dyn.reshape", {In::Shape(std::move(data)), In::Vector(std::move(newshape))}, std::move(attrs));
}

TEST(Reshape, InfersTheMinusOne) {
  EXPECT_EQ(Reshape({2, 3, 4}, {-1, 4}), (ShapeVec{6, 4}));
  EXPECT_EQ(Reshape({2, 3, 4}, {4, -1}), (ShapeVec{4, 6}));
  EXPECT_EQ(Reshape({2, 3, 4}, {-1}), (ShapeVec{24}));
  EXPECT_EQ(Reshape({2, 3, 4}, {6, 4}), (ShapeVec{6, 4}));
}

TEST(Reshape, ZeroCopiesTheInputDim) {
  EXPECT_EQ(Reshape({2, 3, 4}, {0, -1}), (ShapeVec{2, 12}));
  EXPECT_EQ(Reshape({2, 3, 4}, {4, 0, -1}), (ShapeVec{4, 3, 2}));
  // allowzero=1: a literal 0.
  EXPECT_EQ(Reshape({0, 5}, {0, 7}, {1}), (ShapeVec{0, 7}));
}

TEST(Reshape, ZeroSizedData) {
  EXPECT_EQ(Reshape({0, 5}, {-1, 5}), (ShapeVec{0, 5}));
  EXPECT_EQ(Reshape({0, 5}, {5, 0}, {1}), (ShapeVec{5, 0}));
  // Without allowzero the 0 copies data's 5: 25 elements, not 0.
  EXPECT_NE(ValueError([] { Reshape({0, 5}, {5, 0}); }).find("into (5, 5)"), std::string::npos);
  // -1 with the other dims multiplying to 0 would fit any value: refused, as numpy does.
  EXPECT_NE(ValueError([] { Reshape({0, 5}, {-1, 0}, {1}); }).find("cannot infer the -1"), std::string::npos);
}

TEST(Reshape, RejectsBadRequests) {
  EXPECT_NE(ValueError([] { Reshape({2, 3}, {-1, -1}); }).find("more than one -1"), std::string::npos);
  EXPECT_NE(ValueError([] { Reshape({2, 3}, {4, 2}); }).find("cannot reshape data"), std::string::npos);
  EXPECT_NE(ValueError([] { Reshape({2, 3}, {-2, 3}); }).find("only -1 may be negative"), std::string::npos);
  EXPECT_NE(ValueError([] { Reshape({2, 3}, {-1, 4}); }).find("cannot infer the -1"), std::string::npos);
  EXPECT_NE(ValueError([] { Reshape({6}, {2, 0}); }).find("has only 1 dims"), std::string::npos);
}

// -- topk: data's shape with the axis replaced by k, for values and indices --

TEST(TopK, ReplacesTheAxisByK) {
  std::vector<ShapeVec> out = OutputsOf("dyn.topk", {In::Shape({4, 10}), In::Scalar(3)});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], (ShapeVec{4, 3}));
  EXPECT_EQ(out[1], (ShapeVec{4, 3}));
  EXPECT_EQ(OutputsOf("relax.topk", {In::Shape({4, 10}), In::Scalar(2)}, {0})[0], (ShapeVec{2, 10}));
  EXPECT_EQ(OutputsOf("relax.topk", {In::Shape({4, 10}), In::Scalar(0)}, {-1})[1], (ShapeVec{4, 0}));
  EXPECT_EQ(OutputsOf("relax.topk", {In::Shape({4, 0}), In::Scalar(0)})[0], (ShapeVec{4, 0}));
}

TEST(TopK, RejectsKOutsideTheAxis) {
  EXPECT_NE(ValueError([] {
              OutputsOf("relax.topk", {In::Shape({4, 10}), In::Scalar(11)});
            }).find("k is 11"),
            std::string::npos);
  EXPECT_NE(ValueError([] {
              OutputsOf("relax.topk", {In::Shape({4, 10}), In::Scalar(-1)});
            }).find("k is -1"),
            std::string::npos);
  ValueError([] { OutputsOf("relax.topk", {In::Shape({}), In::Scalar(1)}); });
}

// -- broadcast: numpy's rule on shapes only -----------------------------------

TEST(Broadcast, NumpyRule) {
  EXPECT_EQ(OutputOf("shapefn.broadcast", {In::Shape({3, 1, 5}), In::Shape({4, 1})}), (ShapeVec{3, 4, 5}));
  EXPECT_EQ(OutputOf("shapefn.broadcast", {In::Shape({}), In::Shape({2, 3})}), (ShapeVec{2, 3}));
  EXPECT_EQ(OutputOf("shapefn.broadcast", {In::Shape({0, 1}), In::Shape({1, 7})}), (ShapeVec{0, 7}));
  EXPECT_EQ(OutputOf("shapefn.broadcast3", {In::Shape({2, 1, 1}), In::Shape({3, 1}), In::Shape({4})}),
            (ShapeVec{2, 3, 4}));
  EXPECT_NE(ValueError([] {
              OutputOf("shapefn.broadcast", {In::Shape({2, 3}), In::Shape({4, 3})});
            }).find("do not broadcast"),
            std::string::npos);
}

TEST(BroadcastTo, TakesTheRequestedShape) {
  EXPECT_EQ(OutputOf("dyn.broadcast_to", {In::Shape({3, 1}), In::Vector({2, 3, 4})}), (ShapeVec{2, 3, 4}));
  EXPECT_EQ(OutputOf("dyn.broadcast_to", {In::Shape({1}), In::Vector({0})}), (ShapeVec{0}));
  ValueError([] { OutputOf("dyn.broadcast_to", {In::Shape({3, 2}), In::Vector({3, 4})}); });
  ValueError([] { OutputOf("dyn.broadcast_to", {In::Shape({2, 3}), In::Vector({3})}); });
  // bidirectional=1 (ONNX Expand): the target is broadcast by the data too.
  EXPECT_EQ(OutputOf("dyn.broadcast_to", {In::Shape({3, 1}), In::Vector({4})}, {1}), (ShapeVec{3, 4}));
}

// -- tile: numpy.tile, the shorter of shape and repeats padded with 1s --------

TEST(Tile, NumpyRule) {
  EXPECT_EQ(OutputOf("dyn.tile", {In::Shape({2, 3}), In::Vector({2, 2})}), (ShapeVec{4, 6}));
  EXPECT_EQ(OutputOf("dyn.tile", {In::Shape({2, 3}), In::Vector({3})}), (ShapeVec{2, 9}));
  EXPECT_EQ(OutputOf("dyn.tile", {In::Shape({3}), In::Vector({2, 1, 2})}), (ShapeVec{2, 1, 6}));
  EXPECT_EQ(OutputOf("dyn.tile", {In::Shape({2, 3}), In::Vector({0, 1})}), (ShapeVec{0, 3}));
  ValueError([] { OutputOf("dyn.tile", {In::Shape({2}), In::Vector({-1})}); });
}

// -- zeros / full: the output shape is the shape value -------------------------

TEST(Full, ShapeIsTheValue) {
  EXPECT_EQ(OutputOf("dyn.zeros", {In::Vector({2, 0, 5})}), (ShapeVec{2, 0, 5}));
  EXPECT_EQ(OutputOf("relax.ones", {In::Vector({})}), (ShapeVec{}));
  EXPECT_EQ(OutputOf("dyn.full", {In::Shape({}), In::Vector({3, 4})}), (ShapeVec{3, 4}));
  ValueError([] { OutputOf("dyn.zeros", {In::Vector({2, -2})}); });
  // 2^62 * 4 elements overflow int64.
  ValueError([] { OutputOf("dyn.zeros", {In::Vector({int64_t{1} << 62, 4})}); });
}

// -- arange: len(range(start, stop, step)) for integers ------------------------

TEST(Arange, IntegerLength) {
  auto arange = [](int64_t start, int64_t stop, int64_t step) {
    return OutputOf("dyn.arange", {In::Scalar(start), In::Scalar(stop), In::Scalar(step)});
  };
  EXPECT_EQ(arange(0, 10, 3), (ShapeVec{4}));   // 0,3,6,9
  EXPECT_EQ(arange(10, 0, -3), (ShapeVec{4}));  // 10,7,4,1
  EXPECT_EQ(arange(5, 5, 1), (ShapeVec{0}));
  EXPECT_EQ(arange(5, 0, 1), (ShapeVec{0}));
  // The distance overflows int64 but not the length.
  EXPECT_EQ(arange(INT64_MIN, INT64_MAX, INT64_MAX), (ShapeVec{3}));
  EXPECT_NE(ValueError([&] { arange(0, 1, 0); }).find("step is 0"), std::string::npos);
  EXPECT_NE(ValueError([&] { arange(INT64_MIN, INT64_MAX, 1); }).find("overflows int64"), std::string::npos);
}

}  // namespace
}  // namespace shapefn
