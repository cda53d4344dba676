// The executable file format: a versioned header, a checksum over the
// payload, then the tables. Every read is bounds-checked; anything malformed
// raises Error(kFormat) and never reaches the VM.
#include "shapefn/executable.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "digest.h"
#include "isa.h"
#include "shapefn/error.h"
#include "shapefn/tensor.h"
#include "verifier.h"

namespace shapefn {

namespace {

constexpr char kMagic[8] = {'S', 'H', 'A', 'P', 'E', 'F', 'N', 'X'};
constexpr size_t kHeaderSize = 8 + 4 + 8 + 8;

class Writer {
 public:
  template <typename T>
  void Pod(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  void DType(DLDataType t) {
    Pod<uint8_t>(t.code);
    Pod<uint8_t>(t.bits);
    Pod<uint16_t>(t.lanes);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  template <typename T>
  T Pod(const char* what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  // A count of items each at least `min_item_bytes` long; bounded by what is left.
  uint64_t Count(const char* what, size_t min_item_bytes) {
    uint64_t n = Pod<uint32_t>(what);
    if (min_item_bytes && n > static_cast<uint64_t>(end_ - p_) / min_item_bytes) {
      Fail(ErrorKind::kFormat,
           std::string("executable is corrupt: ") + what + " count " + std::to_string(n) + " exceeds the file");
    }
    return n;
  }
  std::string Str(const char* what) {
    uint64_t n = Count(what, 1);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  DLDataType DType(const char* what) {
    DLDataType t;
    t.code = Pod<uint8_t>(what);
    t.bits = Pod<uint8_t>(what);
    t.lanes = Pod<uint16_t>(what);
    return t;
  }
  void Bytes(std::vector<uint8_t>* out, uint64_t n, const char* what) {
    Need(n, what);
    out->assign(p_, p_ + n);
    p_ += n;
  }
  bool done() const { return p_ == end_; }

 private:
  void Need(uint64_t n, const char* what) {
    if (n > static_cast<uint64_t>(end_ - p_)) {
      Fail(ErrorKind::kFormat, std::string("executable is truncated while reading ") + what);
    }
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

Executable::Executable(ExecutableParts parts) : parts_(std::move(parts)) { VerifyExecutable(*this); }

std::vector<uint8_t> Executable::Serialize() const {
  const ExecutableParts& p = parts_;
  const auto& kernel_library = p.kernel_library;
  const auto& kernels = p.kernels;
  const auto& shape_funcs = p.shape_funcs;
  const auto& constants = p.constants;
  const auto& functions = p.functions;
  Writer w;
  w.Str(kernel_library);
  w.Pod<uint64_t>(p.kernel_library_digest.size);
  w.Pod<uint64_t>(p.kernel_library_digest.fnv1a);
  w.Pod<uint32_t>(static_cast<uint32_t>(p.check_sites.size()));
  for (const CheckSite& site : p.check_sites) {
    w.Str(site.source);
    w.Str(site.what);
  }
  w.Pod<uint32_t>(static_cast<uint32_t>(kernels.size()));
  for (const auto& k : kernels) w.Str(k);
  w.Pod<uint32_t>(static_cast<uint32_t>(shape_funcs.size()));
  for (const ShapeFuncUse& s : shape_funcs) {
    w.Str(s.op);
    w.Pod<uint32_t>(static_cast<uint32_t>(s.mask.size()));
    for (bool reads : s.mask) w.Pod<uint8_t>(reads ? 1 : 0);
  }
  w.Pod<uint32_t>(static_cast<uint32_t>(p.carried_shape_funcs.size()));
  for (const CarriedShapeFunc& c : p.carried_shape_funcs) {
    w.Pod<int32_t>(c.shape_func);
    w.Pod<int32_t>(c.num_outputs);
    w.Pod<uint32_t>(static_cast<uint32_t>(c.builds.size()));
    for (const CarriedShapeFunc::Build& b : c.builds) {
      w.Str(b.signature);
      w.Pod<int32_t>(b.kernel);
      w.Pod<uint32_t>(static_cast<uint32_t>(b.out_ndims.size()));
      for (int64_t n : b.out_ndims) w.Pod<int64_t>(n);
    }
  }
  w.Pod<uint32_t>(static_cast<uint32_t>(p.host_cpu_features.size()));
  for (const auto& f : p.host_cpu_features) w.Str(f);
  w.Str(p.device_code);
  w.Pod<uint32_t>(static_cast<uint32_t>(constants.size()));
  for (const auto& c : constants) {
    w.DType(c.dtype);
    w.Pod<int32_t>(c.device_slot);
    w.Pod<uint32_t>(static_cast<uint32_t>(c.shape.size()));
    for (int64_t d : c.shape) w.Pod<int64_t>(d);
    w.Pod<uint64_t>(c.bytes.size());
    w.out.insert(w.out.end(), c.bytes.begin(), c.bytes.end());
  }
  w.Pod<uint32_t>(static_cast<uint32_t>(functions.size()));
  for (const auto& f : functions) {
    w.Str(f.name);
    w.Pod<uint32_t>(static_cast<uint32_t>(f.params.size()));
    for (const auto& p : f.params) {
      w.Str(p.name);
      w.DType(p.dtype);
      w.Pod<int32_t>(p.device_slot);
      w.Pod<uint32_t>(static_cast<uint32_t>(p.dims.size()));
      for (int64_t d : p.dims) w.Pod<int64_t>(d);
    }
    w.Pod<uint32_t>(static_cast<uint32_t>(f.symbols.size()));
    for (const auto& s : f.symbols) w.Str(s);
    w.Pod<int64_t>(f.num_registers);
    w.Pod<uint32_t>(static_cast<uint32_t>(f.code.size()));
    for (int64_t word : f.code) w.Pod<int64_t>(word);
    w.Pod<uint32_t>(static_cast<uint32_t>(f.sources.size()));
    for (const SourceMark& mark : f.sources) {
      w.Pod<int64_t>(mark.instruction);
      w.Str(mark.source);
    }
  }
  Writer file;
  file.out.insert(file.out.end(), kMagic, kMagic + 8);
  file.Pod<uint32_t>(kFormatVersion);
  file.Pod<uint64_t>(w.out.size());
  file.Pod<uint64_t>(Fnv1a(w.out.data(), w.out.size()));
  file.out.insert(file.out.end(), w.out.begin(), w.out.end());
  return file.out;
}

std::shared_ptr<Executable> Executable::Deserialize(const uint8_t* data, size_t size) {
  if (size < kHeaderSize || std::memcmp(data, kMagic, 8) != 0) {
    Fail(ErrorKind::kFormat, "not a shapefn executable (bad magic or too short)");
  }
  Reader header(data + 8, kHeaderSize - 8);
  uint32_t version = header.Pod<uint32_t>("version");
  uint64_t payload_size = header.Pod<uint64_t>("payload size");
  uint64_t checksum = header.Pod<uint64_t>("checksum");
  if (version != kFormatVersion) {
    Fail(ErrorKind::kFormat, "executable format version " + std::to_string(version) +
                                 " is not supported (this shapefn reads version " + std::to_string(kFormatVersion) +
                                 ")");
  }
  if (payload_size != size - kHeaderSize) {
    Fail(ErrorKind::kFormat, "executable is truncated or has trailing bytes: header says " +
                                 std::to_string(payload_size) + " payload bytes, file has " +
                                 std::to_string(size - kHeaderSize));
  }
  const uint8_t* payload = data + kHeaderSize;
  if (Fnv1a(payload, payload_size) != checksum) {
    Fail(ErrorKind::kFormat, "executable is corrupt: checksum mismatch");
  }
  Reader r(payload, payload_size);
  ExecutableParts parts;
  parts.kernel_library = r.Str("kernel library");
  parts.kernel_library_digest.size = r.Pod<uint64_t>("kernel library size");
  parts.kernel_library_digest.fnv1a = r.Pod<uint64_t>("kernel library digest");
  uint64_t n_sites = r.Count("check sites", 8);
  for (uint64_t i = 0; i < n_sites; ++i) {
    CheckSite site;
    site.source = r.Str("check site source");
    site.what = r.Str("check site");
    parts.check_sites.push_back(std::move(site));
  }
  uint64_t n = r.Count("kernels", 4);
  for (uint64_t i = 0; i < n; ++i) parts.kernels.push_back(r.Str("kernel name"));
  n = r.Count("shape functions", 4);
  for (uint64_t i = 0; i < n; ++i) {
    ShapeFuncUse use;
    use.op = r.Str("shape function name");
    uint64_t arity = r.Count("shape function mask", 1);
    for (uint64_t k = 0; k < arity; ++k) use.mask.push_back(r.Pod<uint8_t>("shape function mask") != 0);
    parts.shape_funcs.push_back(std::move(use));
  }
  n = r.Count("carried shape functions", 16);
  for (uint64_t i = 0; i < n; ++i) {
    CarriedShapeFunc c;
    c.shape_func = r.Pod<int32_t>("carried shape function index");
    c.num_outputs = r.Pod<int32_t>("carried shape function outputs");
    uint64_t nb = r.Count("carried shape function builds", 12);
    for (uint64_t k = 0; k < nb; ++k) {
      CarriedShapeFunc::Build b;
      b.signature = r.Str("carried shape function signature");
      b.kernel = r.Pod<int32_t>("carried shape function kernel");
      uint64_t no = r.Count("carried shape function output ranks", 8);
      for (uint64_t o = 0; o < no; ++o) b.out_ndims.push_back(r.Pod<int64_t>("carried shape function output rank"));
      c.builds.push_back(std::move(b));
    }
    parts.carried_shape_funcs.push_back(std::move(c));
  }
  n = r.Count("host CPU features", 4);
  for (uint64_t i = 0; i < n; ++i) parts.host_cpu_features.push_back(r.Str("host CPU feature"));
  parts.device_code = r.Str("device code");
  n = r.Count("constants", 20);
  for (uint64_t i = 0; i < n; ++i) {
    ConstantDef c;
    c.dtype = r.DType("constant dtype");
    c.device_slot = r.Pod<int32_t>("constant device");
    uint64_t ndim = r.Count("constant rank", 8);
    for (uint64_t d = 0; d < ndim; ++d) c.shape.push_back(r.Pod<int64_t>("constant shape"));
    uint64_t nbytes = r.Pod<uint64_t>("constant size");
    r.Bytes(&c.bytes, nbytes, "constant data");
    parts.constants.push_back(std::move(c));
  }
  n = r.Count("functions", 24);
  for (uint64_t i = 0; i < n; ++i) {
    FunctionDef f;
    f.name = r.Str("function name");
    uint64_t np = r.Count("parameters", 16);
    for (uint64_t p = 0; p < np; ++p) {
      ParamSpec spec;
      spec.name = r.Str("parameter name");
      spec.dtype = r.DType("parameter dtype");
      spec.device_slot = r.Pod<int32_t>("parameter device");
      uint64_t ndim = r.Count("parameter rank", 8);
      for (uint64_t d = 0; d < ndim; ++d) spec.dims.push_back(r.Pod<int64_t>("parameter shape"));
      f.params.push_back(std::move(spec));
    }
    uint64_t ns = r.Count("symbols", 4);
    for (uint64_t s = 0; s < ns; ++s) f.symbols.push_back(r.Str("symbol"));
    f.num_registers = r.Pod<int64_t>("register count");
    uint64_t nc = r.Count("code", 8);
    f.code.reserve(nc);
    for (uint64_t w = 0; w < nc; ++w) f.code.push_back(r.Pod<int64_t>("code"));
    uint64_t nm = r.Count("source marks", 12);
    for (uint64_t m = 0; m < nm; ++m) {
      SourceMark mark;
      mark.instruction = r.Pod<int64_t>("source mark instruction");
      mark.source = r.Str("source mark");
      f.sources.push_back(std::move(mark));
    }
    parts.functions.push_back(std::move(f));
  }
  if (!r.done()) Fail(ErrorKind::kFormat, "executable has trailing bytes after its tables");
  return std::make_shared<Executable>(std::move(parts));
}

void Executable::Save(const std::string& path) const {
  std::vector<uint8_t> bytes = Serialize();
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) Fail(ErrorKind::kRuntime, "cannot write executable to '" + path + "'");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) Fail(ErrorKind::kRuntime, "cannot write executable to '" + path + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    Fail(ErrorKind::kRuntime, "cannot move executable into place at '" + path + "'");
  }
}

std::shared_ptr<Executable> Executable::Load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) Fail(ErrorKind::kValue, "executable '" + path + "' is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(ErrorKind::kValue, "cannot open executable '" + path + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Deserialize(bytes.data(), bytes.size());
}

LibraryDigest FileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(ErrorKind::kNotFound, "cannot read '" + path + "'");
  LibraryDigest digest;
  digest.fnv1a = Fnv1a(nullptr, 0);
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    digest.fnv1a = Fnv1a(reinterpret_cast<const uint8_t*>(buffer.data()), got, digest.fnv1a);
    digest.size += got;
  }
  if (in.bad()) Fail(ErrorKind::kNotFound, "cannot read '" + path + "'");
  return digest;
}

const std::string& FunctionDef::SourceOf(size_t pc) const {
  static const std::string kNone;
  auto after = std::upper_bound(sources.begin(), sources.end(), static_cast<int64_t>(pc),
                                [](int64_t i, const SourceMark& mark) { return i < mark.instruction; });
  return after == sources.begin() ? kNone : std::prev(after)->source;
}

const CarriedShapeFunc* Executable::CarriedShapeFuncOf(size_t index) const {
  for (const CarriedShapeFunc& c : parts_.carried_shape_funcs) {
    if (static_cast<size_t>(c.shape_func) == index) return &c;
  }
  return nullptr;
}

int Executable::FunctionIndex(const std::string& name) const {
  for (size_t i = 0; i < functions().size(); ++i) {
    if (functions()[i].name == name) return static_cast<int>(i);
  }
  Fail(ErrorKind::kKey, "executable has no function '" + name + "'");
}

std::string Executable::Disassemble(bool operand_names) const {
  std::ostringstream os;
  for (const CarriedShapeFunc& c : carried_shape_funcs()) {
    for (const CarriedShapeFunc::Build& b : c.builds) {
      os << "shape_func " << shape_funcs()[static_cast<size_t>(c.shape_func)].op << "(" << b.signature << ") = kernel "
         << kernels()[static_cast<size_t>(b.kernel)] << "\n";
    }
  }
  for (size_t i = 0; i < functions().size(); ++i) {
    const FunctionDef& f = functions()[i];
    os << "func#" << i << " " << f.name << "(";
    for (size_t p = 0; p < f.params.size(); ++p) {
      os << (p ? ", " : "") << f.params[p].name << ": " << DTypeToString(f.params[p].dtype) << "[";
      for (size_t d = 0; d < f.params[p].dims.size(); ++d) {
        int64_t v = f.params[p].dims[d];
        os << (d ? ", " : "") << (v >= 0 ? std::to_string(v) : f.symbols[static_cast<size_t>(-1 - v)]);
      }
      os << "]";
      // The execution device is every parameter's default: only others are named.
      if (f.params[p].device_slot != kExecutionSlot) os << "@" << DeviceSlotName(f.params[p].device_slot);
    }
    os << ") registers=" << f.num_registers << "\n" << shapefn::Disassemble(Decode(f.code), operand_names);
  }
  return os.str();
}

}  // namespace shapefn
