// The instruction-set features of the host CPU that compiled host kernels
// may use. Host kernels are built for the CPU that compiles them (all its
// vector instructions); an executable records the features its host code
// needs, and a VM refuses to run it on a CPU that lacks one, where running
// it would die of an illegal instruction.
#pragma once

#include <string>
#include <vector>

namespace shapefn {

// The features this process can check, by LLVM's names ("avx2", "avx512f"):
// the ones code generation for this architecture may use. Empty where
// nothing is checked (other architectures).
const std::vector<std::string>& CheckableCpuFeatures();

// The checkable features this CPU has.
const std::vector<std::string>& PresentCpuFeatures();

// The features of `required` that are checkable but not `present`,
// comma-separated ("" if none): names it cannot check are trusted.
std::string MissingCpuFeatures(const std::vector<std::string>& required, const std::vector<std::string>& present);

// Raises Error(kRuntime) naming the features of `required` this CPU lacks.
void RequireCpuFeatures(const std::vector<std::string>& required);

}  // namespace shapefn
