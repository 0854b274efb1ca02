#include "common/units.h"

#include <cmath>
#include <cstdio>

#include "common/strings.h"

namespace kvmesh {
namespace {

Result<std::int64_t> ParseQuantity(std::string_view text, bool allow_b, std::string_view what) {
  const std::string_view example = allow_b ? "8GiB" : "3000, or 256k";
  const std::string original(text);
  std::string s = AsciiLower(text);
  while (!s.empty() && (s.back() == ' ')) s.pop_back();
  while (!s.empty() && (s.front() == ' ')) s.erase(s.begin());
  if (s.empty()) return Status::InvalidArgument(StrCat("empty ", what));

  if (allow_b && !s.empty() && s.back() == 'b') s.pop_back();
  double multiplier = 1;
  if (!s.empty() && s.back() == 'i') {
    s.pop_back();
    if (s.empty()) return Status::InvalidArgument(StrCat("bad ", what, " '", original, "'"));
    switch (s.back()) {
      case 'k': multiplier = 1024.0; break;
      case 'm': multiplier = 1024.0 * 1024; break;
      case 'g': multiplier = 1024.0 * 1024 * 1024; break;
      case 't': multiplier = 1024.0 * 1024 * 1024 * 1024; break;
      default: return Status::InvalidArgument(StrCat("bad unit in ", what, " '", original, "'"));
    }
    s.pop_back();
  } else if (!s.empty()) {
    switch (s.back()) {
      case 'k':
        multiplier = 1e3;
        s.pop_back();
        break;
      case 'm':
        multiplier = 1e6;
        s.pop_back();
        break;
      case 'g':
        multiplier = 1e9;
        s.pop_back();
        break;
      case 't':
        multiplier = 1e12;
        s.pop_back();
        break;
      default: break;
    }
  }
  if (s.empty()) return Status::InvalidArgument(StrCat("bad ", what, " '", original, "'"));
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.')) {
      return Status::InvalidArgument(
          StrCat("bad ", what, " '", original,
                 "': expected a non-negative number with an optional unit (e.g. ", example, ")"));
    }
  }
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) {
    return Status::InvalidArgument(StrCat("bad ", what, " '", original, "'"));
  }
  const double value = number * multiplier;
  if (value >= 0x1p62) {  // far beyond any memory size, and exactly representable
    return Status::InvalidArgument(StrCat(what, " '", original, "' is too large"));
  }
  if (value != std::floor(value)) {
    return Status::InvalidArgument(StrCat(what, " '", original, "' is not a whole number"));
  }
  return static_cast<std::int64_t>(value);
}

}  // namespace

Result<std::int64_t> ParseBytes(std::string_view text) {
  return ParseQuantity(text, true, "byte size");
}

Result<std::int64_t> ParseCount(std::string_view text) {
  return ParseQuantity(text, false, "count");
}

std::string FormatBytes(std::int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", value, kUnits[unit]);
  }
  return buf;
}

}  // namespace kvmesh
