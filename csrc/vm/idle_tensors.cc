#include "shapefn/idle_tensors.h"

#include <algorithm>

namespace shapefn {

namespace {
// (operator== calls memcmp: a call for a few dims.)
bool SameShape(const ShapeVec& a, const ShapeVec& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}
}  // namespace

void IdleTensors::Keep(TensorRef& t) {
  // use_count() is exact here: every other holder would be a register of this
  // VM or a Python object, and either keeps the count above one.
  if (t.use_count() != 1 || t->storage.use_count() != 1 || t->byte_offset != 0) return;
  const MemoryPool* pool = t->storage->pool.get();
  if (pool == nullptr || std::find(owned_.begin(), owned_.end(), pool) == owned_.end()) return;
  t->storage->pool->MarkIdle(t->storage->nbytes);
  if (tensors_.size() == kCapacity) {
    TensorRef& oldest = tensors_.front();
    oldest->storage->pool->MarkInUse(oldest->storage->nbytes);
    tensors_.erase(tensors_.begin());  // its storage goes back to the pool
  }
  tensors_.push_back(std::move(t));
}

TensorRef IdleTensors::Take(const MemoryPool& pool, const ShapeVec& shape, DLDataType dtype) {
  if (tensors_.empty()) return nullptr;
  auto take = [&](size_t i) {
    TensorRef t = std::move(tensors_[i]);
    tensors_.erase(tensors_.begin() + static_cast<std::ptrdiff_t>(i));
    t->storage->pool->MarkInUse(t->storage->nbytes);
    return t;
  };
  // A tensor of the same shape and dtype (an op repeated in a loop or a
  // chain) needs no size computed and keeps its shape.
  for (size_t i = tensors_.size(); i-- > 0;) {
    const TensorObj& t = *tensors_[i];
    if (t.storage->pool.get() == &pool && SameShape(t.shape, shape) && t.dtype.code == dtype.code &&
        t.dtype.bits == dtype.bits && t.dtype.lanes == dtype.lanes) {
      return take(i);
    }
  }
  const size_t size_class = MemoryPool::SizeClass(CheckedNBytes(shape, dtype));
  for (size_t i = tensors_.size(); i-- > 0;) {
    const Storage& storage = *tensors_[i]->storage;
    if (storage.pool.get() != &pool || storage.nbytes != size_class) continue;
    TensorRef t = take(i);
    t->shape = shape;  // reuses the vector's capacity
    t->dtype = dtype;
    return t;
  }
  return nullptr;
}

void IdleTensors::Clear() {
  for (TensorRef& t : tensors_) t->storage->pool->MarkInUse(t->storage->nbytes);
  tensors_.clear();
}

}  // namespace shapefn
