// Tensors the VM owns: storage from a per-device memory pool (or memory a
// caller lent), a shape, a dtype. A kernel sees one as a DLTensor.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shapefn/device.h"
#include "shapefn/shape_func.h"

namespace shapefn {

// Caches freed blocks by rounded size so steady-state calls allocate nothing
// from the device.
class MemoryPool {
 public:
  explicit MemoryPool(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  void* Acquire(size_t nbytes, size_t* rounded);
  void Release(void* ptr, size_t rounded);
  // The block size an allocation of `nbytes` gets (its size class).
  static size_t SizeClass(size_t nbytes);
  // A block the pool's owner (its VM, one call at a time) keeps for reuse
  // without releasing it (IdleTensors) stops and starts counting as in use.
  // Only the owner calls these, so they take no lock and no atomic
  // read-modify-write: they run once per op.
  void MarkIdle(size_t rounded) {
    idle_.store(idle_.load(std::memory_order_relaxed) + rounded, std::memory_order_relaxed);
  }
  void MarkInUse(size_t rounded) {
    idle_.store(idle_.load(std::memory_order_relaxed) - rounded, std::memory_order_relaxed);
    RaiseHighWater();
  }
  const std::shared_ptr<Device>& device() const { return device_; }
  size_t bytes_in_use() const;
  size_t high_water_bytes() const;
  // Blocks taken from the device rather than the pool (the profiler tells
  // pool hits from device allocations by this).
  int64_t device_allocations() const { return device_allocations_.load(std::memory_order_relaxed); }

 private:
  void CountAcquired(size_t size);
  void RaiseHighWater() {
    const size_t now = in_use_.load(std::memory_order_relaxed) - idle_.load(std::memory_order_relaxed);
    size_t high = high_water_.load(std::memory_order_relaxed);
    while (now > high && !high_water_.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
    }
  }

  std::shared_ptr<Device> device_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::atomic<size_t> in_use_{0}, high_water_{0};
  std::atomic<size_t> idle_{0};  // the part of in_use_ kept idle by the owner; written by it alone
  std::atomic<int64_t> device_allocations_{0};
};

// TVM's compiled kernels assume every buffer starts at a multiple of this
// many bytes (its kAllocAlignment) and use aligned vector loads of up to
// that width: the VM allocates so, and copies arguments that are not.
constexpr size_t kKernelBufferAlignment = 64;

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<Device> device;
  // Exactly one of the two owns `data`.
  std::shared_ptr<MemoryPool> pool;
  void (*release)(void* context) = nullptr;
  void* release_context = nullptr;

  ~Storage();
};

// A check of device work that a tensor's values depend on (an index a
// kernel read from data was in range) whose outcome the host has not read
// yet: the device writes it, the host can read it once the device has
// synced. Reading the tensor to the host verifies its checks first.
class DeviceCheck {
 public:
  virtual ~DeviceCheck() = default;
  // The device whose work is checked.
  virtual const Device& device() const = 0;
  // Called once the device has synced: throws Error(kIndex) naming the node,
  // the index and its bounds when the check failed.
  virtual void Verify() = 0;
};
using DeviceChecks = std::vector<std::shared_ptr<DeviceCheck>>;

struct TensorObj {
  std::shared_ptr<Storage> storage;
  size_t byte_offset = 0;
  ShapeVec shape;
  DLDataType dtype{};
  // The checks its values wait on (null for none: results of calls that
  // synced after their last checked kernel, inputs, constants).
  std::shared_ptr<const DeviceChecks> checks;

  const std::shared_ptr<Device>& device() const { return storage->device; }
  void* data() const { return static_cast<char*>(storage->data) + byte_offset; }
  int64_t numel() const;
  size_t nbytes() const;
  // The view a kernel receives (device relabelled as the kernel device).
  // Inline: built once per tensor argument of every kernel call.
  DLTensor AsDLTensor() const {
    // Kernels compiled by TVM expect byte_offset 0, so the offset is folded
    // into the pointer (fine for every device with pointer arithmetic).
    return DLTensor{data(), storage->device->kernel_device(),   static_cast<int32_t>(shape.size()),
                    dtype,  const_cast<int64_t*>(shape.data()), nullptr,
                    0};
  }
  // The same view labelled CPU: what host code (a shape function, a
  // readback's destination) reads once the data is host-visible.
  DLTensor AsHostDLTensor() const {
    DLTensor d = AsDLTensor();
    d.device = DLDevice{kDLCPU, 0};
    return d;
  }
};

using TensorRef = std::shared_ptr<TensorObj>;

// Bytes of `numel` elements of `dtype`; throws Error(kValue) on overflow.
size_t CheckedNBytes(const ShapeVec& shape, DLDataType dtype);
std::string DTypeToString(DLDataType dtype);
DLDataType DTypeFromString(const std::string& text);

TensorRef AllocTensor(const std::shared_ptr<MemoryPool>& pool, const ShapeVec& shape, DLDataType dtype);
// Wraps host memory a caller lends; `release(context)` runs when the VM is done.
TensorRef WrapHostTensor(const DLTensor& tensor, void (*release)(void*), void* context);
// Copies a tensor's bytes into host memory (counts on the device's copy
// engine), then verifies the tensor's checks: throws Error(kIndex) when the
// work that computed it read an index out of range.
void CopyTensorToHost(const TensorObj& tensor, void* host_dst);

}  // namespace shapefn
