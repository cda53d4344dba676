#include "shapefn/registry.h"

#include <algorithm>
#include <sstream>

namespace shapefn {

ShapeFuncRegistry& ShapeFuncRegistry::Global() {
  // Leaked on purpose: built-ins register during static initialisation of
  // other translation units and the registry must outlive every VM.
  static ShapeFuncRegistry* registry = new ShapeFuncRegistry();
  return *registry;
}

std::string ShapeFuncRegistry::CanonicalLocked(const std::string& name) const {
  auto it = aliases_.find(name);
  return it == aliases_.end() ? name : it->second;
}

std::string ShapeFuncRegistry::Canonical(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return CanonicalLocked(name);
}

static std::string MaskToString(const std::vector<bool>& mask) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < mask.size(); ++i) os << (i ? ", " : "") << (mask[i] ? "True" : "False");
  os << "]";
  return os.str();
}

bool ShapeFuncRegistry::Register(ShapeFuncEntry entry, bool override_equal) {
  if (entry.name.empty()) Fail(ErrorKind::kValue, "register_shape_func: empty op name");
  if (entry.mask.empty()) Fail(ErrorKind::kValue, "register_shape_func: empty mask for '" + entry.name + "'");
  std::lock_guard<std::mutex> lock(mutex_);
  entry.name = CanonicalLocked(entry.name);
  auto it = entries_.find(entry.name);
  if (it != entries_.end()) {
    const ShapeFuncEntry& old = *it->second;
    int arity = old.arity;
    if (arity >= 0) {
      if (entry.mask.size() == 1 && entry.arity < 0) {
        entry.mask.assign(static_cast<size_t>(arity), entry.mask[0]);
      } else if (static_cast<int>(entry.mask.size()) != arity) {
        Fail(ErrorKind::kValue, "register_shape_func: '" + entry.name + "' takes " + std::to_string(arity) +
                                    " inputs but the mask " + MaskToString(entry.mask) + " has " +
                                    std::to_string(entry.mask.size()));
      }
      entry.arity = arity;
      if (entry.native == nullptr && !entry.compiler.defined()) entry.num_outputs = old.num_outputs;
      entry.count_sized = entry.count_sized || old.count_sized;
    }
    if (entry.native == nullptr && !entry.compiler.defined()) {
      // A new mask for an existing shape function.
      entry.native = old.native;
      entry.compiler = old.compiler;
      entry.num_outputs = old.num_outputs;
    }
    if (entry.level < old.level) return false;
    if (entry.level == old.level && !override_equal) {
      Fail(ErrorKind::kValue, "register_shape_func: '" + entry.name + "' is already registered at level " +
                                  std::to_string(old.level) + "; pass override=True or a higher level");
    }
  } else if (entry.arity >= 0 && static_cast<int>(entry.mask.size()) != entry.arity) {
    Fail(ErrorKind::kValue, "register_shape_func: '" + entry.name + "' takes " + std::to_string(entry.arity) +
                                " inputs but the mask has " + std::to_string(entry.mask.size()));
  }
  std::string key = entry.name;
  entries_[key] = std::make_shared<const ShapeFuncEntry>(std::move(entry));
  return true;
}

void ShapeFuncRegistry::AddAlias(const std::string& alias, const std::string& canonical) {
  std::lock_guard<std::mutex> lock(mutex_);
  aliases_[alias] = CanonicalLocked(canonical);
}

ShapeFuncEntryPtr ShapeFuncRegistry::Lookup(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(CanonicalLocked(name));
  if (it == entries_.end()) {
    Fail(ErrorKind::kKey, "no shape function is registered for op '" + name + "'");
  }
  return it->second;
}

bool ShapeFuncRegistry::Contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.count(CanonicalLocked(name)) != 0;
}

std::vector<std::string> ShapeFuncRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& kv : entries_) names.push_back(kv.first);
  for (const auto& kv : aliases_) {
    if (entries_.count(kv.second)) names.push_back(kv.first);
  }
  std::sort(names.begin(), names.end());
  return names;
}

BuiltinRegistrar::BuiltinRegistrar(const char* name, std::vector<std::string> aliases, std::vector<bool> mask,
                                   int num_outputs, bool count_sized, NativeShapeFunc fn) {
  ShapeFuncEntry entry;
  entry.name = name;
  entry.arity = static_cast<int>(mask.size());
  entry.mask = std::move(mask);
  entry.num_outputs = num_outputs;
  entry.count_sized = count_sized;
  entry.native = fn;
  auto& registry = ShapeFuncRegistry::Global();
  registry.Register(std::move(entry), false);
  for (const auto& alias : aliases) registry.AddAlias(alias, name);
}

}  // namespace shapefn
