#include "shapefn/tensor.h"

#include <limits>
#include <optional>

#include "shapefn/error.h"

namespace shapefn {

namespace {
constexpr size_t kAlignment = kKernelBufferAlignment;
}  // namespace

size_t MemoryPool::SizeClass(size_t n) {
  // Power-of-two-ish classes (4 per octave) bound waste at 25% and let blocks
  // of nearby sizes be reused across calls with different shapes.
  if (n <= 256) return 256;
  const int log2_ceil = 64 - __builtin_clzll(n - 1);  // the octave (p/2, p], p = 2^log2_ceil
  const size_t half = size_t{1} << (log2_ceil - 1);
  const int step_log2 = log2_ceil - 3;  // 4 classes per octave: steps of p/8
  const size_t rounded = half + ((((n - half - 1) >> step_log2) + 1) << step_log2);
  return rounded < n ? n : rounded;  // (the top octave's last classes wrap past SIZE_MAX)
}

MemoryPool::~MemoryPool() {
  for (auto& kv : free_) {
    for (void* p : kv.second) device_->Free(p);
  }
}

void* MemoryPool::Acquire(size_t nbytes, size_t* rounded) {
  size_t size = SizeClass(nbytes);
  *rounded = size;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      CountAcquired(size);
      return p;
    }
  }
  // Counted only once it succeeded: a failed allocation (out of memory) must
  // not raise the high-water mark.
  void* p = device_->Alloc(size, kAlignment);
  device_allocations_.fetch_add(1, std::memory_order_relaxed);
  CountAcquired(size);
  return p;
}

// The byte counts are atomics rather than under mutex_: IdleTensors moves
// blocks in and out of use once per op, and a lock there costs more than the op.
// in_use_ includes idle blocks; what is really in use is in_use_ - idle_.
void MemoryPool::CountAcquired(size_t size) {
  in_use_.fetch_add(size, std::memory_order_relaxed);
  RaiseHighWater();
}

void MemoryPool::Release(void* ptr, size_t rounded) {
  in_use_.fetch_sub(rounded, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  free_[rounded].push_back(ptr);
}

size_t MemoryPool::bytes_in_use() const {
  return in_use_.load(std::memory_order_relaxed) - idle_.load(std::memory_order_relaxed);
}

size_t MemoryPool::high_water_bytes() const { return high_water_.load(std::memory_order_relaxed); }

Storage::~Storage() {
  if (pool) {
    pool->Release(data, nbytes);
  } else if (release) {
    release(release_context);
  }
}

int64_t TensorObj::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t TensorObj::nbytes() const { return CheckedNBytes(shape, dtype); }

namespace {
std::string DescribeTensor(const ShapeVec& shape, DLDataType dtype) {
  std::string s = "a " + DTypeToString(dtype) + " tensor of shape [";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
}  // namespace

size_t CheckedNBytes(const ShapeVec& shape, DLDataType dtype) {
  size_t elem_bits = static_cast<size_t>(dtype.bits) * dtype.lanes;
  unsigned __int128 total = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      Fail(ErrorKind::kValue, "negative dimension " + std::to_string(d) + " in " + DescribeTensor(shape, dtype));
    }
  }
  for (int64_t d : shape) {
    total *= static_cast<unsigned __int128>(d);
    if (total > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
      Fail(ErrorKind::kValue, "the element count of " + DescribeTensor(shape, dtype) + " overflows int64");
    }
  }
  total = (total * elem_bits + 7) / 8;
  if (total > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    Fail(ErrorKind::kValue, "the size in bytes of " + DescribeTensor(shape, dtype) + " overflows int64");
  }
  return static_cast<size_t>(total);
}

std::string DTypeToString(DLDataType dtype) {
  std::string base;
  switch (dtype.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLBool: return "bool";
    default: base = "code" + std::to_string(dtype.code) + "_"; break;
  }
  if (dtype.code == kDLUInt && dtype.bits == 1) return "bool";
  std::string s = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) s += "x" + std::to_string(dtype.lanes);
  return s;
}

DLDataType DTypeFromString(const std::string& text) {
  auto parse = [&](const std::string& prefix, uint8_t code) -> std::optional<DLDataType> {
    if (text.rfind(prefix, 0) != 0) return std::nullopt;
    std::string digits = text.substr(prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    int bits = std::stoi(digits);
    if (bits != 8 && bits != 16 && bits != 32 && bits != 64) return std::nullopt;
    return DLDataType{code, static_cast<uint8_t>(bits), 1};
  };
  if (text == "bool") return DLDataType{kDLBool, 8, 1};
  for (auto [prefix, code] : {std::pair<const char*, uint8_t>{"uint", kDLUInt},
                              {"int", kDLInt},
                              {"float", kDLFloat},
                              {"bfloat", kDLBfloat}}) {
    if (auto dt = parse(prefix, code)) return *dt;
  }
  Fail(ErrorKind::kType, "unsupported dtype '" + text + "'");
}

TensorRef AllocTensor(const std::shared_ptr<MemoryPool>& pool, const ShapeVec& shape, DLDataType dtype) {
  size_t nbytes = CheckedNBytes(shape, dtype);
  auto storage = std::make_shared<Storage>();
  storage->device = pool->device();
  storage->data = pool->Acquire(nbytes, &storage->nbytes);
  storage->pool = pool;
  auto t = std::make_shared<TensorObj>();
  t->storage = std::move(storage);
  t->shape = shape;
  t->dtype = dtype;
  return t;
}

TensorRef WrapHostTensor(const DLTensor& tensor, void (*release)(void*), void* context) {
  auto storage = std::make_shared<Storage>();
  storage->release = release;
  storage->release_context = context;
  storage->device = HostDevice();
  storage->data = tensor.data;
  auto t = std::make_shared<TensorObj>();
  t->shape.assign(tensor.shape, tensor.shape + tensor.ndim);
  t->dtype = tensor.dtype;
  t->byte_offset = static_cast<size_t>(tensor.byte_offset);
  storage->nbytes = t->byte_offset + CheckedNBytes(t->shape, t->dtype);
  t->storage = std::move(storage);
  return t;
}

void CopyTensorToHost(const TensorObj& tensor, void* host_dst) {
  tensor.device()->CopyToHost(host_dst, tensor.data(), tensor.nbytes());
  tensor.device()->Sync();
  if (tensor.checks) {
    for (const auto& check : *tensor.checks) check->Verify();
  }
}

}  // namespace shapefn
