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

std::string FormatMask(const std::vector<bool>& mask) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < mask.size(); ++i) os << (i ? ", " : "") << (mask[i] ? "True" : "False");
  os << "]";
  return os.str();
}

std::vector<bool> ShapeFuncRegistry::ResolveMask(const std::string& name, std::vector<bool> mask, int arity) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ResolveMaskLocked(CanonicalLocked(name), std::move(mask), arity);
}

std::vector<bool> ShapeFuncRegistry::ResolveMaskLocked(const std::string& canonical, std::vector<bool> mask,
                                                       int arity) const {
  if (mask.empty()) Fail(ErrorKind::kValue, "data_dependent must not be empty ('" + canonical + "')");
  auto it = entries_.find(canonical);
  const int registered = it == entries_.end() ? -1 : it->second->arity;
  for (int expected : {arity, registered}) {
    if (expected < 0) continue;
    if (mask.size() == 1) mask.assign(static_cast<size_t>(expected), mask[0]);
    if (static_cast<int>(mask.size()) != expected) {
      const char* what = expected == arity ? "the shape function of '" : "'";
      Fail(ErrorKind::kValue, std::string("register_shape_func: ") + what + canonical + "' takes " +
                                  std::to_string(expected) + " inputs but the mask " + FormatMask(mask) + " has " +
                                  std::to_string(mask.size()));
    }
  }
  return mask;
}

bool ShapeFuncRegistry::Register(ShapeFuncEntry entry, bool override_equal) {
  if (entry.name.empty()) Fail(ErrorKind::kValue, "register_shape_func: empty op name");
  std::lock_guard<std::mutex> lock(mutex_);
  entry.name = CanonicalLocked(entry.name);
  entry.mask = ResolveMaskLocked(entry.name, std::move(entry.mask), entry.arity);
  auto it = entries_.find(entry.name);
  if (it != entries_.end()) {
    const ShapeFuncEntry& old = *it->second;
    if (old.arity >= 0) {
      entry.arity = old.arity;
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
