// KvRowReader (the CPU attention kernels' dequantise-on-read) against kernels/quantize.h's
// Dequantize* head functions, bit for bit, over every code of every cache dtype: all 65536 BF16 and
// FP16 patterns (NaN, Inf, subnormals), all 256 FP8/INT8 codes under many scales, all 256 NVFP4
// bytes under all 256 block-scale codes (NaN scales too), in both layouts and both layers.
#include "kernels/cpu/kv_row_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/kernels/attention_reference.h"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh {
namespace {

constexpr int kHeadDim = 256;
constexpr int kTokensPerBlock = 16;
constexpr int kLayers = 2;
constexpr int kHeads = 2;

KvPoolLayout Layout(KvDtype dtype, KvLayout order) {
  KvPoolGeometry g;
  g.dtype = dtype;
  g.layout = order;
  g.num_layers = kLayers;
  g.kv_factor = 2;
  g.num_kv_heads = kHeads;
  g.tokens_per_block = kTokensPerBlock;
  g.head_dim = kHeadDim;
  return MakeKvPoolLayout(g).value();
}

// Data bytes count up (16-bit types: 16-bit words count up), so the rows of a pool of `blocks`
// blocks hold every code; FP32 scales span many binades; block scales count up.
void FillPatterns(testing::HostKvPool& pool) {
  std::vector<std::uint8_t>& data = pool.storage[0];
  if (KvDtypeBits(pool.view.layout.dtype) == 16) {
    for (std::size_t i = 0; i + 1 < data.size(); i += 2) {
      const auto w = static_cast<std::uint16_t>(i / 2);
      std::memcpy(&data[i], &w, 2);
    }
  } else {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i + i / 256);
  }
  std::vector<std::uint8_t>& scales = pool.storage[1];
  if (ScaleKindOf(pool.view.layout.dtype) == KvScaleKind::kPerTokenHead) {
    for (std::size_t i = 0; i + 3 < scales.size(); i += 4) {
      const float s =
          std::ldexp(1.0f + static_cast<float>(i % 7) / 7.0f, static_cast<int>(i / 4 % 60) - 30);
      std::memcpy(&scales[i], &s, 4);
    }
  } else if (ScaleKindOf(pool.view.layout.dtype) == KvScaleKind::kBlock16) {
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(i * 7);
  }
}

void ExpectReaderMatchesQuantizeH(KvDtype dtype, KvLayout order, std::int64_t blocks) {
  SCOPED_TRACE(StrCat(KvDtypeName(dtype), " ", KvLayoutName(order)));
  testing::HostKvPool pool(Layout(dtype, order), blocks, testing::DefaultPoolScale(dtype));
  FillPatterns(pool);
  std::vector<float> row(kHeadDim);
  int mismatches = 0;
  for (int layer = 0; layer < kLayers; ++layer) {
    const cpu::KvRowReader reader(pool.view, layer);
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int h = 0; h < kHeads; ++h) {
          for (int t = 0; t < kTokensPerBlock; ++t) {
            reader.Read(b, kv, h, t, row.data());
            const std::vector<float> want =
                testing::ReferenceDequantizedRow(pool.view, layer, kv, h, b, t);
            if (std::memcmp(row.data(), want.data(), sizeof(float) * kHeadDim) != 0) ++mismatches;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(KvRowReader, BitExactAgainstQuantizeHeadFunctions) {
  for (const KvLayout order : {KvLayout::kHND, KvLayout::kNHD}) {
    // 16-bit: 2 layers × 2 kv × 2 heads × 16 tokens × 256 = 32768 words per block, read in both
    // layers; 4 blocks cover every pattern twice.
    ExpectReaderMatchesQuantizeH(KvDtype::kBF16, order, 4);
    ExpectReaderMatchesQuantizeH(KvDtype::kFP16, order, 4);
    for (const KvDtype dtype :
         {KvDtype::kFP8, KvDtype::kFP8PerTensor, KvDtype::kINT8, KvDtype::kNVFP4}) {
      ExpectReaderMatchesQuantizeH(dtype, order, 3);
    }
  }
}

}  // namespace
}  // namespace kvmesh
