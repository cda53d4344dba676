// The executable file (executable.h): serialize, load back, and get every
// table as it was: functions (parameters, symbols, code, source marks),
// constants, kernels, shape functions and the masks and builds of the ones
// it carries, the kernel library, host CPU features and device code. Bytes
// that are not such a file (cut short, flipped, padded, another version,
// tables that lie about their sizes, code that fails verification) are
// refused with Error(kFormat), never a crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/bytecode.h"

namespace shapefn::bytecode {
namespace {

// The file's layout (executable.cc): magic, version, payload size,
// checksum (FNV-1a 64 of the payload), payload.
constexpr size_t kVersionAt = 8;
constexpr size_t kPayloadSizeAt = 12;
constexpr size_t kChecksumAt = 20;
constexpr size_t kPayloadAt = 28;
// A word of main's code, to find it in the payload.
constexpr int64_t kMarker = 0x0123456789abcdef;

uint64_t Fnv1a(const uint8_t* data, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 1099511628211ull;
  }
  return h;
}

// The header of `bytes` made true again for its payload.
void Reseal(std::vector<uint8_t>& bytes) {
  const uint64_t size = bytes.size() - kPayloadAt;
  const uint64_t checksum = Fnv1a(bytes.data() + kPayloadAt, size);
  std::memcpy(bytes.data() + kPayloadSizeAt, &size, sizeof(size));
  std::memcpy(bytes.data() + kChecksumAt, &checksum, sizeof(checksum));
}

// An executable using every table.
ExecutableParts Everything() {
  Code main;
  main.LoadInt({2, kMarker})
      .LoadConst({3, 0})
      .InvokeShapeFunc({1, List{0, 2, 3}, List{4, 5}, List{7}})
      .Call({6, 1, List{2}})
      .Ret({6});
  ExecutableParts parts;
  parts.functions.push_back(
      Function("main", {Param("x", kF32, {kN, 3}), Param("lengths", kI64, {kM}, kHostSlot)}, 7, main));
  parts.functions[0].symbols = {"n", "m", "unused"};
  parts.functions[0].sources = {{0, ""}, {2, "ONNX node 'shape' (Shape)"}, {4, "ONNX node 'out' (Identity)"}};
  parts.functions.push_back(Function("helper", {AnyParam("k")}, 1, Code().Ret({0})));

  ConstantDef on_device;
  on_device.dtype = kF32;
  on_device.shape = {2, 2};
  for (int i = 0; i < 16; ++i) on_device.bytes.push_back(static_cast<uint8_t>(i * 7));
  ConstantDef on_host;
  on_host.dtype = kI64;
  on_host.shape = {};
  on_host.device_slot = kHostSlot;
  on_host.bytes.assign(8, 0xab);
  ConstantDef empty;
  empty.dtype = DLDataType{kDLBool, 8, 1};
  empty.shape = {0, 4};
  parts.constants = {on_device, on_host, empty};

  parts.kernels = {"fused_add", "carried_build_a", "carried_build_b"};
  parts.shape_funcs = {{"shapefn.broadcast", {false, false}}, {"test.cpp.io.carried", {true, false, true}}};
  CarriedShapeFunc carried;
  carried.shape_func = 1;
  carried.num_outputs = 2;
  carried.builds.push_back(CarriedShapeFunc::Build{"float32:2,int64:0,float32:2", 1, {2, 1}});
  carried.builds.push_back(CarriedShapeFunc::Build{"float32:2,int64:1,float32:2", 2, {2, 0}});
  parts.carried_shape_funcs.push_back(carried);
  parts.kernel_library = "model.sfx.kernels.so";
  parts.kernel_library_digest = LibraryDigest{123456, 0x5eed5eed5eed5eedull};
  parts.check_sites = {{"ONNX node 'g' (Gather)", "take: index along axis 1"}, {"", "scatter_nd: coordinate 0"}};
  parts.host_cpu_features = {"avx2", "fma"};
  parts.device_code = "cpu";
  return parts;
}

void ExpectSameParams(const std::vector<ParamSpec>& a, const std::vector<ParamSpec>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(EncodeDType(a[i].dtype), EncodeDType(b[i].dtype));
    EXPECT_EQ(a[i].dims, b[i].dims);
    EXPECT_EQ(a[i].device_slot, b[i].device_slot);
  }
}

