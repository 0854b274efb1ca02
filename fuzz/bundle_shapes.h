// The pool geometries of the bundle_codec fuzz target (fuzz/bundle_codec_fuzzer.cc), shared with
// the seed generator (fuzz/seed_corpus.cc) so that its bundles fit the target's codecs: small
// blocks of every kind of component — bf16, fp8 with per-token-head scales, int8, fp8 with a
// per-tensor scale, nvfp4 with block scales and a global scale, an MLA latent with an FP4 indexer;
// HND and NHD. The source block of each codec is filled by FillSourceBlock.
#pragma once

#include <utility>
#include <vector>

#include "common/content_id.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh::fuzz {

inline KvPoolGeometry BundleGeometry(KvDtype dtype, KvLayout order, int layers, int kv, int heads,
                                     int tokens, int head_dim) {
  KvPoolGeometry g;
  g.dtype = dtype;
  g.layout = order;
  g.num_layers = layers;
  g.kv_factor = kv;
  g.num_kv_heads = heads;
  g.tokens_per_block = tokens;
  g.head_dim = head_dim;
  return g;
}

// (geometry, pool scale), in the order the target's codec byte picks them.
inline std::vector<std::pair<KvPoolGeometry, float>> BundleShapes() {
  std::vector<std::pair<KvPoolGeometry, float>> shapes = {
      {BundleGeometry(KvDtype::kBF16, KvLayout::kHND, 1, 2, 3, 2, 32), 1.0f},
      {BundleGeometry(KvDtype::kFP8, KvLayout::kNHD, 2, 2, 2, 4, 16), 1.0f},
      {BundleGeometry(KvDtype::kINT8, KvLayout::kHND, 1, 2, 1, 4, 16), 1.0f},
      {BundleGeometry(KvDtype::kFP8PerTensor, KvLayout::kHND, 1, 2, 2, 2, 16), 0.5f},
      {BundleGeometry(KvDtype::kNVFP4, KvLayout::kNHD, 1, 2, 2, 4, 32), 2.5f},
  };
  KvPoolGeometry mla = BundleGeometry(KvDtype::kFP8, KvLayout::kHND, 2, 1, 1, 2, 64);
  mla.index_layers = 2;
  mla.index_head_dim = 128;
  mla.index_fp4 = true;
  shapes.emplace_back(mla, 1.0f);
  return shapes;
}

// Deterministic content for block `block` of every component of `v`.
inline void FillSourceBlock(const KvPoolView& v, std::int64_t block) {
  for (int k = 0; k < kNumKvComponents; ++k) {
    if (!v.layout.components[k].present()) continue;
    std::uint8_t* p = v.BlockBytes(static_cast<KvComponent>(k), block);
    const std::int64_t n = v.layout.components[k].BytesPerBlock();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 13 + k);
  }
}

// The content id the target's valid bundles carry (seed 1) and another one (seed 2).
inline ContentId BundleId(std::uint8_t seed) {
  ContentId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) {
    id.bytes[i] = static_cast<std::uint8_t>(seed * 31 + i * 7);
  }
  return id;
}

}  // namespace kvmesh::fuzz
