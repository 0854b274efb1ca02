// Helpers for the store/ tests: the model shapes swept by the round trips, a pool that owns its
// memory and fills blocks deterministically from a seed, content ids, and temporary directories.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/content_id.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh::store_test {

struct Shape {
  std::string name;
  KvPoolGeometry geometry;
  float pool_scale = 1.0f;
};

// Every dtype × both layouts × {llama3-8b (32 layers, 8 KV heads, 64 tokens, head_dim 128),
// small odd (1 layer, 3 heads, 2 tokens, head_dim 32), MLA 576 (DeepSeek-V3: 61 layers),
// DeepSeek-V3.2-like (MLA 576 + FP8 indexer K, 128 dims, quant block 128),
// the same with an FP4 indexer}. Pools of fp8_per_tensor and nvfp4 get pool scale 2.5.
std::vector<Shape> AllShapes();
// A few representative shapes for the tier tests (small blocks).
std::vector<Shape> TierShapes();

KvPoolLayout LayoutOf(const KvPoolGeometry& g);  // checks MakeKvPoolLayout succeeded
// 256 KiB blocks (BF16 HND, 2 layers, K and V, 4 heads, 64 tokens, head_dim 128): a few tens of
// them fill a small RocksDB tier.
KvPoolGeometry Geometry256K();

// Owns the memory of a pool of `blocks` blocks (every present component).
class TestPool {
 public:
  TestPool(const KvPoolLayout& layout, std::int64_t blocks, float pool_scale);
  const KvPoolView& view() const { return view_; }
  // Fills every component of the block with bytes derived from `seed`.
  void Fill(std::int64_t block, std::uint64_t seed);
  void FillByte(std::int64_t block, std::uint8_t value);
  // Every component of the block, concatenated in kind order.
  std::vector<std::byte> Snapshot(std::int64_t block) const;
  // The Snapshot a block filled with `seed` has.
  std::vector<std::byte> Expected(std::uint64_t seed) const;

 private:
  std::vector<std::vector<std::byte>> storage_;
  KvPoolView view_;
};

// A content id derived from `i` (SHA-256 of "store-test" and i).
ContentId IdFor(std::uint64_t i);

// A directory made with mkdtemp under $TMPDIR (or /tmp), removed with its contents at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Recomputes the checksum trailer of a bundle after a test edited it (XXH3-128 of every byte
// before the trailer, canonical form), so that a structural check must catch the edit.
void Reseal(std::vector<std::byte>& bundle);

// The field of type T at byte `off` of an encoded buffer.
template <typename T>
T FieldAt(const std::vector<std::byte>& b, std::size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// A Shape's name as the parameter name of a test (INSTANTIATE_TEST_SUITE_P).
inline std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  return info.param.name;
}

}  // namespace kvmesh::store_test
