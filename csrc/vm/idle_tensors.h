// Tensors a VM has freed (`kill`) kept whole for its next allocation of the
// same size class: an unfused chain of small ops frees and allocates a tensor
// per op, and reusing the freed one skips two heap objects, the shape vector
// and the pool's lock — most of what an op cost the VM.
#pragma once

#include <vector>

#include "shapefn/tensor.h"

namespace shapefn {

// Used by one thread at a time (the VM's running call). A kept tensor's
// block counts as idle in its pool (`MemoryPool::bytes_in_use` excludes it)
// until it is taken again.
class IdleTensors {
 public:
  IdleTensors() = default;
  IdleTensors(const IdleTensors&) = delete;
  IdleTensors& operator=(const IdleTensors&) = delete;
  ~IdleTensors() { Clear(); }

  // Tensors of `pool` may be kept: the owner of the IdleTensors must be the
  // pool's only user of MarkIdle / MarkInUse.
  void Own(const MemoryPool* pool) { owned_.push_back(pool); }
  // Keeps `t` (leaving it null) when nothing else references it or its
  // storage and its storage is a whole block of an owned pool; otherwise
  // leaves it.
  void Keep(TensorRef& t);
  // A kept tensor of `pool` whose block fits `shape` and `dtype` exactly
  // (same size class), given that shape and dtype; null when there is none.
  // Throws like AllocTensor for a shape no tensor can have.
  TensorRef Take(const MemoryPool& pool, const ShapeVec& shape, DLDataType dtype);
  // Returns every kept block to its pool.
  void Clear();

 private:
  // Few live sizes alternate in practice; beyond this many the oldest goes back to its pool.
  static constexpr size_t kCapacity = 16;
  struct Entry {
    TensorRef tensor;
    const MemoryPool* pool;  // (copied out of the tensor so a search reads one array)
    size_t size_class;
  };
  void Release(Entry& entry);

  std::vector<Entry> entries_;
  std::vector<const MemoryPool*> owned_;
};

}  // namespace shapefn
