// Device discovery, device addresses and copies of shapefn's OpenCL runtime.
#include "opencl_runtime.h"

#include <cstring>

#include "event_recorder.h"
#include "shapefn/error.h"
#include "shapefn/opencl.h"

namespace shapefn::opencl {
namespace {

// Device addresses start here: bit 62 set and bit 63 clear is outside the
// canonical x86-64 (and aarch64) user address space, so a host access faults.
constexpr uintptr_t kFirstAddress = uintptr_t{1} << 62;
constexpr uintptr_t kAddressGranule = 4096;
// Host memory kept for staging writes between uses.
constexpr size_t kSpareStagingBytes = size_t{512} << 20;
// Host memory staged for writes the device has not done yet: past this, a
// write waits for the oldest (the host outrunning the device cannot grow
// memory without bound).
constexpr size_t kPendingStagingBytes = size_t{1} << 30;

uintptr_t RoundUp(uintptr_t value, uintptr_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

struct StagingBuffer {
  std::unique_ptr<char[]> data;
  size_t capacity = 0;
};

struct Runtime::Device {
  DeviceInfo info;
  cl_device_id id = nullptr;
  std::once_flag opened;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  std::once_flag profiling_opened;
  cl_command_queue profiling_queue = nullptr;
  // Host copies of writes still in flight, kept until their event completes,
  // then kept for later writes (up to kSpareStagingBytes): a fresh buffer
  // costs a page fault per page, as much as the copy itself.
  std::mutex uploads_mutex;
  std::vector<std::pair<cl_event, StagingBuffer>> uploads;
  std::multimap<size_t, std::unique_ptr<char[]>> spare_staging;  // by capacity
  size_t spare_staging_bytes = 0;
  mutable std::mutex counts_mutex;
  DeviceCounts counts;
};

void Runtime::Check(cl_int code, const std::string& what) {
  if (code != CL_SUCCESS) Fail(ErrorKind::kRuntime, what + " failed: " + ClErrorString(code));
}

Runtime& Runtime::Global() {
  // Never destroyed: OpenCL drivers may already be torn down when static
  // destructors run, and releasing objects then can crash the exit.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

Runtime::~Runtime() = default;

Runtime::Runtime() : next_address_(kFirstAddress) {
  api_ = LoadClApi(&unavailable_reason_);
  if (api_ == nullptr) return;
  const ClApi& cl = *api_;
  cl_uint num_platforms = 0;
  cl_int code = cl.clGetPlatformIDs(0, nullptr, &num_platforms);
  if (code == CL_PLATFORM_NOT_FOUND_KHR || num_platforms == 0) {
    unavailable_reason_ =
        "the OpenCL ICD loader found no platform (no OpenCL driver is installed): install one, e.g. "
        "Debian/Ubuntu's pocl-opencl-icd for a CPU device, or your GPU vendor's OpenCL driver";
    return;
  }
  if (code != CL_SUCCESS) {
    unavailable_reason_ = "clGetPlatformIDs failed: " + ClErrorString(code);
    return;
  }
  std::vector<cl_platform_id> platforms(num_platforms);
  cl.clGetPlatformIDs(num_platforms, platforms.data(), nullptr);

  auto platform_string = [&](cl_platform_id p, cl_platform_info what) {
    size_t size = 0;
    if (cl.clGetPlatformInfo(p, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return std::string();
    std::string s(size, '\0');
    cl.clGetPlatformInfo(p, what, size, s.data(), nullptr);
    return std::string(s.c_str());
  };
  auto device_string = [&](cl_device_id d, cl_device_info what) {
    size_t size = 0;
    if (cl.clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return std::string();
    std::string s(size, '\0');
    cl.clGetDeviceInfo(d, what, size, s.data(), nullptr);
    return std::string(s.c_str());
  };
  auto device_value = [&](cl_device_id d, cl_device_info what, auto zero) {
    decltype(zero) value = zero;
    cl.clGetDeviceInfo(d, what, sizeof(value), &value, nullptr);
    return value;
  };

  for (cl_platform_id platform : platforms) {
    cl_uint num = 0;
    if (cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &num) != CL_SUCCESS || num == 0) continue;
    std::vector<cl_device_id> ids(num);
    cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, num, ids.data(), nullptr);
    for (cl_device_id id : ids) {
      auto d = std::make_unique<Device>();
      d->id = id;
      DeviceInfo& info = d->info;
      info.index = static_cast<int>(devices_.size());
      info.platform = platform_string(platform, CL_PLATFORM_NAME);
      info.platform_vendor = platform_string(platform, CL_PLATFORM_VENDOR);
      info.platform_version = platform_string(platform, CL_PLATFORM_VERSION);
      info.name = device_string(id, CL_DEVICE_NAME);
      info.vendor = device_string(id, CL_DEVICE_VENDOR);
      info.version = device_string(id, CL_DEVICE_VERSION);
      info.driver_version = device_string(id, CL_DRIVER_VERSION);
      cl_device_type type = device_value(id, CL_DEVICE_TYPE, cl_device_type{0});
      info.type = (type & CL_DEVICE_TYPE_GPU)           ? "gpu"
                  : (type & CL_DEVICE_TYPE_CPU)         ? "cpu"
                  : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                        : "other";
      info.compute_units = device_value(id, CL_DEVICE_MAX_COMPUTE_UNITS, cl_uint{0});
      info.max_clock_mhz = device_value(id, CL_DEVICE_MAX_CLOCK_FREQUENCY, cl_uint{0});
      info.max_work_group_size = static_cast<int64_t>(device_value(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, size_t{0}));
      size_t sizes[3] = {0, 0, 0};
      cl.clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(sizes), sizes, nullptr);
      for (int i = 0; i < 3; ++i) info.max_work_item_sizes[i] = static_cast<int64_t>(sizes[i]);
      info.global_mem_bytes = static_cast<int64_t>(device_value(id, CL_DEVICE_GLOBAL_MEM_SIZE, cl_ulong{0}));
      info.local_mem_bytes = static_cast<int64_t>(device_value(id, CL_DEVICE_LOCAL_MEM_SIZE, cl_ulong{0}));
      info.max_alloc_bytes = static_cast<int64_t>(device_value(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, cl_ulong{0}));
      // Reported in bits.
      info.sub_buffer_alignment = device_value(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, cl_uint{0}) / 8;
      if (info.sub_buffer_alignment <= 0) info.sub_buffer_alignment = 128;
      info.available = device_value(id, CL_DEVICE_AVAILABLE, cl_bool{CL_FALSE}) != CL_FALSE;
      devices_.push_back(std::move(d));
    }
  }
  if (devices_.empty()) {
    unavailable_reason_ = "no OpenCL platform has a device (" + std::to_string(num_platforms) +
                          " platform(s) found): check the driver installation";
  }
}

Runtime::Device& Runtime::state(int device) const {
  if (device < 0 || device >= num_devices()) {
    if (!available()) Fail(ErrorKind::kValue, "no OpenCL device: " + unavailable_reason_);
    Fail(ErrorKind::kValue, "no OpenCL device " + OpenCLDeviceName(device) + ": this machine has " +
                                std::to_string(num_devices()) +
                                " (opencl:0 to opencl:" + std::to_string(num_devices() - 1) + ")");
  }
  return *devices_[static_cast<size_t>(device)];
}

const DeviceInfo& Runtime::info(int device) const { return state(device).info; }
cl_device_id Runtime::device_id(int device) const { return state(device).id; }

cl_context Runtime::context(int device) {
  Device& d = state(device);
  std::call_once(d.opened, [&] {
    const ClApi& cl = *api_;
    cl_int code = CL_SUCCESS;
    cl_context context = cl.clCreateContext(nullptr, 1, &d.id, nullptr, nullptr, &code);
    Check(code, OpenCLDeviceName(device) + " (" + d.info.name + "): creating a context");
    // In order: kernels and copies run in the order they are enqueued, which
    // is the order the VM issues them.
    cl_command_queue queue = cl.clCreateCommandQueue(context, d.id, 0, &code);
    if (code != CL_SUCCESS) {
      cl.clReleaseContext(context);
      Check(code, OpenCLDeviceName(device) + " (" + d.info.name + "): creating a command queue");
    }
    d.context = context;
    d.queue = queue;
  });
  return d.context;
}

cl_command_queue Runtime::queue(int device) {
  if (EventRecorder* recorder = EventRecorder::Active(device)) return recorder->queue();
  context(device);
  return state(device).queue;
}

cl_command_queue Runtime::profiling_queue(int device) {
  Device& d = state(device);
  cl_context context = this->context(device);
  std::call_once(d.profiling_opened, [&] {
    cl_int code = CL_SUCCESS;
    cl_command_queue queue = api_->clCreateCommandQueue(context, d.id, CL_QUEUE_PROFILING_ENABLE, &code);
    Check(code, OpenCLDeviceName(device) + " (" + d.info.name + "): creating a profiling command queue");
    d.profiling_queue = queue;
  });
  return d.profiling_queue;
}

void* Runtime::Alloc(int device, size_t nbytes, size_t alignment) {
  Device& d = state(device);
  const size_t size = nbytes == 0 ? 1 : nbytes;
  if (d.info.max_alloc_bytes > 0 && size > static_cast<size_t>(d.info.max_alloc_bytes)) {
    Fail(ErrorKind::kMemory, OpenCLDeviceName(device) + ": cannot allocate " + std::to_string(nbytes) +
                                 " bytes in one buffer: the device's limit (CL_DEVICE_MAX_MEM_ALLOC_SIZE) is " +
                                 std::to_string(d.info.max_alloc_bytes) + " bytes");
  }
  cl_int code = CL_SUCCESS;
  cl_mem mem = api_->clCreateBuffer(context(device), CL_MEM_READ_WRITE, size, nullptr, &code);
  Check(code, OpenCLDeviceName(device) + ": allocating " + std::to_string(nbytes) + " bytes");
  uintptr_t base = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uintptr_t align = alignment > kAddressGranule ? RoundUp(alignment, kAddressGranule) : kAddressGranule;
    base = RoundUp(next_address_, align);
    // A granule of unused addresses after each allocation: its end address
    // is never the start of the next one.
    next_address_ = base + RoundUp(size, kAddressGranule) + kAddressGranule;
    allocations_[base] = Allocation{mem, size, device, {}};
  }
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts.allocations += 1;
  return reinterpret_cast<void*>(base);
}

void Runtime::Free(void* address) {
  if (address == nullptr) return;
  Allocation freed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(address));
    if (it == allocations_.end()) return;  // not an allocation's start: nothing of ours to free
    freed = std::move(it->second);
    allocations_.erase(it);
  }
  // OpenCL keeps a released buffer until the commands using it are done.
  for (auto& [offset, sub] : freed.sub_buffers) api_->clReleaseMemObject(sub);
  api_->clReleaseMemObject(freed.mem);
}

const Runtime::Allocation* Runtime::Find(uintptr_t address, uintptr_t* base) const {
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return nullptr;
  --it;
  if (address > it->first + it->second.size) return nullptr;
  *base = it->first;
  return &it->second;
}

Region Runtime::Resolve(const void* address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  uintptr_t base = 0;
  const Allocation* a = Find(reinterpret_cast<uintptr_t>(address), &base);
  if (a == nullptr) {
    Fail(ErrorKind::kValue, "address " + std::to_string(reinterpret_cast<uintptr_t>(address)) +
                                " is not OpenCL device memory allocated by shapefn's OpenCL runtime");
  }
  const size_t offset = reinterpret_cast<uintptr_t>(address) - base;
  return Region{a->mem, offset, a->size - offset, a->device};
}

cl_mem Runtime::KernelArgument(const void* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  uintptr_t base = 0;
  const Allocation* found = Find(reinterpret_cast<uintptr_t>(address), &base);
  if (found == nullptr) {
    Fail(ErrorKind::kValue, "a kernel argument's data (address " +
                                std::to_string(reinterpret_cast<uintptr_t>(address)) +
                                ") is not OpenCL device memory allocated by shapefn's OpenCL runtime");
  }
  Allocation& a = const_cast<Allocation&>(*found);
  const size_t offset = reinterpret_cast<uintptr_t>(address) - base;
  // At the very end (an empty tensor) nothing is read: the whole buffer will do.
  if (offset == 0 || offset == a.size) return a.mem;
  auto it = a.sub_buffers.find(offset);
  if (it != a.sub_buffers.end()) return it->second;
  const DeviceInfo& info = state(a.device).info;
  if (offset % static_cast<size_t>(info.sub_buffer_alignment) != 0) {
    Fail(ErrorKind::kValue, "a kernel argument starts " + std::to_string(offset) +
                                " bytes into its buffer; OpenCL passes a buffer from an offset only at multiples of " +
                                std::to_string(info.sub_buffer_alignment) + " bytes on " + OpenCLDeviceName(a.device) +
                                " (CL_DEVICE_MEM_BASE_ADDR_ALIGN): place the tensor at an aligned offset");
  }
  cl_buffer_region region{offset, a.size - offset};
  cl_int code = CL_SUCCESS;
  cl_mem sub = api_->clCreateSubBuffer(a.mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &code);
  Check(code, OpenCLDeviceName(a.device) + ": a sub-buffer at offset " + std::to_string(offset));
  a.sub_buffers[offset] = sub;
  return sub;
}

void Runtime::ReapUploads(Device& d) {
  auto& uploads = d.uploads;
  size_t kept = 0;
  for (auto& upload : uploads) {
    // Asked even after a sync: another thread may have enqueued a write since.
    cl_int status = CL_COMPLETE;
    api_->clGetEventInfo(upload.first, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, nullptr);
    // Negative: the command failed; its memory is no longer read either.
    if (status <= CL_COMPLETE) {
      api_->clReleaseEvent(upload.first);
      StagingBuffer& done = upload.second;
      if (d.spare_staging_bytes + done.capacity <= kSpareStagingBytes) {
        d.spare_staging_bytes += done.capacity;
        d.spare_staging.emplace(done.capacity, std::move(done.data));
      }
      done.data.reset();
    } else {
      uploads[kept++] = std::move(upload);
    }
  }
  uploads.resize(kept);
}

namespace {
void CheckRoom(const Region& r, size_t nbytes, const char* what) {
  if (nbytes > r.available) {
    Fail(ErrorKind::kValue, std::string(what) + " of " + std::to_string(nbytes) + " bytes runs past the end of " +
                                OpenCLDeviceName(r.device) + " memory (" + std::to_string(r.available) +
                                " bytes from that address)");
  }
}
}  // namespace

StagingBuffer Runtime::TakeStaging(Device& d, size_t nbytes) {
  std::lock_guard<std::mutex> lock(d.uploads_mutex);
  ReapUploads(d);
  size_t pending = 0;
  for (const auto& upload : d.uploads) pending += upload.second.capacity;
  for (size_t i = 0; i < d.uploads.size() && pending + nbytes > kPendingStagingBytes; ++i) {
    api_->clWaitForEvents(1, &d.uploads[i].first);
    pending -= d.uploads[i].second.capacity;
  }
  ReapUploads(d);
  // The smallest spare that fits, if it is not more than twice too large.
  auto it = d.spare_staging.lower_bound(nbytes);
  if (it != d.spare_staging.end() && it->first / 2 <= nbytes) {
    StagingBuffer b{std::move(it->second), it->first};
    d.spare_staging_bytes -= it->first;
    d.spare_staging.erase(it);
    return b;
  }
  return StagingBuffer{std::unique_ptr<char[]>(new char[nbytes]), nbytes};
}

void Runtime::Write(void* device_dst, const void* host_src, size_t nbytes) {
  if (nbytes == 0) return;
  Region r = Resolve(device_dst);
  CheckRoom(r, nbytes, "a copy to the device");
  Device& d = state(r.device);
  StagingBuffer staged = TakeStaging(d, nbytes);
  std::memcpy(staged.data.get(), host_src, nbytes);
  cl_event done = nullptr;
  Check(api_->clEnqueueWriteBuffer(queue(r.device), r.mem, CL_FALSE, r.offset, nbytes, staged.data.get(), 0, nullptr,
                                   &done),
        OpenCLDeviceName(r.device) + ": a copy of " + std::to_string(nbytes) + " bytes to the device");
  // Its event is kept for the staging buffer anyway; a profiled call's
  // recorder takes a reference of its own.
  if (EventRecorder* recorder = EventRecorder::Active(r.device)) recorder->Keep(done);
  {
    std::lock_guard<std::mutex> lock(d.uploads_mutex);
    d.uploads.emplace_back(done, std::move(staged));
  }
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts.h2d_copies += 1;
  d.counts.h2d_bytes += static_cast<int64_t>(nbytes);
}

void Runtime::Read(void* host_dst, const void* device_src, size_t nbytes) {
  if (nbytes == 0) return;
  Region r = Resolve(device_src);
  CheckRoom(r, nbytes, "a copy to the host");
  Device& d = state(r.device);
  Check(EnqueueRecorded(*api_, r.device,
                        [&](cl_event* done) {
                          return api_->clEnqueueReadBuffer(queue(r.device), r.mem, CL_FALSE, r.offset, nbytes, host_dst,
                                                           0, nullptr, done);
                        }),
        OpenCLDeviceName(r.device) + ": a copy of " + std::to_string(nbytes) + " bytes to the host");
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts.d2h_copies += 1;
  d.counts.d2h_bytes += static_cast<int64_t>(nbytes);
}

void Runtime::CopyWithin(void* device_dst, const void* device_src, size_t nbytes) {
  if (nbytes == 0) return;
  Region from = Resolve(device_src);
  Region to = Resolve(device_dst);
  CheckRoom(from, nbytes, "a copy from device memory");
  CheckRoom(to, nbytes, "a copy to device memory");
  if (from.device != to.device) {
    // Buffers of different contexts: through the host.
    std::unique_ptr<char[]> staged(new char[nbytes]);
    Read(staged.get(), device_src, nbytes);
    Sync(from.device);
    Write(device_dst, staged.get(), nbytes);
    return;
  }
  Device& d = state(to.device);
  Check(EnqueueRecorded(*api_, to.device,
                        [&](cl_event* done) {
                          return api_->clEnqueueCopyBuffer(queue(to.device), from.mem, to.mem, from.offset, to.offset,
                                                           nbytes, 0, nullptr, done);
                        }),
        OpenCLDeviceName(to.device) + ": a copy of " + std::to_string(nbytes) + " bytes within the device");
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts.d2d_copies += 1;
  d.counts.d2d_bytes += static_cast<int64_t>(nbytes);
}

void Runtime::ReadNow(void* host_dst, const void* device_src, size_t nbytes) {
  Region r = Resolve(device_src);
  CheckRoom(r, nbytes, "a read of check words");
  Check(api_->clEnqueueReadBuffer(queue(r.device), r.mem, CL_TRUE, r.offset, nbytes, host_dst, 0, nullptr, nullptr),
        OpenCLDeviceName(r.device) + ": a read of " + std::to_string(nbytes) + " bytes of check words");
}

void Runtime::ZeroNow(void* device_dst, size_t nbytes) {
  Region r = Resolve(device_dst);
  CheckRoom(r, nbytes, "a zero fill of check words");
  std::vector<uint8_t> zeros(nbytes, 0);
  Check(
      api_->clEnqueueWriteBuffer(queue(r.device), r.mem, CL_TRUE, r.offset, nbytes, zeros.data(), 0, nullptr, nullptr),
      OpenCLDeviceName(r.device) + ": a zero fill of " + std::to_string(nbytes) + " bytes of check words");
}

void Runtime::Sync(int device) {
  Device& d = state(device);
  Check(api_->clFinish(queue(device)), OpenCLDeviceName(device) + ": waiting for the device (clFinish)");
  {
    std::lock_guard<std::mutex> lock(d.uploads_mutex);
    ReapUploads(d);
  }
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts.syncs += 1;
}

namespace {
thread_local int current_device = 0;
}  // namespace

void SetCurrentDevice(int device) { current_device = device; }
int CurrentDevice() { return current_device; }

void Runtime::Flush(int device) {
  Check(api_->clFlush(queue(device)), OpenCLDeviceName(device) + ": submitting queued work (clFlush)");
}

void Runtime::CountLaunch(int device) {
  Device& d = state(device);
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts.kernel_launches += 1;
}

DeviceCounts Runtime::counts(int device) const {
  Device& d = state(device);
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  return d.counts;
}

void Runtime::ResetCounts(int device) {
  Device& d = state(device);
  std::lock_guard<std::mutex> lock(d.counts_mutex);
  d.counts = DeviceCounts();
}

}  // namespace shapefn::opencl
