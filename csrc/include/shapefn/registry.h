// The shape-function registry: op name -> per-input data-dependence mask,
// shape function (native or TVM-compiled from Python) and priority level.
#pragma once

#include <tvm/ffi/function.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shapefn/shape_func.h"

namespace shapefn {

struct ShapeFuncEntry {
  std::string name;  // canonical name (a Relax op name for built-ins)
  // One flag per input; true means the shape function reads the input's value.
  // When `arity` is unknown (-1) a single flag applies to every input.
  std::vector<bool> mask;
  int arity = -1;
  int num_outputs = 1;
  int level = 10;
  // The exact output extent comes from a count the kernel writes; the shape
  // function gives an upper bound from input shapes only.
  bool count_sized = false;
  NativeShapeFunc native = nullptr;
  // Shape function written in Python: called with a signature string
  // ("i64:1,f32:4"), returns the TVM-compiled host function for it.
  tvm::ffi::Function compiler;

  bool NeedsValue(int input) const {
    if (arity < 0) return mask.empty() ? false : mask[0];
    return mask[static_cast<size_t>(input)];
  }
  bool AnyValue() const {
    for (bool b : mask)
      if (b) return true;
    return false;
  }
};

using ShapeFuncEntryPtr = std::shared_ptr<const ShapeFuncEntry>;

// "[False, True]": a mask as Python writes it, for messages.
std::string FormatMask(const std::vector<bool>& mask);

class ShapeFuncRegistry {
 public:
  static ShapeFuncRegistry& Global();

  // The mask `mask` stands for, for `name` with `arity` inputs (-1 when
  // unknown): a single flag is repeated for each input; any other mask has
  // exactly one flag per input, as many as `arity` and as `name`'s
  // registered entry take. Throws Error(kValue) naming the op, the mask and
  // the lengths. The only place a mask is validated.
  std::vector<bool> ResolveMask(const std::string& name, std::vector<bool> mask, int arity) const;
  // Adds or replaces the entry for `entry.name` (or the op it aliases), its
  // mask resolved as ResolveMask does. Higher level wins; a lower level is
  // ignored; an equal level raises unless `override_equal`. Returns true
  // when the entry took effect.
  bool Register(ShapeFuncEntry entry, bool override_equal);
  void AddAlias(const std::string& alias, const std::string& canonical);

  // Throws Error(kKey) naming `name` when it is not registered.
  ShapeFuncEntryPtr Lookup(const std::string& name) const;
  bool Contains(const std::string& name) const;
  std::string Canonical(const std::string& name) const;
  // Canonical names and aliases, sorted.
  std::vector<std::string> Names() const;

 private:
  std::string CanonicalLocked(const std::string& name) const;
  std::vector<bool> ResolveMaskLocked(const std::string& canonical, std::vector<bool> mask, int arity) const;

  mutable std::mutex mutex_;
  std::map<std::string, ShapeFuncEntryPtr> entries_;
  std::map<std::string, std::string> aliases_;
};

// Registers a built-in at static-initialisation time, next to its definition:
//   SHAPEFN_BUILTIN(relax_dynamic_strided_slice, "relax.dynamic_strided_slice",
//                   {"dyn.strided_slice"}, (std::vector<bool>{false, true, true, true}),
//                   1, false, StridedSliceShape);
// (A braced list with commas must be parenthesised: it is a macro argument.)
struct BuiltinRegistrar {
  BuiltinRegistrar(const char* name, std::vector<std::string> aliases, std::vector<bool> mask, int num_outputs,
                   bool count_sized, NativeShapeFunc fn);
};

#define SHAPEFN_BUILTIN(ident, name, aliases, mask, num_outputs, count_sized, fn) \
  static ::shapefn::BuiltinRegistrar shapefn_builtin_##ident(name, aliases, mask, num_outputs, count_sized, fn)

}  // namespace shapefn
