// NodeRig: a small real kvnode core for the fuzz targets that drive requests — the pools of a
// two-layer model (one full-attention layer, one sliding-window layer: two pools) in host shared
// memory, a TieredCache over them (block manager, host tier, optionally a RocksDB tier) and the
// EngineService on top with its metrics and the OperatorService for the operator's requests
// (Pools, ListBlocks, Tree, InspectBlock, Stats, Evict, Flush, EngineReport), as node/node.cc
// assembles them, only smaller: 4 tokens per block and
// 32 blocks per pool, so that a short input already fills the pools, evicts, offloads and
// restores.
//
// Creation failures are bugs of the rig (KVMESH_CHECK). Thread safety: as EngineService.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/thread_pool.h"
#include "node/engine_service.h"
#include "node/node_metrics.h"
#include "node/node_pools.h"
#include "node/operator_service.h"
#include "store/tiered_cache.h"

namespace kvmesh::fuzz {

struct NodeRigOptions {
  int tensor_parallel_size = 1;  // 1 or 2 (the model has 2 KV heads)
  bool enable_block_reuse = true;
  bool enable_partial_reuse = true;
  EvictionPolicyKind policy = EvictionPolicyKind::kPriorityLru;
  bool host_tier = true;
  std::string disk_path;  // empty: no RocksDB tier
  int copy_threads = 0;   // 0: copies in the calling thread (deterministic)
  bool manual_clock = true;
};

class NodeRig {
 public:
  explicit NodeRig(const NodeRigOptions& options);
  ~NodeRig();
  NodeRig(const NodeRig&) = delete;
  NodeRig& operator=(const NodeRig&) = delete;

  EngineService& service() { return *service_; }
  TieredCache& cache() { return *cache_; }
  // Null without a manual clock.
  ManualClock* clock() { return clock_.get(); }

 private:
  std::unique_ptr<ManualClock> clock_;
  PoolPlan plan_;
  NodePools pools_;
  std::unique_ptr<TieredCache> cache_;
  NodeDescription description_;
  std::unique_ptr<NodeMetrics> metrics_;
  std::unique_ptr<OperatorService> operator_;
  std::unique_ptr<EngineService> service_;
};

}  // namespace kvmesh::fuzz
