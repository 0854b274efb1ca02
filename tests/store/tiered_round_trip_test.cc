// The whole offload/onboard path for every dtype, layout and model shape (store_test::AllShapes:
// a Llama-like pool, a small odd one, the MLA 576 latent, DeepSeek-V3.2-like pools with an FP8 or
// FP4 indexer K; FP8/INT8 with their per-token-head scales, NVFP4 with its block scales and
// global scale): blocks written by the CPU append kernel (quantise-on-write, every layer, indexer
// K too), evicted from the pool into the host tier, spilled on into RocksDB, restored from each
// into the pool, and restored into a fresh manager and pool over the same RocksDB directory —
// every component compared byte for byte. RocksDB runs on its in-memory Env here (opening a
// database on disk costs ~0.1 s, times 60 shapes); the other tier tests use real files.
//
// The shapes are AllShapes() with at most 2 layers (and 2 or 1 indexer layers, keeping "every
// layer" vs "a mask selecting some"): the layer count changes no code path, and 32-61 layers made
// the test take over a minute under ASan.
#include <gtest/gtest.h>
#include <rocksdb/env.h>

#include <algorithm>

#include "kernels/append_kv.h"
#include "tests/store/store_test_util.h"
#include "tests/store/tiered_test_util.h"

namespace kvmesh {
namespace {

using store_test::Doc;
using store_test::LayoutOf;
using store_test::Rig;
using store_test::RigOptions;
using store_test::Shape;
using store_test::TempDir;
using store_test::WholeBlocks;

// Activations in [-8, 8) from a splitmix64 stream (cheap: a normal distribution dominated the
// test's time on the large shapes).
std::vector<float> Values(std::size_t n, std::uint64_t& state) {
  std::vector<float> v(n);
  for (float& x : v) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = static_cast<float>(static_cast<std::int64_t>(z >> 40) - (1 << 23)) / (1 << 20);
  }
  return v;
}

// Writes every layer's K/V (and indexer K) of one full block through the append kernel.
void AppendBlock(const KvPoolGeometry& g, const KvPoolView& pool, std::int32_t block,
                 std::uint64_t seed) {
  std::uint64_t rng = seed;
  const std::int32_t t = g.tokens_per_block;
  const std::vector<std::int32_t> cu{0, t}, start{0}, table{block};
  const std::size_t n = static_cast<std::size_t>(t) * g.num_kv_heads * g.head_dim;
  for (std::int32_t layer = 0; layer < g.num_layers; ++layer) {
    const std::vector<float> k = Values(n, rng), v = Values(n, rng);
    AppendKvArgs a;
    a.pool = pool;
    a.layer = layer;
    a.num_seqs = 1;
    a.cu_tokens = cu.data();
    a.start_pos = start.data();
    a.block_table = table.data();
    a.max_blocks_per_seq = 1;
    a.act_dtype = ActDtype::kFP32;
    a.k = k.data();
    a.v = g.kv_factor == 2 ? v.data() : nullptr;
    a.total_tokens = t;
    const Status st = cpu::AppendKv(a, nullptr);
    KVMESH_CHECK(st.ok()) << st.ToString();
  }
  for (std::int32_t layer = 0; layer < g.index_layers; ++layer) {
    const std::vector<float> k = Values(static_cast<std::size_t>(t) * g.index_head_dim, rng);
    AppendIndexKArgs a;
    a.pool = pool;
    a.index_layer = layer;
    a.num_seqs = 1;
    a.cu_tokens = cu.data();
    a.start_pos = start.data();
    a.block_table = table.data();
    a.max_blocks_per_seq = 1;
    a.act_dtype = ActDtype::kFP32;
    a.index_k = k.data();
    a.total_tokens = t;
    const Status st = cpu::AppendIndexK(a, nullptr);
    KVMESH_CHECK(st.ok()) << st.ToString();
  }
}

// Every present component of a block, concatenated.
std::vector<std::uint8_t> Snapshot(const KvPoolView& pool, std::int32_t block) {
  std::vector<std::uint8_t> out;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const PagedTensorLayout& t = pool.layout.components[c];
    if (!t.present()) continue;
    const std::uint8_t* p = pool.BlockBytes(static_cast<KvComponent>(c), block);
    out.insert(out.end(), p, p + t.BytesPerBlock());
  }
  return out;
}

