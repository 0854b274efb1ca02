// A slow reference for the conversions of kernels/conversions.h and the head quantisers of
// kernels/quantize.h, written independently of them: every format is a sorted table of all its
// non-negative finite values (computed in double with ldexp), and a conversion picks the nearest
// table entry (ties to the even code), then applies the brief's saturation, sign and NaN rules.
// Arithmetic steps are done in double and rounded once to float, which is the correctly rounded
// FP32 result for one division or multiplication of two floats (53 >= 2·24 + 2).
//
// Test-only. Thread-safe (the tables are built once, in function-local statics).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kvmesh::testref {

struct TableEntry {
  double value;
  std::uint32_t code;
};

// The code of the entry nearest to a (a >= 0, not NaN); ties go to the entry with an even code;
// a at or beyond the last entry gives the last code.
inline std::uint32_t NearestCode(const std::vector<TableEntry>& table, double a) {
  if (a >= table.back().value) return table.back().code;
  const auto hi = std::lower_bound(table.begin(), table.end(), a,
                                   [](const TableEntry& e, double v) { return e.value < v; });
  if (hi == table.begin()) return hi->code;
  const auto lo = hi - 1;
  const double d_lo = a - lo->value;
  const double d_hi = hi->value - a;
  if (d_lo < d_hi) return lo->code;
  if (d_hi < d_lo) return hi->code;
  return (lo->code % 2 == 0) ? lo->code : hi->code;
}

inline bool SignOf(float x) { return std::signbit(x); }

// ----- value of a code, in double

inline double E4M3Value(std::uint8_t code) {
  const int e = (code >> 3) & 0xF;
  const int m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (code & 0x80) ? -v : v;
}

inline double E2M1Value(std::uint8_t nibble) {
  static constexpr double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double v = kMag[nibble & 7];
  return (nibble & 8) ? -v : v;
}

inline double HalfValue(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v;
  if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

inline double Bf16Value(std::uint16_t b) {
  const int e = (b >> 7) & 0xFF;
  const int m = b & 0x7F;
  double v;
  if (e == 255) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  }
  return (b & 0x8000) ? -v : v;
}

// ----- tables of the non-negative finite codes (plus, for the IEEE formats, Inf as the value one
// step above the largest finite one: round to nearest with an unbounded exponent, then overflow).

inline const std::vector<TableEntry>& E4M3Table() {
  static const std::vector<TableEntry> table = [] {
    std::vector<TableEntry> t;
    for (std::uint32_t c = 0; c <= 0x7E; ++c) t.push_back({E4M3Value(std::uint8_t(c)), c});
    return t;
  }();
  return table;
}

inline const std::vector<TableEntry>& E2M1Table() {
  static const std::vector<TableEntry> table = [] {
    std::vector<TableEntry> t;
    for (std::uint32_t c = 0; c <= 7; ++c) t.push_back({E2M1Value(std::uint8_t(c)), c});
    return t;
  }();
  return table;
}

inline const std::vector<TableEntry>& HalfTable() {
  static const std::vector<TableEntry> table = [] {
    std::vector<TableEntry> t;
    for (std::uint32_t c = 0; c <= 0x7BFF; ++c) t.push_back({HalfValue(std::uint16_t(c)), c});
    t.push_back({65536.0, 0x7C00});
    return t;
  }();
  return table;
}

inline const std::vector<TableEntry>& Bf16Table() {
  static const std::vector<TableEntry> table = [] {
    std::vector<TableEntry> t;
    for (std::uint32_t c = 0; c <= 0x7F7F; ++c) t.push_back({Bf16Value(std::uint16_t(c)), c});
    t.push_back({std::ldexp(1.0, 128), 0x7F80});
    return t;
  }();
  return table;
}

// ----- conversions by the brief's rules

inline std::uint8_t E4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  const double a = std::fabs(double{x});
  const std::uint32_t mag = a > 448.0 ? 0x7E : NearestCode(E4M3Table(), a);
  return std::uint8_t((SignOf(x) ? 0x80 : 0) | mag);
}

