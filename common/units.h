// Byte and count quantities as operators write them.
//
//   ParseBytes("80GiB") == 80 << 30;  ParseBytes("1.5G") == 1'500'000'000;  ParseBytes("4096") ==
//   4096 FormatBytes(8 << 20) == "8.00 MiB"
//
// Suffixes: K, M, G, T (powers of 1000) and Ki, Mi, Gi, Ti (powers of 1024), each with an optional
// trailing B; case-insensitive. Negative, fractional-byte and overflowing values are rejected.
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvmesh {

Result<std::int64_t> ParseBytes(std::string_view text);
std::string FormatBytes(std::int64_t bytes);

// Plain non-negative integer with the same suffixes as ParseBytes but no B ("256k" tokens).
Result<std::int64_t> ParseCount(std::string_view text);

}  // namespace kvmesh
