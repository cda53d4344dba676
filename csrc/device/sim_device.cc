// `sim`: a simulated accelerator. Its memory is a separate arena; kernels run
// on it as CPU kernels; every transfer goes through a copy engine that counts
// and adds a modelled PCIe-like time. Strict mode makes the arena unreadable
// while host shape functions run.
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <map>

#include "shapefn/device.h"
#include "shapefn/error.h"

namespace shapefn {
namespace {

class SimDevice final : public Device {
 public:
  explicit SimDevice(const SimConfig& config) : config_(config) {
    if (config.bandwidth_bytes_per_s <= 0) Fail(ErrorKind::kValue, "sim: bandwidth must be positive");
    if (config.latency_s < 0) Fail(ErrorKind::kValue, "sim: latency must be non-negative");
    size_t page = 4096;
    size_ = (config.arena_bytes + page - 1) / page * page;
    if (size_ == 0) Fail(ErrorKind::kValue, "sim: arena size must be positive");
    void* base = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) Fail(ErrorKind::kRuntime, "sim: cannot reserve the device arena");
    base_ = static_cast<char*>(base);
    free_[0] = size_;
  }
  ~SimDevice() override { munmap(base_, size_); }

  std::string name() const override { return "sim"; }
  DLDevice kernel_device() const override { return DLDevice{kDLCPU, 0}; }

  void* Alloc(size_t nbytes, size_t alignment) override {
    size_t size = RoundUp(nbytes == 0 ? 1 : nbytes, kGranule);
    std::lock_guard<std::mutex> lock(mutex_);
    // First fit over free ranges kept in address order; the VM's pools make
    // this path rare.
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      size_t start = RoundUp(it->first, alignment < kGranule ? kGranule : alignment);
      size_t end = it->first + it->second;
      if (start + size > end) continue;
      size_t range_start = it->first;
      free_.erase(it);
      if (start > range_start) free_[range_start] = start - range_start;
      if (start + size < end) free_[start + size] = end - (start + size);
      used_[start] = size;
      return base_ + start;
    }
    Fail(ErrorKind::kMemory, "sim: out of device memory allocating " + std::to_string(nbytes) + " bytes (arena " +
                                 std::to_string(size_) + " bytes)");
  }

  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    size_t offset = static_cast<char*>(ptr) - base_;
    auto it = used_.find(offset);
    if (it == used_.end()) return;
    size_t size = it->second;
    used_.erase(it);
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && next->first == offset + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    free_[offset] = size;
  }

  double CopyToHost(void* dst, const void* src, size_t n) override {
    auto exclusive = LockIfStrict();
    if (n) std::memcpy(dst, src, n);
    return Transfer(true, n);
  }
  double CopyFromHost(void* dst, const void* src, size_t n) override {
    auto exclusive = LockIfStrict();
    if (n) std::memcpy(dst, src, n);
    return Transfer(false, n);
  }
  void Sync() override { RecordSync(); }
  // Host-mapped memory on a real device: read in place, not a modelled transfer.
  void ReadCheckWords(int64_t* dst, const void* src, size_t n) override {
    auto exclusive = LockIfStrict();
    std::memcpy(dst, src, n);
  }
  void ClearCheckWords(void* dst, size_t n) override {
    auto exclusive = LockIfStrict();
    std::memset(dst, 0, n);
  }

  void BeginHostShapeWork() override {
    if (config_.strict && strict_depth_++ == 0) mprotect(base_, size_, PROT_NONE);
  }
  void EndHostShapeWork() override {
    if (config_.strict && --strict_depth_ == 0) mprotect(base_, size_, PROT_READ | PROT_WRITE);
  }
  bool guards_host_shape_work() const override { return config_.strict; }
  std::recursive_mutex* exclusive_use_mutex() override { return config_.strict ? &exclusive_use_ : nullptr; }

 private:
  static constexpr size_t kGranule = 256;
  static size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
  std::unique_lock<std::recursive_mutex> LockIfStrict() {
    return config_.strict ? std::unique_lock<std::recursive_mutex>(exclusive_use_)
                          : std::unique_lock<std::recursive_mutex>();
  }

  double Transfer(bool to_host, size_t n) {
    double seconds = config_.latency_s + static_cast<double>(n) / config_.bandwidth_bytes_per_s;
    Record(to_host, n, seconds);
    if (config_.realtime) {
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    return seconds;
  }

  SimConfig config_;
  char* base_ = nullptr;
  size_t size_ = 0;
  std::mutex mutex_;
  std::map<size_t, size_t> free_;  // offset -> size
  std::map<size_t, size_t> used_;
  int strict_depth_ = 0;
  std::recursive_mutex exclusive_use_;
};

}  // namespace

std::shared_ptr<Device> MakeSimDevice(const SimConfig& config) { return std::make_shared<SimDevice>(config); }

}  // namespace shapefn
