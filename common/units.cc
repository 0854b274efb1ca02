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
  std::uint64_t multiplier = 1;
  if (!s.empty() && s.back() == 'i') {
    s.pop_back();
    if (s.empty()) return Status::InvalidArgument(StrCat("bad ", what, " '", original, "'"));
    switch (s.back()) {
      case 'k': multiplier = 1ULL << 10; break;
      case 'm': multiplier = 1ULL << 20; break;
      case 'g': multiplier = 1ULL << 30; break;
      case 't': multiplier = 1ULL << 40; break;
      default: return Status::InvalidArgument(StrCat("bad unit in ", what, " '", original, "'"));
    }
    s.pop_back();
  } else if (!s.empty()) {
    switch (s.back()) {
      case 'k':
        multiplier = 1'000;
        s.pop_back();
        break;
      case 'm':
        multiplier = 1'000'000;
        s.pop_back();
        break;
      case 'g':
        multiplier = 1'000'000'000;
        s.pop_back();
        break;
      case 't':
        multiplier = 1'000'000'000'000;
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
  // In integers, exactly: through a double, 1.07G was 1070000000.0000001, "not a whole number".
  const std::size_t dot = s.find('.');
  const std::string_view whole = std::string_view(s).substr(0, dot);
  const std::string_view fraction =
      dot == std::string::npos ? std::string_view() : std::string_view(s).substr(dot + 1);
  if ((whole.empty() && fraction.empty()) || fraction.find('.') != std::string_view::npos ||
      fraction.size() > 18) {
    return Status::InvalidArgument(StrCat("bad ", what, " '", original, "'"));
  }
  constexpr unsigned __int128 kLimit = static_cast<unsigned __int128>(1) << 62;
  unsigned __int128 number = 0;  // whole and fraction digits together
  unsigned __int128 scale = 1;   // 10^(fraction digits)
  for (const char c : whole) {
    number = number * 10 + static_cast<unsigned>(c - '0');
    if (number >= kLimit)
      return Status::InvalidArgument(StrCat(what, " '", original, "' is too large"));
  }
  for (const char c : fraction) {
    number = number * 10 + static_cast<unsigned>(c - '0');
    scale *= 10;
  }
  const unsigned __int128 scaled = number * multiplier;  // < 2^62 * 10^18 * 2^40: fits
  if (scaled / scale >= kLimit) {                        // far beyond any memory size
    return Status::InvalidArgument(StrCat(what, " '", original, "' is too large"));
  }
  if (scaled % scale != 0) {
    return Status::InvalidArgument(StrCat(what, " '", original, "' is not a whole number"));
  }
  return static_cast<std::int64_t>(scaled / scale);
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
