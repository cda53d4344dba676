#include "shapefn/tensor.h"

#include <limits>
#include <optional>

#include "shapefn/error.h"

namespace shapefn {

namespace {
constexpr size_t kAlignment = 64;
size_t RoundSize(size_t n) {
  // Power-of-two-ish classes (4 per octave) bound waste at 25% and let blocks
  // of nearby sizes be reused across calls with different shapes.
  if (n <= 256) return 256;
  size_t p = 256;
  while (p < n) p <<= 1;
  size_t quarter = p / 8;
  size_t r = p / 2;
  while (r < n) r += quarter;
  return r;
}
}  // namespace

MemoryPool::~MemoryPool() {
  for (auto& kv : free_) {
    for (void* p : kv.second) device_->Free(p);
  }
}

void* MemoryPool::Acquire(size_t nbytes, size_t* rounded) {
  size_t size = RoundSize(nbytes);
  *rounded = size;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += size;
    if (in_use_ > high_water_) high_water_ = in_use_;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  try {
    return device_->Alloc(size, kAlignment);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= size;
    throw;
  }
}

void MemoryPool::Release(void* ptr, size_t rounded) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ -= rounded;
  free_[rounded].push_back(ptr);
}

size_t MemoryPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t MemoryPool::high_water_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return high_water_;
}

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

DLTensor TensorObj::AsDLTensor() const {
  DLTensor t;
  // Kernels compiled by TVM expect byte_offset 0, so the offset is folded
  // into the pointer (fine for every device with pointer arithmetic).
  t.data = data();
  t.device = storage->device->kernel_device();
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = const_cast<int64_t*>(shape.data());
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

size_t CheckedNBytes(const ShapeVec& shape, DLDataType dtype) {
  size_t elem_bits = static_cast<size_t>(dtype.bits) * dtype.lanes;
  unsigned __int128 total = 1;
  for (int64_t d : shape) {
    if (d < 0) Fail(ErrorKind::kValue, "negative dimension " + std::to_string(d) + " in a tensor shape");
    total *= static_cast<unsigned __int128>(d);
    if (total > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
      Fail(ErrorKind::kValue, "tensor size overflows int64");
    }
  }
  total = (total * elem_bits + 7) / 8;
  if (total > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    Fail(ErrorKind::kValue, "tensor size in bytes overflows int64");
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
  for (auto [prefix, code] : {std::pair<const char*, uint8_t>{"uint", kDLUInt}, {"int", kDLInt},
                              {"float", kDLFloat}, {"bfloat", kDLBfloat}}) {
    if (auto dt = parse(prefix, code)) return *dt;
  }
  Fail(ErrorKind::kType, "unsupported dtype '" + text + "'");
}

TensorRef AllocTensor(const std::shared_ptr<MemoryPool>& pool, const ShapeVec& shape,
                      DLDataType dtype) {
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
}

}  // namespace shapefn