// Every table of `a` equals `b`'s.
void ExpectSame(const Executable& a, const Executable& b) {
  ASSERT_EQ(a.functions().size(), b.functions().size());
  for (size_t i = 0; i < a.functions().size(); ++i) {
    const FunctionDef &f = a.functions()[i], &g = b.functions()[i];
    SCOPED_TRACE(f.name);
    EXPECT_EQ(f.name, g.name);
    ExpectSameParams(f.params, g.params);
    EXPECT_EQ(f.symbols, g.symbols);
    EXPECT_EQ(f.num_registers, g.num_registers);
    EXPECT_EQ(f.code, g.code);
    ASSERT_EQ(f.sources.size(), g.sources.size());
    for (size_t m = 0; m < f.sources.size(); ++m) {
      EXPECT_EQ(f.sources[m].instruction, g.sources[m].instruction);
      EXPECT_EQ(f.sources[m].source, g.sources[m].source);
    }
  }
  ASSERT_EQ(a.constants().size(), b.constants().size());
  for (size_t i = 0; i < a.constants().size(); ++i) {
    const ConstantDef &c = a.constants()[i], &d = b.constants()[i];
    EXPECT_EQ(EncodeDType(c.dtype), EncodeDType(d.dtype));
    EXPECT_EQ(c.shape, d.shape);
    EXPECT_EQ(c.device_slot, d.device_slot);
    EXPECT_EQ(c.bytes, d.bytes);
  }
  EXPECT_EQ(a.kernels(), b.kernels());
  ASSERT_EQ(a.shape_funcs().size(), b.shape_funcs().size());
  for (size_t i = 0; i < a.shape_funcs().size(); ++i) {
    EXPECT_EQ(a.shape_funcs()[i].op, b.shape_funcs()[i].op);
    EXPECT_EQ(a.shape_funcs()[i].mask, b.shape_funcs()[i].mask);
  }
  ASSERT_EQ(a.carried_shape_funcs().size(), b.carried_shape_funcs().size());
  for (size_t i = 0; i < a.carried_shape_funcs().size(); ++i) {
    const CarriedShapeFunc &c = a.carried_shape_funcs()[i], &d = b.carried_shape_funcs()[i];
    EXPECT_EQ(c.shape_func, d.shape_func);
    EXPECT_EQ(c.num_outputs, d.num_outputs);
    ASSERT_EQ(c.builds.size(), d.builds.size());
    for (size_t k = 0; k < c.builds.size(); ++k) {
      EXPECT_EQ(c.builds[k].signature, d.builds[k].signature);
      EXPECT_EQ(c.builds[k].kernel, d.builds[k].kernel);
      EXPECT_EQ(c.builds[k].out_ndims, d.builds[k].out_ndims);
    }
  }
  EXPECT_EQ(a.kernel_library(), b.kernel_library());
  EXPECT_TRUE(a.kernel_library_digest() == b.kernel_library_digest());
  ASSERT_EQ(a.check_sites().size(), b.check_sites().size());
  for (size_t i = 0; i < a.check_sites().size(); ++i) {
    EXPECT_EQ(a.check_sites()[i].source, b.check_sites()[i].source);
    EXPECT_EQ(a.check_sites()[i].what, b.check_sites()[i].what);
  }
  EXPECT_EQ(a.host_cpu_features(), b.host_cpu_features());
  EXPECT_EQ(a.device_code(), b.device_code());
  EXPECT_EQ(a.Disassemble(true), b.Disassemble(true));
}

