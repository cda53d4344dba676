// JSON text for shapefn-run's output: strings and numbers.
#pragma once

#include <string>

namespace shapefn::tools {

// `s` quoted, with JSON's escapes.
std::string JsonString(const std::string& s);
// `v` as a JSON number that reads back exactly; null when not finite.
std::string JsonNumber(double v);

}  // namespace shapefn::tools
