// Reading and writing TVM's serialized GPU device modules.
#include "device_module_blob.h"

#include <cstring>

#include "shapefn/error.h"

namespace shapefn {
namespace {

class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}
  uint64_t U64() {
    uint64_t v = 0;
    Take(&v, sizeof(v));
    return v;
  }
  std::string String() {
    uint64_t n = Count(1);
    std::string s(n, '\0');
    Take(s.data(), n);
    return s;
  }
  // A count of items of at least `item_bytes` each that the rest can hold.
  uint64_t Count(size_t item_bytes) {
    uint64_t n = U64();
    if (n > (size_ - pos_) / item_bytes) Malformed("a count of " + std::to_string(n) + " runs past the end");
    return n;
  }
  void Take(void* out, size_t n) {
    if (n > size_ - pos_) Malformed("it ends early");
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
  }
  bool done() const { return pos_ == size_; }
  [[noreturn]] static void Malformed(const std::string& why) {
    Fail(ErrorKind::kFormat, "not a device module of TVM's GPU codegen (in the format this shapefn reads): " + why);
  }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

class Writer {
 public:
  void U64(uint64_t v) { Put(&v, sizeof(v)); }
  void String(const std::string& s) {
    U64(s.size());
    Put(s.data(), s.size());
  }
  void Put(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

DeviceModuleBlob ParseDeviceModule(const char* bytes, size_t size) {
  Reader in(bytes, size);
  DeviceModuleBlob blob;
  blob.format = in.String();
  const uint64_t n = in.Count(8);
  for (uint64_t f = 0; f < n; ++f) {
    DeviceKernelInfo k;
    k.key = in.String();
    k.name = in.String();
    const uint64_t n_types = in.Count(4);
    for (uint64_t i = 0; i < n_types; ++i) {
      uint8_t code = 0, bits = 0;
      uint16_t lanes = 0;
      in.Take(&code, 1);
      in.Take(&bits, 1);
      in.Take(&lanes, 2);
      k.arg_types.push_back(DLDataType{code, bits, lanes});
    }
    const uint64_t n_tags = in.Count(8);
    for (uint64_t i = 0; i < n_tags; ++i) k.launch_tags.push_back(in.String());
    const uint64_t n_extra = in.Count(4);
    for (uint64_t i = 0; i < n_extra; ++i) {
      int32_t tag = 0;
      in.Take(&tag, 4);
      k.arg_extra_tags.push_back(tag);
    }
    blob.kernels.push_back(std::move(k));
  }
  blob.code = in.String();
  if (!in.done()) Reader::Malformed("bytes follow the code");
  return blob;
}

std::string SerializeDeviceModule(const DeviceModuleBlob& blob) {
  Writer out;
  out.String(blob.format);
  out.U64(blob.kernels.size());
  for (const DeviceKernelInfo& k : blob.kernels) {
    out.String(k.key);
    out.String(k.name);
    out.U64(k.arg_types.size());
    for (const DLDataType& t : k.arg_types) {
      out.Put(&t.code, 1);
      out.Put(&t.bits, 1);
      out.Put(&t.lanes, 2);
    }
    out.U64(k.launch_tags.size());
    for (const std::string& tag : k.launch_tags) out.String(tag);
    out.U64(k.arg_extra_tags.size());
    for (int32_t tag : k.arg_extra_tags) out.Put(&tag, 4);
  }
  out.String(blob.code);
  return out.Take();
}

}  // namespace shapefn