std::shared_ptr<Executable> Deserialize(const std::vector<uint8_t>& bytes) {
  return Executable::Deserialize(bytes.data(), bytes.size());
}

TEST(ExecutableIO, RoundTripKeepsEveryTable) {
  Executable exe(Everything());
  const std::vector<uint8_t> bytes = exe.Serialize();
  std::shared_ptr<Executable> loaded = Deserialize(bytes);
  ExpectSame(exe, *loaded);
  // The parts as given, not only as the writer understood them.
  EXPECT_EQ(loaded->shape_funcs()[1].mask, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(loaded->shape_funcs()[0].mask, (std::vector<bool>{false, false}));
  EXPECT_EQ(loaded->functions()[0].code, Everything().functions[0].code);
  EXPECT_EQ(loaded->CarriedShapeFuncOf(1), &loaded->carried_shape_funcs()[0]);
  EXPECT_EQ(loaded->CarriedShapeFuncOf(0), nullptr);
  EXPECT_EQ(loaded->functions()[0].SourceOf(3), "ONNX node 'shape' (Shape)");
  // Writing is deterministic: the loaded executable writes the same bytes.
  EXPECT_EQ(loaded->Serialize(), bytes);
}

TEST(ExecutableIO, TheHeaderNamesTheFormat) {
  const std::vector<uint8_t> bytes = Executable(Everything()).Serialize();
  ASSERT_GT(bytes.size(), kPayloadAt);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "SHAPEFNX");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + kVersionAt, sizeof(version));
  EXPECT_EQ(version, Executable::kFormatVersion);
  uint64_t payload_size = 0, checksum = 0;
  std::memcpy(&payload_size, bytes.data() + kPayloadSizeAt, sizeof(payload_size));
  std::memcpy(&checksum, bytes.data() + kChecksumAt, sizeof(checksum));
  EXPECT_EQ(payload_size, bytes.size() - kPayloadAt);
  EXPECT_EQ(checksum, Fnv1a(bytes.data() + kPayloadAt, bytes.size() - kPayloadAt));
}

TEST(ExecutableIO, SaveAndLoadThroughAFile) {
  const std::string path = ::testing::TempDir() + "shapefn_test_executable_io.sfx";
  Executable exe(Everything());
  exe.Save(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));  // written aside, then moved into place
  std::shared_ptr<Executable> loaded = Executable::Load(path);
  ExpectSame(exe, *loaded);
  // Saving again replaces the file.
  Executable(Main(Code().Ret({0}), 1)).Save(path);
  EXPECT_EQ(Executable::Load(path)->functions().size(), 1u);
  std::filesystem::remove(path);
  EXPECT_SHAPEFN_ERROR(Executable::Load(::testing::TempDir()), ErrorKind::kValue, "is a directory");
  EXPECT_SHAPEFN_ERROR(Executable::Load(path), ErrorKind::kValue, "cannot open executable");
}

TEST(ExecutableIO, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = Executable(Everything()).Serialize();
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE("cut at " + std::to_string(n));
    EXPECT_SHAPEFN_ERROR(Executable::Deserialize(bytes.data(), n), ErrorKind::kFormat, "");
  }
  EXPECT_SHAPEFN_ERROR(Executable::Deserialize(bytes.data(), kPayloadAt - 1), ErrorKind::kFormat,
                       "not a shapefn executable (bad magic or too short)");
  EXPECT_SHAPEFN_ERROR(Executable::Deserialize(bytes.data(), bytes.size() - 1), ErrorKind::kFormat,
                       "executable is truncated or has trailing bytes");
}

// Each byte changed anywhere is caught: by the magic, the version, the
// payload size or the checksum.
TEST(ExecutableIO, EveryFlippedByteIsRefused) {
  const std::vector<uint8_t> bytes = Executable(Everything()).Serialize();
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> flipped = bytes;
    flipped[i] ^= 0x5a;
    SCOPED_TRACE("byte " + std::to_string(i));
    EXPECT_SHAPEFN_ERROR(Deserialize(flipped), ErrorKind::kFormat, "");
  }
  std::vector<uint8_t> payload = bytes;
  payload.back() ^= 1;
  EXPECT_SHAPEFN_ERROR(Deserialize(payload), ErrorKind::kFormat, "executable is corrupt: checksum mismatch");
}

