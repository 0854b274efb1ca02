#include "store/synthetic_block.h"

#include <cstring>

#include "common/check.h"

namespace kvmesh {
namespace {

std::uint64_t Seed(const ContentId& id, int component) {
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  std::memcpy(&a, id.bytes.data(), 8);
  std::memcpy(&b, id.bytes.data() + 8, 8);
  return a ^ (b * 0x9E3779B97F4A7C15ull) ^ static_cast<std::uint64_t>(component + 1);
}

std::uint64_t Next(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Calls visit(component bytes, size, seed) for every present component of the block.
template <typename F>
void ForEachComponent(const KvPoolView& pool, std::int64_t block, const ContentId& id, F&& visit) {
  KVMESH_CHECK(block >= 0 && block < pool.num_blocks) << "block " << block;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const PagedTensorLayout& t = pool.layout.components[c];
    if (!t.present()) continue;
    visit(pool.BlockBytes(static_cast<KvComponent>(c), block), t.BytesPerBlock(), Seed(id, c));
  }
}

}  // namespace

void FillSyntheticBlock(const KvPoolView& pool, std::int64_t block, const ContentId& id) {
  ForEachComponent(pool, block, id, [](std::uint8_t* p, std::int64_t n, std::uint64_t state) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const std::uint64_t v = Next(state);
      std::memcpy(p + i, &v, 8);
    }
    if (i < n) {
      const std::uint64_t v = Next(state);
      std::memcpy(p + i, &v, static_cast<std::size_t>(n - i));
    }
  });
}

bool SyntheticBlockMatches(const KvPoolView& pool, std::int64_t block, const ContentId& id) {
  bool ok = true;
  ForEachComponent(pool, block, id, [&ok](std::uint8_t* p, std::int64_t n, std::uint64_t state) {
    std::int64_t i = 0;
    for (; ok && i + 8 <= n; i += 8) {
      const std::uint64_t v = Next(state);
      ok = std::memcmp(p + i, &v, 8) == 0;
    }
    if (ok && i < n) {
      const std::uint64_t v = Next(state);
      ok = std::memcmp(p + i, &v, static_cast<std::size_t>(n - i)) == 0;
    }
  });
  return ok;
}

}  // namespace kvmesh