inline std::uint8_t E2M1(float x) {
  if (std::isnan(x)) return 0x7;
  const double a = std::fabs(double{x});
  const std::uint32_t mag = a >= 6.0 ? 7 : NearestCode(E2M1Table(), a);
  return std::uint8_t((SignOf(x) ? 0x8 : 0) | mag);
}

inline std::uint16_t Half(float x) {
  if (std::isnan(x)) return 0x7FFF;
  const std::uint32_t mag = NearestCode(HalfTable(), std::fabs(double{x}));
  return std::uint16_t((SignOf(x) ? 0x8000 : 0) | mag);
}

inline std::uint16_t Bf16(float x) {
  if (std::isnan(x)) return 0x7FFF;
  const std::uint32_t mag = NearestCode(Bf16Table(), std::fabs(double{x}));
  return std::uint16_t((SignOf(x) ? 0x8000 : 0) | mag);
}

// Round half to even to an integer, clamp to [-127, 127]; NaN → 0.
inline std::int8_t Int8(float v) {
  if (std::isnan(v)) return 0;
  const double d = v;
  if (d >= 127.0) return 127;
  if (d <= -127.0) return -127;
  const double fl = std::floor(d);
  const double frac = d - fl;
  double r = fl;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0.0)) r = fl + 1.0;
  return std::int8_t(r);
}

inline float Div(float a, float b) { return float(double{a} / double{b}); }
inline float Mul(float a, float b) { return float(double{a} * double{b}); }

// ----- head quantisers (brief: "Quantised caches", "Bit-exact conversions")

inline float Amax(const std::vector<float>& x, std::size_t begin, std::size_t end) {
  double amax = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(double{x[i]}));
  }
  return float(amax);
}

inline float ScaleFor(float amax, float max_code) {
  const float s = Div(amax, max_code);
  return s == 0.0f ? 1.0f : s;
}

struct Fp8Head {
  float scale;
  std::vector<std::uint8_t> q;
};
inline Fp8Head QuantizeFp8(const std::vector<float>& x) {
  Fp8Head h{ScaleFor(Amax(x, 0, x.size()), 448.0f), {}};
  for (float v : x) h.q.push_back(E4M3(Div(v, h.scale)));
  return h;
}

struct Int8Head {
  float scale;
  std::vector<std::int8_t> q;
};
inline Int8Head QuantizeInt8(const std::vector<float>& x) {
  Int8Head h{ScaleFor(Amax(x, 0, x.size()), 127.0f), {}};
  for (float v : x) h.q.push_back(Int8(Div(v, h.scale)));
  return h;
}

struct Nvfp4Head {
  std::vector<std::uint8_t> packed;  // [n/2]
  std::vector<std::uint8_t> sf;      // [n/16]
};
inline Nvfp4Head QuantizeNvfp4(const std::vector<float>& x, float gs) {
  Nvfp4Head h;
  std::vector<std::uint8_t> nibbles;
  for (std::size_t b = 0; b < x.size() / 16; ++b) {
    const float amax = Amax(x, b * 16, b * 16 + 16);
    const std::uint8_t sf = E4M3(Mul(gs, Div(amax, 6.0f)));
    h.sf.push_back(sf);
    for (std::size_t i = b * 16; i < b * 16 + 16; ++i) {
      nibbles.push_back(sf == 0 ? 0 : E2M1(Mul(x[i], Div(gs, float(E4M3Value(sf))))));
    }
  }
  for (std::size_t i = 0; i < nibbles.size(); i += 2) {
    h.packed.push_back(std::uint8_t(nibbles[i] | (nibbles[i + 1] << 4)));
  }
  return h;
}

inline float DequantNvfp4(std::uint8_t nibble, std::uint8_t sf, float gs) {
  return Div(Mul(float(E2M1Value(nibble)), float(E4M3Value(sf))), gs);
}

inline std::uint32_t Bits(float f) { return std::bit_cast<std::uint32_t>(f); }
inline float FromBits(std::uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace kvmesh::testref
