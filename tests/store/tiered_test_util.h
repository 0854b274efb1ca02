// Helpers for the tests of the offload/onboard path: a TieredCache over its own pool memory with
// tier capacities given in blocks, and prompts whose blocks are written with content derived from
// their content ids (store/synthetic_block.h).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"
#include "pool/pool_storage.h"
#include "store/block_bundle.h"
#include "store/emulated_device.h"
#include "store/synthetic_block.h"
#include "store/tiered_cache.h"

namespace kvmesh::store_test {

struct RigOptions {
  KvPoolLayout layout;
  float pool_scale = 1.0f;
  std::int64_t pool_blocks = 4;
  std::int64_t host_blocks = 0;  // 0 = no host tier
  std::string disk_path;         // empty = no disk tier
  std::int64_t disk_blocks = 0;
  std::int64_t disk_fixed_budget_bytes = 0;  // RocksDbTierOptions::fixed_budget_bytes (0: learned)
  rocksdb::Env* disk_env = nullptr;          // null: the default (real files)
  int copy_threads = 1;
  int offload_min_priority = kTierDefaultPriority;
  EvictionPolicyKind policy = EvictionPolicyKind::kPriorityLru;
  EvictionPolicyKind host_policy = EvictionPolicyKind::kPriorityLru;  // the host tier's order
  // 0: an allocation waits for each deferred victim (the eviction order of a synchronous copy,
  // so that counts are exact while copies still run on the workers).
  std::int64_t max_moving_out = 0;
  // The pool in emulated device memory (store/emulated_device.h: PROT_NONE addresses for the
  // cache, every copy staged), with staging areas of this many blocks (0: the default 64 MiB).
  bool emulated_device = false;
  std::int64_t staging_blocks = 0;
};

// Device pool options over an emulated device: pool p on ordinals[p], aligned staging memory,
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

inline std::int64_t BundleBytes(const KvPoolLayout& layout, float scale) {
  auto codec = BundleCodec::Create(layout, scale);
  KVMESH_CHECK(codec.ok()) << codec.status().ToString();
  return codec->bundle_bytes();
}

// A TieredCache with one pool of its own memory: host memory, or emulated device memory
// (options.emulated_device), which the test reads and writes through its read-write alias (view()).
class Rig {
 public:
  explicit Rig(const RigOptions& o) : options_(o) {
    if (o.emulated_device) {
      device_ = std::make_unique<EmulatedDevice>();
      pool_ = device_->AllocatePool(o.layout, o.pool_blocks, o.pool_scale).value();
    } else {
      const PoolMemorySpec spec{o.layout, o.pool_blocks, o.pool_scale};
      storage_ = std::move(PoolStorage::Allocate(std::span(&spec, 1))).value();
      pool_.device = pool_.alias = storage_.view(0);
    }
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
      d.fixed_budget_bytes = o.disk_fixed_budget_bytes;
      t.offload.disk = d;
    }
    t.offload.copy_threads = o.copy_threads;
    t.offload.offload_min_priority = o.offload_min_priority;
    if (device_ != nullptr) {
      t.offload.device_pools =
          EmulatedDevicePools(*device_, {0}, o.staging_blocks * o.layout.BytesPerBlock());
    }
    auto cache = TieredCache::Create(std::move(t));
    KVMESH_CHECK(cache.ok()) << cache.status().ToString();
    cache_ = std::move(cache).value();
  }

  TieredCache& cache() { return *cache_; }
  BlockManager& manager() { return cache_->manager(); }
  OffloadEngine& engine() { return cache_->engine(); }
  // The pool as the test reads and writes it (an emulated device's read-write alias).
  const KvPoolView& view() const { return pool_.alias; }
  std::int32_t tokens_per_block() const { return options_.layout.tokens_per_block(); }

  // Content ids of the prompt's full blocks.
  std::vector<ContentId> Ids(const std::vector<Token>& prompt, const SequenceOptions& o) {
    auto plan = manager().PlanRestore(prompt, o);
    KVMESH_CHECK(plan.ok());
    return plan->content_ids;
  }

  // Admits the prompt through the tiers, writes the blocks it did not reuse with synthetic
  // content, stores and removes it. Returns the admission.
  AddSequenceResult Run(std::uint64_t request, const std::vector<Token>& prompt,
                        const SequenceOptions& o) {
    const std::vector<ContentId> ids = Ids(prompt, o);
    auto r = cache_->AddSequence(RequestId{request}, prompt, o);
    KVMESH_CHECK(r.ok()) << r.status().ToString();
    for (std::size_t i = static_cast<std::size_t>(r->reused_blocks); i < ids.size(); ++i) {
      FillSyntheticBlock(view(), r->tables[0].block_ids[i], ids[i]);
    }
    KVMESH_CHECK(manager().StoreFullBlocks(RequestId{request}).ok());
    KVMESH_CHECK(manager().RemoveSequence(RequestId{request}).ok());
    return *r;
  }

  // Whether every reused block of an admission holds its synthetic content.
  bool ReusedBytesMatch(const std::vector<Token>& prompt, const SequenceOptions& o,
                        const AddSequenceResult& r) {
    const std::vector<ContentId> ids = Ids(prompt, o);
    for (std::int64_t i = 0; i < r.reused_blocks; ++i) {
      if (!SyntheticBlockMatches(view(), r.tables[0].block_ids[i], ids[i])) return false;
    }
    return true;
  }

 private:
  RigOptions options_;
  PoolStorage storage_;
  std::unique_ptr<EmulatedDevice> device_;  // outlives the cache (its backends)
  EmulatedDevice::Pool pool_;               // device: the cache's addresses; alias: the test's
  std::unique_ptr<TieredCache> cache_;

 protected:
  EmulatedDevice* emulated_device() { return device_.get(); }
  const KvPoolView& cache_view() const { return pool_.device; }
};

// n tokens of one "document" (distinct documents give distinct blocks).
inline std::vector<Token> Doc(int n, Token doc) {
  std::vector<Token> t(n);
  for (int i = 0; i < n; ++i) t[i] = doc * 100000 + i;
  return t;
}

inline SequenceOptions WholeBlocks(std::optional<int> priority = std::nullopt) {
  SequenceOptions o;
  o.reuse_last_token = true;
  if (priority) o.retention = {{0, 1 << 30, *priority, std::nullopt}};
  return o;
}

}  // namespace kvmesh::store_test
