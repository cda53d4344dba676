// The Device base (copy-engine statistics) and the host CPU device.
#include "shapefn/device.h"

#include <cstdlib>
#include <cstring>

#include "shapefn/error.h"

namespace shapefn {

CopyEngineStats Device::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

void Device::ResetStats() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = CopyEngineStats();
}

void Device::Record(bool to_host, size_t nbytes, double seconds) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  if (to_host) {
    stats_.d2h_copies += 1;
    stats_.d2h_bytes += static_cast<int64_t>(nbytes);
  } else {
    stats_.h2d_copies += 1;
    stats_.h2d_bytes += static_cast<int64_t>(nbytes);
  }
  stats_.modelled_transfer_s += seconds;
}

void Device::ReadCheckWords(int64_t* host_dst, const void* src, size_t nbytes) { std::memcpy(host_dst, src, nbytes); }

void Device::ClearCheckWords(void* dst, size_t nbytes) { std::memset(dst, 0, nbytes); }

void Device::RecordSync() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.syncs += 1;
}

namespace {

class HostCpu final : public Device {
 public:
  std::string name() const override { return "host"; }
  bool is_host() const override { return true; }
  DLDevice kernel_device() const override { return DLDevice{kDLCPU, 0}; }

  void* Alloc(size_t nbytes, size_t alignment) override {
    size_t size = (nbytes + alignment - 1) / alignment * alignment;
    void* ptr = std::aligned_alloc(alignment, size == 0 ? alignment : size);
    if (ptr == nullptr) Fail(ErrorKind::kMemory, "host: out of memory allocating " + std::to_string(nbytes) + " bytes");
    return ptr;
  }
  void Free(void* ptr) override { std::free(ptr); }
  // Host-to-host copies are not transfers: nothing is recorded.
  double CopyToHost(void* dst, const void* src, size_t n) override {
    if (n) std::memcpy(dst, src, n);
    return 0.0;
  }
  double CopyFromHost(void* dst, const void* src, size_t n) override {
    if (n) std::memcpy(dst, src, n);
    return 0.0;
  }
  void Sync() override {}
};

}  // namespace

std::shared_ptr<Device> HostDevice() {
  static std::shared_ptr<Device> host = std::make_shared<HostCpu>();
  return host;
}

uint8_t ReadByteFromHost(const void* ptr) { return *static_cast<const volatile uint8_t*>(ptr); }

}  // namespace shapefn
