#include "npy.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include "shapefn/error.h"
#include "shapefn/tensor.h"

namespace shapefn::npy {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kAlignment = kKernelBufferAlignment;

struct DescrEntry {
  const char* descr;
  DLDataType dtype;
};

// The descr strings NumPy writes for each dtype the VM takes, on a
// little-endian machine: '|' for one-byte types, '<' for the rest.
constexpr DescrEntry kDescrs[] = {
    {"|b1", {kDLBool, 8, 1}},  {"|i1", {kDLInt, 8, 1}},    {"<i2", {kDLInt, 16, 1}},   {"<i4", {kDLInt, 32, 1}},
    {"<i8", {kDLInt, 64, 1}},  {"|u1", {kDLUInt, 8, 1}},   {"<u2", {kDLUInt, 16, 1}},  {"<u4", {kDLUInt, 32, 1}},
    {"<u8", {kDLUInt, 64, 1}}, {"<f2", {kDLFloat, 16, 1}}, {"<f4", {kDLFloat, 32, 1}}, {"<f8", {kDLFloat, 64, 1}},
};
constexpr const char* kSupported = "bool, int8/16/32/64, uint8/16/32/64, float16/32/64";

[[noreturn]] void Bad(const std::string& path, const std::string& what) {
  Fail(ErrorKind::kValue, "'" + path + "': " + what);
}

std::optional<DLDataType> DTypeOfDescr(const std::string& descr) {
  for (const DescrEntry& e : kDescrs) {
    if (descr == e.descr) return e.dtype;
  }
  // One-byte types carry no byte order; accept the '<' spelling too.
  if (descr.size() == 3 && descr[0] == '<' && descr[2] == '1') return DTypeOfDescr("|" + descr.substr(1));
  return std::nullopt;
}

const char* DescrOfDType(DLDataType dtype) {
  for (const DescrEntry& e : kDescrs) {
    if (e.dtype.code == dtype.code && e.dtype.bits == dtype.bits && e.dtype.lanes == dtype.lanes) return e.descr;
  }
  return nullptr;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order':
// False, 'shape': (2, 3), }. This reads exactly that grammar (string keys;
// values a string, True/False, or a tuple of non-negative ints).
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  void Parse(std::string* descr, bool* fortran_order, ShapeVec* shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    Expect('{');
    while (!Peek('}')) {
      std::string key = String();
      Expect(':');
      if (key == "descr") {
        *descr = String();
        have_descr = true;
      } else if (key == "fortran_order") {
        *fortran_order = Bool();
        have_order = true;
      } else if (key == "shape") {
        *shape = Tuple();
        have_shape = true;
      } else {
        Bad(path_, "unexpected key '" + key + "' in the .npy header");
      }
      if (!Peek('}')) Expect(',');
    }
    Expect('}');
    if (!have_descr || !have_order || !have_shape) {
      Bad(path_, "the .npy header lacks one of 'descr', 'fortran_order', 'shape'");
    }
  }

 private:
  void Skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Peek(char c) {
    Skip();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void Expect(char c) {
    if (!Peek(c)) Malformed(std::string("expected '") + c + "'");
    ++pos_;
  }
  [[noreturn]] void Malformed(const std::string& what) {
    Bad(path_, "malformed .npy header (" + what + " at offset " + std::to_string(pos_) + "): " + s_);
  }
  std::string String() {
    Skip();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) Malformed("expected a string");
    char quote = s_[pos_++];
    size_t end = s_.find(quote, pos_);
    if (end == std::string::npos) Malformed("unterminated string");
    std::string out = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  bool Bool() {
    Skip();
    for (auto [word, value] : {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      size_t n = std::strlen(word);
      if (s_.compare(pos_, n, word) == 0) {
        pos_ += n;
        return value;
      }
    }
    Malformed("expected True or False");
  }
  ShapeVec Tuple() {
    ShapeVec out;
    Expect('(');
    while (!Peek(')')) {
      Skip();
      size_t start = pos_;
      int64_t value = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (value > (INT64_MAX - 9) / 10) Malformed("dimension too large");
        value = value * 10 + (s_[pos_++] - '0');
      }
      if (pos_ == start) Malformed("expected a dimension");
      out.push_back(value);
      if (!Peek(')')) Expect(',');
    }
    Expect(')');
    return out;
  }

  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

uint64_t ReadLittleEndian(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::shared_ptr<void> AllocAligned(size_t nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) Fail(ErrorKind::kValue, "cannot allocate " + std::to_string(nbytes) + " bytes");
  return std::shared_ptr<void>(p, std::free);
}

Array Read(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) Bad(path, "is a directory, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) Bad(path, "cannot open the file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) Bad(path, "cannot read the file");
  if (bytes.size() < kMagicSize + 4 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    Bad(path, "not a .npy file (no \\x93NUMPY magic); save arrays with numpy.save");
  }
  const int major = bytes[6];
  size_t header_start;
  size_t header_len;
  if (major == 1) {
    header_start = 10;
    header_len = ReadLittleEndian(&bytes[8], 2);
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) Bad(path, "truncated .npy header");
    header_start = 12;
    header_len = ReadLittleEndian(&bytes[8], 4);
  } else {
    Bad(path, ".npy format version " + std::to_string(major) + "." + std::to_string(bytes[7]) +
                  " is not supported (1.0 to 3.0 are)");
  }
  if (header_len > bytes.size() - header_start) Bad(path, "truncated .npy header");
  std::string header(reinterpret_cast<const char*>(&bytes[header_start]), header_len);

  std::string descr;
  bool fortran_order = false;
  Array array;
  HeaderParser(header, path).Parse(&descr, &fortran_order, &array.shape);
  std::optional<DLDataType> dtype = DTypeOfDescr(descr);
  if (!dtype) {
    if (!descr.empty() && descr[0] == '>') {
      Bad(path,
          "dtype '" + descr + "' is big-endian; save it little-endian (array.astype('<" + descr.substr(1) + "'))");
    }
    Bad(path, "dtype '" + descr + "' is not supported; the VM takes " + kSupported);
  }
  if (fortran_order && array.shape.size() > 1) {
    Bad(path, "the array is in Fortran order; save a C-ordered copy (numpy.ascontiguousarray)");
  }
  array.dtype = *dtype;
  array.nbytes = CheckedNBytes(array.shape, array.dtype);
  const size_t data_start = header_start + header_len;
  const size_t available = bytes.size() - data_start;
  if (available != array.nbytes) {
    Bad(path, "the header describes " + std::to_string(array.nbytes) + " bytes of data, the file has " +
                  std::to_string(available) + (available < array.nbytes ? " (truncated)" : ""));
  }
  array.data = AllocAligned(array.nbytes);
  if (array.nbytes > 0) std::memcpy(array.data.get(), &bytes[data_start], array.nbytes);
  return array;
}

void Write(const std::string& path, DLDataType dtype, const ShapeVec& shape, const void* data) {
  const char* descr = DescrOfDType(dtype);
  if (descr == nullptr) {
    Bad(path, "cannot write dtype " + DTypeToString(dtype) + " to .npy (no NumPy dtype; the runner writes " +
                  kSupported + ")");
  }
  std::string dims;  // a Python tuple: "()", "(3,)", "(2, 3)"
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Version 1.0 has a 2-byte header length; longer headers need 2.0.
  // NumPy pads so the data starts at a multiple of 64 bytes, ending in '\n'.
  size_t preamble = kMagicSize + 2 + 2;
  if (header.size() + 1 + kAlignment > 65535) preamble = kMagicSize + 2 + 4;
  size_t total = preamble + header.size() + 1;
  header.append((kAlignment - total % kAlignment) % kAlignment, ' ');
  header.push_back('\n');

  std::string out(kMagic, kMagicSize);
  out.push_back(static_cast<char>(preamble == 10 ? 1 : 2));
  out.push_back(0);
  const int len_bytes = preamble == 10 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  out += header;

  const size_t nbytes = CheckedNBytes(shape, dtype);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) Bad(path, "cannot create the file");
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  file.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
  file.close();
  if (!file) Bad(path, "cannot write the file");
}

}  // namespace shapefn::npy
