#include "kernels/cpu/kv_row_reader.h"

#include <array>
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
  for (int i = 0; i < n; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    std::memcpy(out + i, &u, 4);  // Bf16ToFloat
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