TEST(ExecutableIO, OtherVersionsAndTrailingBytesAreRefused) {
  std::vector<uint8_t> bytes = Executable(Everything()).Serialize();
  std::vector<uint8_t> old = bytes;
  const uint32_t version = Executable::kFormatVersion - 1;
  std::memcpy(old.data() + kVersionAt, &version, sizeof(version));
  EXPECT_SHAPEFN_ERROR(Deserialize(old), ErrorKind::kFormat,
                       "executable format version " + std::to_string(version) + " is not supported");
  std::vector<uint8_t> padded = bytes;
  padded.push_back(0);
  EXPECT_SHAPEFN_ERROR(Deserialize(padded), ErrorKind::kFormat, "truncated or has trailing bytes");
  // Padding inside a sealed payload: the tables end before it does.
  Reseal(padded);
  EXPECT_SHAPEFN_ERROR(Deserialize(padded), ErrorKind::kFormat, "executable has trailing bytes after its tables");
}

// A payload that passes the checksum but whose tables lie: the reader's own
// bounds checks refuse it, wherever it is cut.
TEST(ExecutableIO, TablesThatRunPastThePayloadAreRefused) {
  const std::vector<uint8_t> bytes = Executable(Everything()).Serialize();
  for (size_t n = kPayloadAt; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    Reseal(cut);
    SCOPED_TRACE("payload cut at " + std::to_string(n - kPayloadAt));
    EXPECT_SHAPEFN_ERROR(Deserialize(cut), ErrorKind::kFormat, "");
  }
  // The kernel count, after the kernel library's name (a u32 length, then
  // its bytes), its size and digest (two u64) and the check sites (a u32
  // count, then two strings each).
  std::vector<uint8_t> counted = bytes;
  size_t kernel_count_at = kPayloadAt + 4 + std::string("model.sfx.kernels.so").size() + 8 + 8 + 4;
  for (const CheckSite& site : Everything().check_sites)
    kernel_count_at += 4 + site.source.size() + 4 + site.what.size();
  uint32_t kernels = 0;
  std::memcpy(&kernels, counted.data() + kernel_count_at, sizeof(kernels));
  ASSERT_EQ(kernels, 3u);
  kernels = 0xffffffffu;
  std::memcpy(counted.data() + kernel_count_at, &kernels, sizeof(kernels));
  Reseal(counted);
  EXPECT_SHAPEFN_ERROR(Deserialize(counted), ErrorKind::kFormat,
                       "executable is corrupt: kernels count 4294967295 exceeds the file");
}

// What the file holds is verified as an executable made from parts is.
TEST(ExecutableIO, LoadingVerifiesTheCode) {
  std::vector<uint8_t> bytes = Executable(Everything()).Serialize();
  // main's first instruction, load_int %2 kMarker: make its destination %99.
  size_t at = 0;
  for (size_t i = kPayloadAt; i + 8 <= bytes.size() && at == 0; ++i) {
    if (std::memcmp(bytes.data() + i, &kMarker, 8) == 0) at = i;
  }
  ASSERT_NE(at, 0u) << "the marker is not in the payload";
  int64_t dst = 0;
  std::memcpy(&dst, bytes.data() + at - 8, sizeof(dst));
  ASSERT_EQ(dst, 2);
  dst = 99;
  std::memcpy(bytes.data() + at - 8, &dst, sizeof(dst));
  Reseal(bytes);
  EXPECT_SHAPEFN_ERROR(Deserialize(bytes), ErrorKind::kFormat,
                       "invalid executable: function 'main' instruction 0: load_int uses register %99 of 7 "
                       "(operand 'dst')");
}

