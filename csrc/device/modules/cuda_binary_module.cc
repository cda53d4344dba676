// A CUDA device module carrying compiled code (a fatbin, or PTX or a cubin) instead
// of CUDA source, in the serialized form TVM's CUDA runtime loads
// (`ffi.Module.load_from_bytes.cuda`, format named in the module). TVM's
// wheel keeps CUDA source in the module when its CUDA runtime is not loaded
// (no GPU driver at compile time); shapefn compiles that source with nvcc and
// swaps this module in, so a library built on a machine without a GPU holds
// the device code a GPU machine runs.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <fstream>
#include <string>
#include <utility>

#include "device_module_blob.h"
#include "shapefn/error.h"

namespace shapefn {
namespace {

class CudaBinaryModule final : public tvm::ffi::ModuleObj {
 public:
  CudaBinaryModule(DeviceModuleBlob blob, std::string cuda_source)
      : blob_(std::move(blob)), cuda_source_(std::move(cuda_source)) {}

  const char* kind() const final { return "cuda"; }
  int GetPropertyMask() const final { return tvm::ffi::Module::kBinarySerializable; }
  // Runs nowhere in this process: a GPU process loads the saved library
  // through TVM's CUDA runtime.
  tvm::ffi::Optional<tvm::ffi::Function> GetFunction(const tvm::ffi::String& name) final { return std::nullopt; }
  tvm::ffi::Bytes SaveToBytes() const final { return tvm::ffi::Bytes(SerializeDeviceModule(blob_)); }
  // The code in its own format, else (as TVM's CUDA module does while it has
  // it) the CUDA source it was compiled from: a fatbin is binary, which
  // Python's strings (UTF-8) cannot carry.
  tvm::ffi::String InspectSource(const tvm::ffi::String& format) const final {
    return format == blob_.format ? blob_.code : cuda_source_;
  }
  // How the binary reaches NVIDIA's tools (cuobjdump).
  tvm::ffi::Array<tvm::ffi::String> GetWriteFormats() const final { return {blob_.format}; }
  void WriteToFile(const tvm::ffi::String& file_name, const tvm::ffi::String& format) const final {
    if (format != blob_.format) {
      TVM_FFI_THROW(ValueError) << "this CUDA module holds " << blob_.format << ", not " << format;
    }
    std::ofstream out(std::string(file_name), std::ios::binary);
    out.write(blob_.code.data(), static_cast<std::streamsize>(blob_.code.size()));
    if (!out.flush()) TVM_FFI_THROW(RuntimeError) << "cannot write " << file_name;
  }

 private:
  DeviceModuleBlob blob_;
  std::string cuda_source_;  // not saved: a loaded library has the code alone
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
        return tvm::ffi::Module(
            tvm::ffi::make_object<CudaBinaryModule>(std::move(blob), std::string(source->InspectSource("cuda"))));
      }));
}

}  // namespace shapefn
