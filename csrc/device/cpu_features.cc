#include "cpu_features.h"

#include <algorithm>

#include "shapefn/error.h"

namespace shapefn {
namespace {

struct Feature {
  const char* name;
  bool present;
};

// __builtin_cpu_supports takes only literals: one entry per feature.
#if defined(__x86_64__) || defined(__i386__)
#define SHAPEFN_CPU_FEATURE(name) \
  Feature { name, __builtin_cpu_supports(name) != 0 }
const std::vector<Feature>& Features() {
  static const std::vector<Feature> features = {
      SHAPEFN_CPU_FEATURE("sse3"),         SHAPEFN_CPU_FEATURE("ssse3"),
      SHAPEFN_CPU_FEATURE("sse4.1"),       SHAPEFN_CPU_FEATURE("sse4.2"),
      SHAPEFN_CPU_FEATURE("popcnt"),       SHAPEFN_CPU_FEATURE("avx"),
      SHAPEFN_CPU_FEATURE("avx2"),         SHAPEFN_CPU_FEATURE("fma"),
      SHAPEFN_CPU_FEATURE("f16c"),         SHAPEFN_CPU_FEATURE("bmi"),
      SHAPEFN_CPU_FEATURE("bmi2"),         SHAPEFN_CPU_FEATURE("lzcnt"),
      SHAPEFN_CPU_FEATURE("movbe"),        SHAPEFN_CPU_FEATURE("avx512f"),
      SHAPEFN_CPU_FEATURE("avx512bw"),     SHAPEFN_CPU_FEATURE("avx512dq"),
      SHAPEFN_CPU_FEATURE("avx512vl"),     SHAPEFN_CPU_FEATURE("avx512cd"),
      SHAPEFN_CPU_FEATURE("avx512vnni"),   SHAPEFN_CPU_FEATURE("avx512bf16"),
      SHAPEFN_CPU_FEATURE("avx512fp16"),   SHAPEFN_CPU_FEATURE("avx512vbmi"),
      SHAPEFN_CPU_FEATURE("avx512vbmi2"),  SHAPEFN_CPU_FEATURE("avx512ifma"),
      SHAPEFN_CPU_FEATURE("avx512bitalg"), SHAPEFN_CPU_FEATURE("avx512vpopcntdq"),
      SHAPEFN_CPU_FEATURE("avxvnni"),      SHAPEFN_CPU_FEATURE("gfni"),
      SHAPEFN_CPU_FEATURE("vaes"),         SHAPEFN_CPU_FEATURE("vpclmulqdq"),
  };
  return features;
}
#undef SHAPEFN_CPU_FEATURE
#else
const std::vector<Feature>& Features() {
  static const std::vector<Feature> none;
  return none;
}
#endif

}  // namespace

const std::vector<std::string>& CheckableCpuFeatures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Feature& f : Features()) out.emplace_back(f.name);
    return out;
  }();
  return names;
}

const std::vector<std::string>& PresentCpuFeatures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Feature& f : Features()) {
      if (f.present) out.emplace_back(f.name);
    }
    return out;
  }();
  return names;
}

std::string MissingCpuFeatures(const std::vector<std::string>& required, const std::vector<std::string>& present) {
  const std::vector<std::string>& checkable = CheckableCpuFeatures();
  std::string missing;
  for (const std::string& name : required) {
    const bool checked = std::find(checkable.begin(), checkable.end(), name) != checkable.end();
    if (checked && std::find(present.begin(), present.end(), name) == present.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  return missing;
}

void RequireCpuFeatures(const std::vector<std::string>& required) {
  const std::string missing = MissingCpuFeatures(required, PresentCpuFeatures());
  if (!missing.empty()) {
    Fail(ErrorKind::kRuntime, "the executable's host kernels use CPU instructions this CPU lacks (" + missing +
                                  "): compile it on this machine, or set SHAPEFN_HOST_CPU to a CPU both have "
                                  "(for example x86-64-v2) where it is compiled");
  }
}

}  // namespace shapefn
