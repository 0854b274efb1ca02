// OperatorService: the operator's requests of the control plane (kvctl's live commands; the
// operator section of node/proto/kvmesh_rpc.proto), answered from the node's tiered cache, pools
// and metrics. EngineService::Handle passes these request types here.
//
//   Pools         the plan and every pool's occupancy by state and by priority; the tiers
//   ListBlocks    a filtered page of cached blocks (pins per pool, tier copies, age)
//   Tree          the prefix tree's summary; a subtree from a content id prefix
//   InspectBlock  every component of one block and its tier copies (node/block_inspect.h)
//   Stats         hits, evictions, copy traffic, request and copy latency histograms
//   Evict         drops unpinned cached blocks on request (pool/block_manager_operator.h)
//   Flush         writes cached and host-tier blocks to the disk tier now (node/flush.h)
//   EngineReport  an engine's request and check counts (exported as metrics)
// None of them changes what an engine sees except Evict (the blocks go, as evicted ones would)
// and Flush (the disk tier gains copies). Costs are bounded per request: a listing page scans at
// most 65,536 nodes and returns at most 10,000 blocks; a dump at most 10,000 nodes.
//
// Thread safety: thread-safe (the handler contract of node/request_handler.h).
#pragma once

#include <chrono>
#include <memory>

#include "node/block_ages.h"
#include "node/control_server.h"
#include "node/engine_service.h"
#include "node/node_metrics.h"
#include "node/node_pools.h"
#include "pool/pool_plan.h"
#include "store/tiered_cache.h"

namespace kvmesh {

struct OperatorContext {
  const NodeDescription* description = nullptr;
  const PoolPlan* plan = nullptr;
  const NodePools* pools = nullptr;
  TieredCache* cache = nullptr;
  NodeMetrics* metrics = nullptr;         // may be null (no histograms in Stats)
  const ControlServer* server = nullptr;  // may be null
  std::string eviction_policy;
  int offload_min_priority = 35;
};

class OperatorService {
 public:
  // Everything in `context` must outlive the service.
  explicit OperatorService(OperatorContext context);
  ~OperatorService();

  // Whether `body` is one of the operator requests above.
  static bool Handles(rpc::Request::BodyCase body);
  // Fills `out`'s body for an operator request. REQUIRES: Handles(request.body_case()).
  Status Handle(const rpc::Request& request, rpc::Response* out);

 private:
  void Pools(rpc::PoolsResponse* out) const;
  Status ListBlocks(const rpc::ListBlocksRequest& in, rpc::ListBlocksResponse* out);
  Status Tree(const rpc::TreeRequest& in, rpc::TreeResponse* out) const;
  Status Inspect(const rpc::InspectBlockRequest& in, rpc::InspectBlockResponse* out) const;
  void Stats(rpc::StatsResponse* out) const;
  Status Evict(const rpc::EvictRequest& in, rpc::EvictResponse* out);
  void Flush(rpc::FlushResponse* out);

  const OperatorContext c_;
  const std::chrono::steady_clock::time_point started_;
  BlockAges ages_;
};

}  // namespace kvmesh