// fail_*: tables the verifier refuses, on load as when made from parts.
TEST(ExecutableIO, CarriedShapeFunctionTablesAreVerified) {
  auto with = [](auto change) {
    ExecutableParts parts = Everything();
    change(parts.carried_shape_funcs);
    return parts;
  };
  using Carried = std::vector<CarriedShapeFunc>;
  const std::string where = "invalid executable: carried shape function 'test.cpp.io.carried'";
  ExecutableParts short_mask = Everything();
  short_mask.shape_funcs[1].mask.pop_back();
  EXPECT_REJECTED(short_mask, where + " build (float32:2,int64:0,float32:2) has 3 inputs, its mask 2");
  ExecutableParts no_mask = Everything();
  no_mask.shape_funcs[0].mask.clear();
  EXPECT_REJECTED(no_mask, "invalid executable: the mask of shape function 'shapefn.broadcast' has 0 flags");
  EXPECT_REJECTED(with([](Carried& c) { c[0].shape_func = 2; }), "a carried shape function has index 2, out of range");
  EXPECT_REJECTED(with([](Carried& c) { c.push_back(c[0]); }), where + " is carried twice");
  EXPECT_REJECTED(with([](Carried& c) { c[0].num_outputs = 0; }), where + " has 0 outputs");

  EXPECT_REJECTED(with([](Carried& c) { c[0].builds[1].signature = c[0].builds[0].signature; }),
                  where + " has two builds (float32:2,int64:0,float32:2)");
  EXPECT_REJECTED(with([](Carried& c) { c[0].builds[0].kernel = 3; }),
                  where + " build (float32:2,int64:0,float32:2) names kernel 3, out of range");
  EXPECT_REJECTED(with([](Carried& c) { c[0].builds[0].out_ndims = {2}; }),
                  where + " build (float32:2,int64:0,float32:2) gives 1 output ranks for 2 outputs");
  EXPECT_REJECTED(with([](Carried& c) {
                    c[0].builds[0].out_ndims = {2, -1};
                  }),
                  where + " build (float32:2,int64:0,float32:2) has output rank -1");
  EXPECT_REJECTED(with([](Carried& c) { c[0].builds[0].signature = "float32,int64:0,float32:2"; }),
                  "malformed shape-function signature 'float32,int64:0,float32:2'");
  EXPECT_REJECTED(with([](Carried& c) { c[0].builds[0].signature = "complex64:2,int64:0,float32:2"; }),
                  "unknown dtype in 'complex64:2'");
}

TEST(ExecutableIO, OtherTablesAreVerified) {
  ExecutableParts library = Everything();
  library.kernel_library = "../elsewhere/model.so";
  EXPECT_REJECTED(library, "kernel library must be a file name beside the executable");
  ExecutableParts device = Everything();
  device.device_code = "tpu";
  EXPECT_REJECTED(device, "unknown device code 'tpu'");
  ExecutableParts feature = Everything();
  feature.host_cpu_features.push_back("");
  EXPECT_REJECTED(feature, "host CPU feature name is empty or not UTF-8");
  ExecutableParts constant = Everything();
  constant.constants[0].shape = {2, -2};
  EXPECT_REJECTED(constant, "constant 0 has a negative dimension");
  constant.constants[0].shape = {int64_t{1} << 62, 8};
  EXPECT_REJECTED(constant, "constant 0 is too large");
  ExecutableParts param = Everything();
  param.functions[0].params[1].device_slot = 5;
  EXPECT_REJECTED(param, "function 'main' parameter 'lengths' has an invalid device");
  param.functions[0].params[1].device_slot = kHostSlot;
  param.functions[0].params[1].dtype = DLDataType{kDLFloat, 12, 1};
  EXPECT_REJECTED(param, "function 'main' parameter 'lengths' has an invalid dtype");
}

}  // namespace
}  // namespace shapefn::bytecode
