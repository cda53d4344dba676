#include "idle_tensors.h"

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
  MemoryPool* pool = t->storage->pool.get();
  if (pool == nullptr || std::find(owned_.begin(), owned_.end(), pool) == owned_.end()) return;
  const size_t size_class = t->storage->nbytes;
  pool->MarkIdle(size_class);
  if (entries_.size() == kCapacity) {
    Release(entries_.front());
    entries_.erase(entries_.begin());
  }
  entries_.push_back(Entry{std::move(t), pool, size_class});
}

TensorRef IdleTensors::Take(const MemoryPool& pool, const ShapeVec& shape, DLDataType dtype) {
  if (entries_.empty()) return nullptr;
  auto take = [&](size_t i) {
    TensorRef t = std::move(entries_[i].tensor);
    t->storage->pool->MarkInUse(entries_[i].size_class);
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
    return t;
  };
  // A tensor of the same shape and dtype (an op repeated in a loop or a
  // chain) needs no size computed and keeps its shape.
  for (size_t i = entries_.size(); i-- > 0;) {
    if (entries_[i].pool != &pool) continue;
    const TensorObj& t = *entries_[i].tensor;
    if (SameShape(t.shape, shape) && t.dtype.code == dtype.code && t.dtype.bits == dtype.bits &&
        t.dtype.lanes == dtype.lanes) {
      return take(i);
    }
  }
  const size_t size_class = MemoryPool::SizeClass(CheckedNBytes(shape, dtype));
  for (size_t i = entries_.size(); i-- > 0;) {
    if (entries_[i].pool != &pool || entries_[i].size_class != size_class) continue;
    TensorRef t = take(i);
    t->shape = shape;  // reuses the vector's capacity
    t->dtype = dtype;
    return t;
  }
  return nullptr;
}

void IdleTensors::Release(Entry& entry) {
  entry.tensor->storage->pool->MarkInUse(entry.size_class);
  entry.tensor.reset();  // its storage goes back to the pool
}

void IdleTensors::Clear() {
  for (Entry& entry : entries_) Release(entry);
  entries_.clear();
}

}  // namespace shapefn
