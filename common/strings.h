// Small string helpers that do not need fmt (common/ must build on a bare CUDA machine).
//
//   StrCat("tokens_per_block ", n, " is not a power of two")
//   StrJoin(values, ", ")
//
// Thread-safe (pure functions).
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace kvmesh {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename Range>
std::string StrJoin(const Range& values, std::string_view separator) {
  std::ostringstream os;
  bool first = true;
  for (const auto& v : values) {
    if (!first) os << separator;
    os << v;
    first = false;
  }
  return os.str();
}

// Lower-cases ASCII letters.
std::string AsciiLower(std::string_view s);

// Splits on `separator`; empty pieces are kept.
std::vector<std::string> StrSplit(std::string_view s, char separator);

// Hex of bytes, lower case, two characters a byte.
std::string HexEncode(const void* data, std::size_t size);

// `v` with exactly `digits` digits after the point, as printf's "%.*f" (0.3664, 1.00, nan, inf).
std::string FormatFixed(double v, int digits);

}  // namespace kvmesh
