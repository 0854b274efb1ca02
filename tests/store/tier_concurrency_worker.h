// The workload of the tier concurrency tests (tier_concurrency_test.cc: host tier alone, under
// TSan; tier_spill_concurrency_test.cc: host tier spilling into RocksDB): several threads put, get
// and erase a small set of ids, so that the same block is put, read, evicted, spilled and erased at
// once. Blocks are a function of their id, so every successful get is checked byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "store/host_tier.h"
#include "store/rocksdb_tier.h"
#include "tests/store/store_test_util.h"

namespace kvmesh::store_test {

inline constexpr TierPoolId kPool{0};
inline constexpr int kThreads = 4;
inline constexpr int kIds = 48;

inline Shape SmallShape() {
  Shape s = TierShapes()[2];   // nvfp4: data, block scales, global scale
  s.geometry.num_layers = 16;  // ~36 KiB bundles: copies long enough to overlap
  return s;
}

struct Outcome {
  std::atomic<std::int64_t> gets_ok{0}, gets_missed{0}, wrong_bytes{0}, unexpected{0};
};

// Each thread: random puts, gets (host, then disk when given) and erases of ids [0, kIds).
inline void Worker(int t, HostTier& host, RocksDbTier* disk, int ops, Outcome& out) {
  const Shape shape = SmallShape();
  const KvPoolLayout layout = LayoutOf(shape.geometry);
  TestPool src(layout, 1, shape.pool_scale), dst(layout, 1, shape.pool_scale);
  TestPool expected(layout, 1, shape.pool_scale);
  std::mt19937 rng(1000 + t);
  for (int op = 0; op < ops; ++op) {
    const int id = static_cast<int>(rng() % kIds);
    const int what = static_cast<int>(rng() % 10);
    if (what < 4) {
      src.Fill(0, id);
      const Status st =
          host.Put(kPool, IdFor(id), src.view(), 0, 20 + static_cast<int>(rng() % 30));
      if (!st.ok() && !st.IsResourceExhausted()) out.unexpected.fetch_add(1);
    } else if (what < 9) {
      Status st = host.Get(kPool, IdFor(id), dst.view(), 0);
      if (st.IsNotFound() && disk != nullptr) st = disk->Get(kPool, IdFor(id), dst.view(), 0);
      if (st.ok()) {
        expected.Fill(0, id);
        if (dst.Snapshot(0) != expected.Snapshot(0)) out.wrong_bytes.fetch_add(1);
        out.gets_ok.fetch_add(1);
      } else if (st.IsNotFound()) {
        out.gets_missed.fetch_add(1);
      } else {
        out.unexpected.fetch_add(1);
      }
    } else {
      const Status st = (rng() % 2 == 0 || disk == nullptr) ? host.Erase(kPool, IdFor(id))
                                                            : disk->Erase(kPool, IdFor(id));
      if (!st.ok() && !st.IsNotFound()) out.unexpected.fetch_add(1);
    }
  }
}

inline std::unique_ptr<HostTier> MakeHost(int slots, TierEvictionSink sink) {
  const Shape s = SmallShape();
  auto codec = BundleCodec::Create(LayoutOf(s.geometry), s.pool_scale);
  KVMESH_CHECK(codec.ok());
  HostTierOptions o;
  o.capacity_bytes = slots * ((codec->bundle_bytes() + 63) / 64 * 64);
  o.pools = {{kPool, LayoutOf(s.geometry), s.pool_scale, 0}};
  o.memory = HostMemoryKind::kAligned;
  o.on_evict = std::move(sink);
  auto tier = HostTier::Create(std::move(o));
  KVMESH_CHECK(tier.ok());
  return std::move(*tier);
}

inline void CheckCounters(const TierStats& s, int slots) {
  EXPECT_EQ(s.corrupt, 0);
  EXPECT_LE(s.entries, slots);
  EXPECT_GE(s.entries, 0);
}

}  // namespace kvmesh::store_test
