// A TieredCache over one pool in emulated device memory (store/emulated_device.h): the
// engine sees only PROT_NONE addresses and stages every copy through host memory; the test writes
// and checks blocks through the pool's read-write alias. Tier capacities in blocks, as in Rig
// (tiered_test_util.h).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "common/check.h"
#include "store/emulated_device.h"
#include "store/synthetic_block.h"
#include "store/tiered_cache.h"
#include "tests/store/tiered_test_util.h"

namespace kvmesh::store_test {

// Device pool options over the emulated device: pool p on ordinals[p], aligned staging memory,
// staging areas of staging_area_bytes (0: the default).
inline DevicePoolsOptions EmulatedDevicePools(EmulatedDevice& device, std::vector<int> ordinals,
                                              std::int64_t staging_area_bytes) {
  DevicePoolsOptions d;
  d.device = std::move(ordinals);
  d.make_backend = device.BackendFactory();
  d.staging_memory = HostMemoryKind::kAligned;  // no CUDA here
  if (staging_area_bytes > 0) d.staging_area_bytes = staging_area_bytes;
  return d;
}

class DeviceRig {
 public:
  // staging_blocks: blocks per staging area (0: the default area of 64 MiB).
  explicit DeviceRig(const RigOptions& o, std::int64_t staging_blocks = 0) : options_(o) {
    pool_ = device_.AllocatePool(o.layout, o.pool_blocks, o.pool_scale).value();
    TieredCacheOptions t;
    t.manager.tokens_per_block = o.layout.tokens_per_block();
    t.manager.pools.push_back(BlockPoolConfig{"pool", o.pool_blocks, 0});
    t.manager.key_namespace.model_id = "tiered-test";
    t.manager.eviction_policy = o.policy;
    t.manager.max_moving_out_blocks = o.max_moving_out;
    t.env.pool_memory = {pool_.device};
    const std::int64_t bundle = BundleBytes(o.layout, o.pool_scale);
    t.offload.host_capacity_bytes = o.host_blocks * ((bundle + 63) / 64 * 64);
    t.offload.host_memory = HostMemoryKind::kAligned;
    t.offload.host_prefault = false;
    t.offload.host_eviction_policy = o.host_policy;
    if (!o.disk_path.empty()) {
      RocksDbTierOptions d;
      d.path = o.disk_path;
      d.capacity_bytes = o.disk_blocks * bundle;
      d.write_buffer_bytes = 4 << 20;
      d.env = o.disk_env;
      t.offload.disk = d;
    }
    t.offload.copy_threads = o.copy_threads;
    t.offload.offload_min_priority = o.offload_min_priority;
    t.offload.device_pools =
        EmulatedDevicePools(device_, {0}, staging_blocks * o.layout.BytesPerBlock());
    auto cache = TieredCache::Create(std::move(t));
    KVMESH_CHECK(cache.ok()) << cache.status().ToString();
    cache_ = std::move(cache).value();
  }

  TieredCache& cache() { return *cache_; }
  BlockManager& manager() { return cache_->manager(); }
  OffloadEngine& engine() { return cache_->engine(); }
  EmulatedDevice& device() { return device_; }
  // The pool through its read-write alias (the test's view; never the engine's).
  const KvPoolView& alias() const { return pool_.alias; }
  const KvPoolView& device_view() const { return pool_.device; }
  std::int32_t tokens_per_block() const { return options_.layout.tokens_per_block(); }

  std::vector<ContentId> Ids(const std::vector<Token>& prompt, const SequenceOptions& o) {
    auto plan = manager().PlanRestore(prompt, o);
    KVMESH_CHECK(plan.ok());
    return plan->content_ids;
  }

  // As Rig::Run: admits through the tiers, writes the blocks it did not reuse (through the
  // alias, as an engine's kernels would), stores and removes.
  AddSequenceResult Run(std::uint64_t request, const std::vector<Token>& prompt,
                        const SequenceOptions& o) {
    const std::vector<ContentId> ids = Ids(prompt, o);
    auto r = cache_->AddSequence(RequestId{request}, prompt, o);
    KVMESH_CHECK(r.ok()) << r.status().ToString();
    for (std::size_t i = static_cast<std::size_t>(r->reused_blocks); i < ids.size(); ++i) {
      FillSyntheticBlock(alias(), r->tables[0].block_ids[i], ids[i]);
    }
    KVMESH_CHECK(manager().StoreFullBlocks(RequestId{request}).ok());
    KVMESH_CHECK(manager().RemoveSequence(RequestId{request}).ok());
    return *r;
  }

  bool ReusedBytesMatch(const std::vector<Token>& prompt, const SequenceOptions& o,
                        const AddSequenceResult& r) {
    const std::vector<ContentId> ids = Ids(prompt, o);
    for (std::int64_t i = 0; i < r.reused_blocks; ++i) {
      if (!SyntheticBlockMatches(alias(), r.tables[0].block_ids[i], ids[i])) return false;
    }
    return true;
  }

 private:
  RigOptions options_;
  EmulatedDevice device_;  // outlives the cache (its backends)
  EmulatedDevice::Pool pool_;
  std::unique_ptr<TieredCache> cache_;
};

}  // namespace kvmesh::store_test
