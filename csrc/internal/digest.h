// FNV-1a 64: the checksum of an executable's payload and the digest of the
// kernel library saved beside it (both guard against accidents, a truncated
// or swapped file, not against an adversary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shapefn/executable.h"

namespace shapefn {

inline uint64_t Fnv1a(const uint8_t* data, size_t n, uint64_t h = 14695981039346656037ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 1099511628211ull;
  }
  return h;
}

// The size and FNV-1a 64 of the file at `path`, read whole; throws
// Error(kNotFound) when it cannot be read.
LibraryDigest FileDigest(const std::string& path);

}  // namespace shapefn