// Admits the prompt, writes it with the append kernel, stores and removes it; its bytes.
std::vector<std::uint8_t> WriteByAppend(Rig& rig, const KvPoolGeometry& g, std::uint64_t request,
                                        const std::vector<Token>& prompt) {
  auto r = rig.cache().AddSequence(RequestId{request}, prompt, WholeBlocks());
  KVMESH_CHECK(r.ok()) << r.status().ToString();
  KVMESH_CHECK(r->reused_blocks == 0);
  const std::int32_t block = r->tables[0].block_ids[0];
  AppendBlock(g, rig.view(), block, request);
  KVMESH_CHECK(rig.manager().StoreFullBlocks(RequestId{request}).ok());
  KVMESH_CHECK(rig.manager().RemoveSequence(RequestId{request}).ok());
  return Snapshot(rig.view(), block);
}

// The bytes of the admitted prompt's block after a restore (expected: reused).
std::vector<std::uint8_t> ReadRestored(Rig& rig, std::uint64_t request,
                                       const std::vector<Token>& prompt) {
  auto r = rig.cache().AddSequence(RequestId{request}, prompt, WholeBlocks());
  KVMESH_CHECK(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reused_blocks, 1);
  std::vector<std::uint8_t> out = Snapshot(rig.view(), r->tables[0].block_ids[0]);
  KVMESH_CHECK(rig.manager().RemoveSequence(RequestId{request}).ok());
  return out;
}

std::vector<Shape> RoundTripShapes() {
  std::vector<Shape> out = store_test::AllShapes();
  for (Shape& s : out) {
    KvPoolGeometry& g = s.geometry;
    if (g.index_layers > 0) g.index_layers = g.index_layers == g.num_layers ? 2 : 1;
    g.num_layers = std::min(g.num_layers, 2);
  }
  return out;
}

class TieredRoundTrip : public ::testing::TestWithParam<Shape> {};

TEST_P(TieredRoundTrip, AppendEvictSpillRestoreAndWarmRestart) {
  const Shape& s = GetParam();
  std::unique_ptr<rocksdb::Env> env(rocksdb::NewMemEnv(rocksdb::Env::Default()));
  RigOptions o;
  o.layout = LayoutOf(s.geometry);
  o.pool_scale = s.pool_scale;
  o.pool_blocks = 2;
  o.host_blocks = 2;
  o.disk_path = "/kvmesh-round-trip";
  o.disk_env = env.get();
  o.disk_blocks = 16;
  const std::int32_t t = s.geometry.tokens_per_block;
  const auto a = Doc(t, 1), b = Doc(t, 2);
  std::vector<std::uint8_t> bytes_a, bytes_b;
  {
    Rig rig(o);
    bytes_a = WriteByAppend(rig, s.geometry, 1, a);
    bytes_b = WriteByAppend(rig, s.geometry, 2, b);
    rig.Run(3, Doc(t, 3), WholeBlocks());  // A → host
    rig.Run(4, Doc(t, 4), WholeBlocks());  // B → host
    rig.engine().Drain();
    EXPECT_EQ(rig.engine().stats().offload.blocks, 2);
    // B's restore first evicts C into the host tier, which spills A (least recently used) into
    // RocksDB; B comes from the host tier. A's restore then finds A in RocksDB only.
    EXPECT_EQ(ReadRestored(rig, 6, b), bytes_b);
    rig.engine().Drain();  // A is in RocksDB now, no longer staged
    EXPECT_EQ(ReadRestored(rig, 7, a), bytes_a);
    EXPECT_GE(rig.engine().stats().spill.blocks, 1);
    const TieredCacheStats ts = rig.cache().stats();
    EXPECT_EQ(ts.host_hit_blocks, 1);
    EXPECT_EQ(ts.disk_hit_blocks, 1);
    EXPECT_EQ(ts.offload.onboard_corrupt, 0);
  }
  Rig fresh(o);  // a new manager and pool, the same RocksDB directory
  EXPECT_EQ(ReadRestored(fresh, 1, a), bytes_a);
  EXPECT_EQ(fresh.cache().stats().disk_hit_blocks, 1);
}

INSTANTIATE_TEST_SUITE_P(AllShapes, TieredRoundTrip, ::testing::ValuesIn(RoundTripShapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kvmesh
