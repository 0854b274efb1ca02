// NodeMetrics: the kvnode's Prometheus metrics (docs/metrics.md has every name, type and label).
//
// Measured here, on the hot paths, with atomics (children looked up once):
//   kvmesh_request_duration_seconds{api}      histogram of EngineService::Handle per request
//   kvmesh_request_errors_total{api,code}     requests answered with an error, by status code
//   kvmesh_tier_copy_duration_seconds{direction,tier}  histogram per block copy (offload, spill,
//                                             onboard; OffloadEngineOptions::on_copy; a block of a
//                                             range restored in one go: its share of the time)
//   kvmesh_engine_{requests,failed_requests,checks,check_failures}_total  what engines report
//                                             (EngineReport: kvmesh-synth after each request)
//   kvmesh_operator_evicted_blocks_total, kvmesh_operator_flushed_blocks_total
// Computed at scrape time (AddNodeCollector, node_metrics_collect.cc) from the statistics the
// block manager, the tiered cache, the control server and the cluster directory keep anyway: pool
// occupancy by state and by priority, hits per tier, evictions, copy traffic, tier occupancy,
// connections, in flight, directory updates, lost events and resyncs, process memory.
//
// The same histograms feed kvctl stats (FillStats: bucket counts travel, percentiles are computed
// by kvctl).
//
// Thread safety: thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "node/engine_service.h"
#include "node/metrics.h"
#include "node/metrics_http.h"
#include "node/node_pools.h"
#include "node/peer_table.h"
#include "node/prefix_directory.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "store/offload_engine.h"
#include "store/tiered_cache.h"

namespace kvmesh {

// The API name of a request ("admit", "list_blocks"), "" for an unknown body.
std::string_view ApiName(rpc::Request::BodyCase body);

class NodeMetrics {
 public:
  NodeMetrics();
  NodeMetrics(const NodeMetrics&) = delete;
  NodeMetrics& operator=(const NodeMetrics&) = delete;

  metrics::Registry& registry() { return registry_; }

  // After a request ran: its duration and its status code (kOk included).
  void ObserveRequest(rpc::Request::BodyCase api, double seconds, StatusCode code);
  // OffloadEngineOptions::on_copy: `blocks` observations of ns / blocks each (a range restored in
  // one RocksDB MultiGet counts as its blocks, each with its share of the time).
  void ObserveCopy(CopyDirection direction, KvTier tier, std::int64_t blocks, std::int64_t bytes,
                   std::int64_t ns);
  void AddEngineReport(const rpc::EngineReportRequest& report);
  void AddOperatorEvicted(std::int64_t n) { operator_evicted_->Inc(n); }
  void AddOperatorFlushed(std::int64_t n) { operator_flushed_->Inc(n); }

  // The request histograms by API, the copy histograms and the engine counters.
  void FillStats(rpc::StatsResponse* out) const;

 private:
  // Above the largest Request body field number (the cluster messages use 60-99).
  static constexpr int kMaxApis = 100;
  // [CopyDirection][KvTier]: null where the pair does not occur.
  using CopyHistograms = std::array<std::array<metrics::Histogram*, 4>, 3>;

  metrics::Registry registry_;
  metrics::Family<metrics::Histogram>* request_duration_;
  metrics::Family<metrics::Counter>* request_errors_;
  metrics::Family<metrics::Histogram>* copy_duration_;
  std::array<metrics::Histogram*, kMaxApis> by_api_{};
  CopyHistograms copies_{};
  metrics::Counter* engine_requests_;
  metrics::Counter* engine_failed_requests_;
  metrics::Counter* engine_checks_;
  metrics::Counter* engine_check_failures_;
  metrics::Counter* operator_evicted_;
  metrics::Counter* operator_flushed_;
};

// What the scrape-time families are computed from (node/node_metrics_collect.cc). The pointers
// must stay valid while the collector is registered.
class HandoffReceiver;

struct NodeMetricSources {
  const NodeDescription* description = nullptr;
  TieredCache* cache = nullptr;
  const NodePools* pools = nullptr;
  const ControlServer* server = nullptr;
  const PrefixDirectory* directory = nullptr;  // null: not in a cluster
  const PeerTable* peers = nullptr;            // the member table (a cluster or the peer path)
  // The peer data path; all null without it (peer.enabled false).
  const RemoteFetcher* fetcher = nullptr;
  const PeerService* peer_service = nullptr;
  const HandoffSender* handoff_sender = nullptr;
  const HandoffReceiver* handoff_receiver = nullptr;
  std::chrono::steady_clock::time_point started;
  std::function<Readiness()> readiness;
};

// The node's scrape-time families: pools, hits, tiers, copies, control plane, cluster directory,
// process.
void CollectNodeMetrics(const NodeMetricSources& sources,
                        std::vector<metrics::FamilySnapshot>* out);
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
// process_cpu_seconds_total, process_start_time_seconds (from /proc/self).
void CollectProcessMetrics(std::vector<metrics::FamilySnapshot>* out);

}  // namespace kvmesh
