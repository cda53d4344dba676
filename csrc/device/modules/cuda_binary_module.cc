// A CUDA device module carrying compiled code (PTX, cubin or fatbin) instead
// of CUDA source, in the serialized form TVM's CUDA runtime loads
// (`ffi.Module.load_from_bytes.cuda`, format named in the module). TVM's
// wheel keeps CUDA source in the module when its CUDA runtime is not loaded
// (no GPU driver at compile time); shapefn compiles that source with nvcc and
// swaps this module in, so a library built on a machine without a GPU holds
// the device code a GPU machine runs.
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <string>

#include "device/modules/device_module_blob.h"
#include "shapefn/error.h"

namespace shapefn {
namespace {

class CudaBinaryModule final : public tvm::ffi::ModuleObj {
 public:
  explicit CudaBinaryModule(DeviceModuleBlob blob) : blob_(std::move(blob)) {}

  const char* kind() const final { return "cuda"; }
  int GetPropertyMask() const final { return tvm::ffi::Module::kBinarySerializable; }
  // Runs nowhere in this process: a GPU process loads the saved library
  // through TVM's CUDA runtime.
  tvm::ffi::Optional<tvm::ffi::Function> GetFunction(const tvm::ffi::String& name) final { return std::nullopt; }
  tvm::ffi::Bytes SaveToBytes() const final { return tvm::ffi::Bytes(SerializeDeviceModule(blob_)); }
  tvm::ffi::String InspectSource(const tvm::ffi::String& format) const final {
    return format == blob_.format || format.empty() ? blob_.code : std::string();
  }

 private:
  DeviceModuleBlob blob_;
};

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::Function::SetGlobal(
      "shapefn.cuda_binary_module",
      tvm::ffi::Function::FromTyped([](tvm::ffi::Module source, tvm::ffi::String format, tvm::ffi::Bytes code) {
        if (std::string(source->kind()) != "cuda") {
          TVM_FFI_THROW(ValueError) << "expected a CUDA device module, got one of kind '" << source->kind() << "'";
        }
        tvm::ffi::Bytes bytes = source->SaveToBytes();
        DeviceModuleBlob blob;
        try {
          blob = ParseDeviceModule(bytes.data(), bytes.size());
        } catch (const Error& e) {
          TVM_FFI_THROW(ValueError) << e.what();
        }
        blob.format = std::string(format);
        blob.code = std::string(code.data(), code.size());
        return tvm::ffi::Module(tvm::ffi::make_object<CudaBinaryModule>(std::move(blob)));
      }));
}

}  // namespace shapefn
