#include "tests/store/store_test_util.h"

#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/check.h"

namespace kvmesh::store_test {
namespace {

std::uint64_t SplitMix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillBytes(std::byte* p, std::int64_t n, std::uint64_t seed) {
  std::uint64_t state = seed;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t v = SplitMix(state);
    std::memcpy(p + i, &v, 8);
  }
  const std::uint64_t v = SplitMix(state);
  std::memcpy(p + i, &v, n - i);
}

KvPoolGeometry Geometry(KvDtype dtype, KvLayout layout, int layers, int kv, int heads, int tokens,
                        int head_dim) {
  KvPoolGeometry g;
  g.dtype = dtype;
  g.layout = layout;
  g.num_layers = layers;
  g.kv_factor = kv;
  g.num_kv_heads = heads;
  g.tokens_per_block = tokens;
  g.head_dim = head_dim;
  return g;
}

}  // namespace

std::vector<Shape> AllShapes() {
  std::vector<Shape> out;
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kFP16, KvDtype::kFP8, KvDtype::kFP8PerTensor,
                        KvDtype::kINT8, KvDtype::kNVFP4}) {
    const float scale = HasPoolScale(dtype) ? 2.5f : 1.0f;
    for (KvLayout layout : {KvLayout::kHND, KvLayout::kNHD}) {
      const std::string suffix =
          std::string(KvDtypeName(dtype)) + "_" + std::string(KvLayoutName(layout));
      out.push_back({"llama3_8b_" + suffix, Geometry(dtype, layout, 32, 2, 8, 64, 128), scale});
      out.push_back({"small_odd_" + suffix, Geometry(dtype, layout, 1, 2, 3, 2, 32), scale});
      out.push_back({"mla576_" + suffix, Geometry(dtype, layout, 61, 1, 1, 64, 576), scale});
      Shape v32{"dsv32_fp8_index_" + suffix, Geometry(dtype, layout, 61, 1, 1, 64, 576), scale};
      v32.geometry.index_layers = 61;
      v32.geometry.index_head_dim = 128;
      v32.geometry.index_quant_block = 128;
      out.push_back(v32);
      v32.name = "dsv32_fp4_index_" + suffix;
      v32.geometry.index_fp4 = true;
      v32.geometry.index_layers = 30;  // a mask selecting some layers
      out.push_back(v32);
    }
  }
  return out;
}

std::vector<Shape> TierShapes() {
  std::vector<Shape> out;
  out.push_back({"bf16_hnd", Geometry(KvDtype::kBF16, KvLayout::kHND, 2, 2, 2, 16, 64), 1.0f});
  out.push_back({"fp8_nhd", Geometry(KvDtype::kFP8, KvLayout::kNHD, 2, 2, 3, 8, 32), 1.0f});
  out.push_back({"nvfp4_hnd", Geometry(KvDtype::kNVFP4, KvLayout::kHND, 2, 2, 2, 16, 64), 2.5f});
  Shape mla{"mla_fp4_index", Geometry(KvDtype::kFP8PerTensor, KvLayout::kHND, 2, 1, 1, 16, 576),
            0.75f};
  mla.geometry.index_layers = 1;
  mla.geometry.index_head_dim = 128;
  mla.geometry.index_fp4 = true;
  out.push_back(mla);
  return out;
}

KvPoolGeometry Geometry256K() {
  KvPoolGeometry g;
  g.dtype = KvDtype::kBF16;
  g.layout = KvLayout::kHND;
  g.num_layers = 2;
  g.kv_factor = 2;
  g.num_kv_heads = 4;
  g.tokens_per_block = 64;
  g.head_dim = 128;
  return g;
}

KvPoolLayout LayoutOf(const KvPoolGeometry& g) {
  auto layout = MakeKvPoolLayout(g);
  KVMESH_CHECK(layout.ok()) << layout.status().ToString();
  return *layout;
}

TestPool::TestPool(const KvPoolLayout& layout, std::int64_t blocks, float pool_scale) {
  view_.layout = layout;
  view_.num_blocks = blocks;
  view_.pool_scale = pool_scale;
  storage_.resize(kNumKvComponents);
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = layout.components[c];
    if (!t.present()) continue;
    storage_[c].assign(t.BytesPerBlock() * blocks, std::byte{0});
    view_.base[c] = storage_[c].data();
  }
}

void TestPool::Fill(std::int64_t block, std::uint64_t seed) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = view_.layout.components[c];
    if (!t.present()) continue;
    FillBytes(reinterpret_cast<std::byte*>(view_.BlockBytes(static_cast<KvComponent>(c), block)),
              t.BytesPerBlock(), seed * 4 + c);
  }
}

void TestPool::FillByte(std::int64_t block, std::uint8_t value) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = view_.layout.components[c];
    if (!t.present()) continue;
    std::memset(view_.BlockBytes(static_cast<KvComponent>(c), block), value, t.BytesPerBlock());
  }
}

std::vector<std::byte> TestPool::Snapshot(std::int64_t block) const {
  std::vector<std::byte> out;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = view_.layout.components[c];
    if (!t.present()) continue;
    const auto* p =
        reinterpret_cast<const std::byte*>(view_.BlockBytes(static_cast<KvComponent>(c), block));
    out.insert(out.end(), p, p + t.BytesPerBlock());
  }
  return out;
}

std::vector<std::byte> TestPool::Expected(std::uint64_t seed) const {
  std::vector<std::byte> out;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& t = view_.layout.components[c];
    if (!t.present()) continue;
    std::vector<std::byte> part(t.BytesPerBlock());
    FillBytes(part.data(), t.BytesPerBlock(), seed * 4 + c);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

ContentId IdFor(std::uint64_t i) {
  Sha256 h;
  h.Update("store-test", 10);
  h.UpdateValue(i);
  return h.FinishContentId();
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kvmesh-store-XXXXXX";
  KVMESH_CHECK(mkdtemp(tmpl.data()) != nullptr) << "mkdtemp " << tmpl;
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void Reseal(std::vector<std::byte>& bundle) {
  KVMESH_CHECK(bundle.size() >= 16);
  const std::size_t body = bundle.size() - 16;
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(bundle.data(), body));
  std::memcpy(bundle.data() + body, c.digest, 16);
}

}  // namespace kvmesh::store_test
