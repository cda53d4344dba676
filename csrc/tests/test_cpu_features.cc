// The CPU-feature check a VM makes before running host kernels
// (internal/cpu_features.h): what counts as missing, and the refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu_features.h"
#include "shapefn/error.h"

namespace shapefn {
namespace {

#if defined(__x86_64__)
TEST(CpuFeatures, X86FeaturesAreCheckable) {
  const std::vector<std::string>& checkable = CheckableCpuFeatures();
  for (const char* name : {"sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw"}) {
    EXPECT_NE(std::find(checkable.begin(), checkable.end(), name), checkable.end()) << name;
  }
}
#endif

TEST(CpuFeatures, MissingNamesTheCheckableOnesAbsent) {
  EXPECT_EQ(MissingCpuFeatures({"avx2", "avx512f", "avx512bw"}, {"avx2"}), "avx512f, avx512bw");
  EXPECT_EQ(MissingCpuFeatures({"avx2"}, {"avx2", "avx512f"}), "");
  EXPECT_EQ(MissingCpuFeatures({}, {}), "");
}

TEST(CpuFeatures, NamesItCannotCheckAreTrusted) {
  EXPECT_EQ(MissingCpuFeatures({"64bit-mode", "x87", "no-such-feature"}, {}), "");
}

TEST(CpuFeatures, ThisCpuHasWhatItReportsPresent) { EXPECT_NO_THROW(RequireCpuFeatures(PresentCpuFeatures())); }

}  // namespace
}  // namespace shapefn
