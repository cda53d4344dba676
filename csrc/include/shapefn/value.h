// A VM register: empty, an int64, an int64 shape vector, a tensor, or a tuple.
#pragma once

#include <memory>
#include <vector>

#include "shapefn/tensor.h"

namespace shapefn {

struct Value;

// Destroys a tuple's fields without recursing into nested tuples: a program
// may nest tuples as deep as it runs (`r = make_tuple [r]` in a loop), and
// recursive destruction of a million levels would overflow the stack.
struct TupleDeleter {
  void operator()(std::vector<Value>* fields) const;
};

struct Value {
  enum class Kind : uint8_t { kEmpty, kInt, kShape, kTensor, kTuple };
  Kind kind = Kind::kEmpty;
  int64_t i = 0;
  ShapeVec shape;
  TensorRef tensor;
  std::shared_ptr<std::vector<Value>> tuple;

  static Value Int(int64_t v) {
    Value r;
    r.kind = Kind::kInt;
    r.i = v;
    return r;
  }
  static Value Shape(ShapeVec s) {
    Value r;
    r.kind = Kind::kShape;
    r.shape = std::move(s);
    return r;
  }
  static Value Tensor(TensorRef t) {
    Value r;
    r.kind = Kind::kTensor;
    r.tensor = std::move(t);
    return r;
  }
  static Value Tuple(std::vector<Value> fields) {
    Value r;
    r.kind = Kind::kTuple;
    r.tuple = std::shared_ptr<std::vector<Value>>(new std::vector<Value>(std::move(fields)), TupleDeleter{});
    return r;
  }
};

const char* KindName(Value::Kind kind);

}  // namespace shapefn
