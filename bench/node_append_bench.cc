// node_append_bench: the synthetic engine's prefill write — the append kernel (quantise-on-write,
// CPU backend) of every layer of a prompt's K/V into a pool — into shared pool memory (a memfd the
// node created, mapped by this process as an attached engine maps it: node/shared_memory.h)
// against private memory of the same size (AlignedBuffer, as PoolStorage allocates), same
// geometry (qwen2.5-0.5b: 24 layers, 2 KV heads of 64, 16 tokens per block), both prefaulted.
// K/V are generated once before timing; each repeat appends the same rows into both pools, in
// alternating order, and the ratio is the median of the per-repeat ratios.
//
//   RATIO node_append_shared_vs_private  (tokens/s into shared) / (tokens/s into private)  >= 0.95
//
//   node_append_bench [--tokens N] [--repeats R] [--dtype bf16|fp8|nvfp4|...]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/check.h"
#include "kernels/append_kv.h"
#include "node/shared_memory.h"
#include "node/synthetic_kv.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;

// A view over `bytes` at `base`, components at 4 KiB-aligned offsets.
KvPoolView ViewAt(const KvPoolLayout& layout, std::int64_t blocks, std::uint8_t* base) {
  KvPoolView v;
  v.layout = layout;
  v.num_blocks = blocks;
  std::int64_t off = 0;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!layout.components[c].present()) continue;
    v.base[c] = base + off;
    off += (layout.components[c].BytesPerBlock() * blocks + 4095) / 4096 * 4096;
  }
  return v;
}

std::int64_t PoolBytes(const KvPoolLayout& layout, std::int64_t blocks) {
  std::int64_t total = 0;
  for (const auto& c : layout.components) {
    if (c.present()) total += (c.BytesPerBlock() * blocks + 4095) / 4096 * 4096;
  }
  return total;
}

double AppendAll(const KvPoolView& pool, const std::vector<float>& k, const std::vector<float>& v,
                 std::int32_t tokens, const std::vector<std::int32_t>& table) {
  const std::int32_t cu[2] = {0, tokens};
  const std::int32_t start = 0;
  const auto t0 = Steady::now();
  for (std::int32_t layer = 0; layer < pool.layout.data().num_layers; ++layer) {
    AppendKvArgs a;
    a.pool = pool;
    a.layer = layer;
    a.num_seqs = 1;
    a.cu_tokens = cu;
    a.start_pos = &start;
    a.block_table = table.data();
    a.max_blocks_per_seq = static_cast<std::int32_t>(table.size());
    a.act_dtype = ActDtype::kFP32;
    a.k = k.data() + static_cast<std::size_t>(layer) * k.size() / 24;
    a.v = v.data() + static_cast<std::size_t>(layer) * v.size() / 24;
    a.total_tokens = tokens;
    KVMESH_CHECK(cpu::AppendKv(a, nullptr).ok());
  }
  return std::chrono::duration<double>(Steady::now() - t0).count();
}

int Run(int argc, char** argv) {
  std::int32_t tokens = 4096;
  int repeats = 9;
  std::string dtype_name = "bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--tokens") tokens = std::atoi(argv[i + 1]);
    if (key == "--repeats") repeats = std::atoi(argv[i + 1]);
    if (key == "--dtype") dtype_name = argv[i + 1];
  }
  auto dtype = ParseKvDtype(dtype_name);
  KVMESH_CHECK(dtype.ok()) << dtype.status().ToString();
  constexpr std::int32_t kLayers = 24, kHeads = 2, kDim = 64, kT = 16;
  KvPoolGeometry g;
  g.dtype = *dtype;
  g.num_layers = kLayers;
  g.num_kv_heads = kHeads;
  g.tokens_per_block = kT;
  g.head_dim = kDim;
  auto layout = MakeKvPoolLayout(g);
  KVMESH_CHECK(layout.ok());
  const std::int64_t blocks = tokens / kT;
  const std::int64_t bytes = PoolBytes(*layout, blocks);
  auto private_buf = AlignedBuffer::Allocate(static_cast<std::size_t>(bytes));
  KVMESH_CHECK(private_buf.ok());
  std::memset(private_buf->data(), 0, private_buf->size());  // prefaulted
  auto memfd = SharedMemory::Create("kvmesh-append-bench", static_cast<std::size_t>(bytes), true);
  KVMESH_CHECK(memfd.ok()) << memfd.status().ToString();
  auto mapping = SharedMemory::Map(::dup(memfd->fd()), static_cast<std::size_t>(bytes));
  KVMESH_CHECK(mapping.ok()) << mapping.status().ToString();
  std::memset(mapping->data(), 0, mapping->size());
  const KvPoolView shared = ViewAt(*layout, blocks, static_cast<std::uint8_t*>(mapping->data()));
  const KvPoolView priv =
      ViewAt(*layout, blocks, reinterpret_cast<std::uint8_t*>(private_buf->data()));
  // K/V of every layer, generated once (the synthetic engine's function).
  const std::size_t per_layer = static_cast<std::size_t>(tokens) * kHeads * kDim;
  std::vector<float> k(per_layer * kLayers), v(per_layer * kLayers);
  for (std::int32_t l = 0; l < kLayers; ++l) {
    for (std::int32_t t = 0; t < tokens; ++t) {
      for (std::int32_t h = 0; h < kHeads; ++h) {
        const std::size_t off = l * per_layer + (static_cast<std::size_t>(t) * kHeads + h) * kDim;
        SyntheticKvHead(static_cast<std::uint64_t>(t) * 7919 + 1, l, 0, h, {k.data() + off, kDim});
        SyntheticKvHead(static_cast<std::uint64_t>(t) * 7919 + 1, l, 1, h, {v.data() + off, kDim});
      }
    }
  }
  std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(i);
  std::vector<double> ratios;
  double best_shared = 1e18, best_private = 1e18;
  for (int r = 0; r < repeats; ++r) {
    double ts, tp;
    if (r % 2 == 0) {
      ts = AppendAll(shared, k, v, tokens, table);
      tp = AppendAll(priv, k, v, tokens, table);
    } else {
      tp = AppendAll(priv, k, v, tokens, table);
      ts = AppendAll(shared, k, v, tokens, table);
    }
    best_shared = std::min(best_shared, ts);
    best_private = std::min(best_private, tp);
    ratios.push_back(tp / ts);  // (tokens/s shared) / (tokens/s private)
  }
  std::sort(ratios.begin(), ratios.end());
  const double kv_bytes = static_cast<double>(blocks * layout->BytesPerBlock());
  std::printf(
      "append of %d tokens x %d layers (%s, %.1f MiB of pool written per pass), %d repeats\n",
      tokens, kLayers, dtype_name.c_str(), kv_bytes / (1 << 20), repeats);
  std::printf("  shared memory (memfd, engine mapping)  %8.0f tokens/s  %6.2f GB/s\n",
              tokens / best_shared, kv_bytes / best_shared / 1e9);
  std::printf("  private memory (aligned buffer)        %8.0f tokens/s  %6.2f GB/s\n",
              tokens / best_private, kv_bytes / best_private / 1e9);
  std::printf("RATIO node_append_shared_vs_private %.3f private_memory goal>=0.95\n",
              ratios[ratios.size() / 2]);
  return 0;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) { return kvmesh::Run(argc, argv); }
