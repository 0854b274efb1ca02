#include "kernels/cpu/kv_row_reader.h"

#include <array>
#include <bit>
#include <cstring>

#include "kernels/conversions.h"
#include "kernels/quantize.h"

namespace kvmesh::cpu {
namespace {

const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = E4M3ToFloat(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table;
}

void ReadBf16(const std::uint8_t* src, int n, float* out) {
  // Bf16ToFloat (a 16-bit shift), eight at a time; n is a multiple of 16 for every head_dim here,
  // the tail loop covers the rest.
  typedef std::uint16_t U16x8 __attribute__((vector_size(16)));
  const U16x8 zero = {};
  int i = 0;
  // Interleaving assumes element 0 is the low half of a word; elsewhere the scalar loop runs.
  const int vector_end = std::endian::native == std::endian::little ? n : 0;
  for (; i + 8 <= vector_end; i += 8) {
    U16x8 bits;
    std::memcpy(&bits, src + 2 * i, sizeof(bits));
    // Interleaving a zero below each 16-bit pattern gives the 32-bit word bits << 16.
    const U16x8 lo = __builtin_shufflevector(zero, bits, 0, 8, 1, 9, 2, 10, 3, 11);
    const U16x8 hi = __builtin_shufflevector(zero, bits, 4, 12, 5, 13, 6, 14, 7, 15);
    std::memcpy(out + i, &lo, sizeof(lo));
    std::memcpy(out + i + 4, &hi, sizeof(hi));
  }
  for (; i < n; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    std::memcpy(out + i, &u, 4);
  }
}

void ReadFp16(const std::uint8_t* src, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    out[i] = HalfToFloat(bits);
  }
}

void ReadFp8(const std::uint8_t* src, int n, float scale, float* out) {
  const std::array<float, 256>& table = E4M3Table();
  for (int i = 0; i < n; ++i) out[i] = MulRn(table[src[i]], scale);  // DequantizeFp8Element
}

void ReadInt8(const std::uint8_t* src, int n, float scale, float* out) {
  for (int i = 0; i < n; ++i) {
    out[i] = MulRn(Int8ToFloat(static_cast<std::int8_t>(src[i])), scale);  // DequantizeInt8Element
  }
}

void ReadNvfp4(const std::uint8_t* packed, const std::uint8_t* block_scales, int n,
               const float* table, float* out) {
  for (int b = 0; b < n / kNvfp4BlockSize; ++b) {
    const float* row = table + 16 * block_scales[b];
    for (int i = 0; i < kNvfp4BlockSize / 2; ++i) {
      const std::uint8_t byte = packed[b * kNvfp4BlockSize / 2 + i];
      out[b * kNvfp4BlockSize + 2 * i] = row[byte & 0xFu];
      out[b * kNvfp4BlockSize + 2 * i + 1] = row[byte >> 4];
    }
  }
}

}  // namespace

KvRowReader::KvRowReader(const KvPoolView& pool, std::int32_t layer)
    : dtype_(pool.layout.dtype),
      data_(pool.layout.data()),
      scale_(pool.layout.scale()),
      data_base_(static_cast<const std::uint8_t*>(pool.base[static_cast<int>(KvComponent::kData)])),
      scale_base_(
          static_cast<const std::uint8_t*>(pool.base[static_cast<int>(KvComponent::kScale)])),
      layer_(layer),
      pool_scale_(pool.pool_scale) {
  if (dtype_ == KvDtype::kNVFP4) {
    nvfp4_table_.resize(256 * 16);
    for (int sf = 0; sf < 256; ++sf) {
      for (int nibble = 0; nibble < 16; ++nibble) {
        nvfp4_table_[sf * 16 + nibble] = DequantizeNvfp4Element(
            static_cast<std::uint8_t>(nibble), static_cast<std::uint8_t>(sf), pool_scale_);
      }
    }
  }
}

void KvRowReader::Read(std::int64_t block, int kv, int head, int slot, float* out) const {
  const int n = data_.inner;
  const std::uint8_t* row = data_base_ + data_.ByteOffset(block, layer_, kv, head, slot, 0);
  switch (dtype_) {
    case KvDtype::kBF16: ReadBf16(row, n, out); return;
    case KvDtype::kFP16: ReadFp16(row, n, out); return;
    case KvDtype::kFP8PerTensor: ReadFp8(row, n, pool_scale_, out); return;
    case KvDtype::kFP8:
    case KvDtype::kINT8: {
      float scale;
      std::memcpy(&scale, scale_base_ + scale_.ByteOffset(block, layer_, kv, head, slot, 0),
                  sizeof(float));
      if (dtype_ == KvDtype::kFP8) {
        ReadFp8(row, n, scale, out);
      } else {
        ReadInt8(row, n, scale, out);
      }
      return;
    }
    case KvDtype::kNVFP4: {
      const std::uint8_t* scales =
          scale_base_ + scale_.ByteOffset(block, layer_, kv, head, slot, 0);
      ReadNvfp4(row, scales, n, nvfp4_table_.data(), out);
      return;
    }
  }
}

}  // namespace kvmesh::cpu
