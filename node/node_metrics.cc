#include "node/node_metrics.h"

#include <algorithm>
#include <string>

#include "common/check.h"

namespace kvmesh {
namespace {

constexpr rpc::Request::BodyCase kApis[] = {
    rpc::Request::kAttach,          rpc::Request::kAdmit,         rpc::Request::kStoreFullBlocks,
    rpc::Request::kAppendTokens,    rpc::Request::kRelease,       rpc::Request::kPrefetch,
    rpc::Request::kLookup,          rpc::Request::kPollEvents,    rpc::Request::kStatus,
    rpc::Request::kPools,           rpc::Request::kListBlocks,    rpc::Request::kTree,
    rpc::Request::kInspectBlock,    rpc::Request::kStats,         rpc::Request::kEvict,
    rpc::Request::kFlush,           rpc::Request::kEngineReport,  rpc::Request::kDirectoryUpdate,
    rpc::Request::kDirectoryLocate, rpc::Request::kClusterLookup, rpc::Request::kPeerHello,
    rpc::Request::kHaveBlocks,      rpc::Request::kFetchBlocks,   rpc::Request::kHandoff,
    rpc::Request::kHandOffTo,       rpc::Request::kHandOffLayers};

std::string_view DirectionName(CopyDirection d) {
  switch (d) {
    case CopyDirection::kOffload: return "offload";
    case CopyDirection::kSpill: return "spill";
    case CopyDirection::kOnboard: return "onboard";
  }
  return "";
}

void ToProto(const metrics::HistogramSnapshot& h, rpc::HistogramData* out) {
  out->mutable_bounds()->Add(h.bounds.begin(), h.bounds.end());
  out->mutable_counts()->Add(h.counts.begin(), h.counts.end());
  out->set_count(h.count);
  out->set_sum(h.sum);
}

}  // namespace

std::string_view ApiName(rpc::Request::BodyCase body) {
  switch (body) {
    case rpc::Request::kAttach: return "attach";
    case rpc::Request::kAdmit: return "admit";
    case rpc::Request::kStoreFullBlocks: return "store_full_blocks";
    case rpc::Request::kAppendTokens: return "append_tokens";
    case rpc::Request::kRelease: return "release";
    case rpc::Request::kPrefetch: return "prefetch";
    case rpc::Request::kLookup: return "lookup";
    case rpc::Request::kPollEvents: return "poll_events";
    case rpc::Request::kSubscribeEvents: return "subscribe_events";
    case rpc::Request::kStatus: return "status";
    case rpc::Request::kPools: return "pools";
    case rpc::Request::kListBlocks: return "list_blocks";
    case rpc::Request::kTree: return "tree";
    case rpc::Request::kInspectBlock: return "inspect_block";
    case rpc::Request::kStats: return "stats";
    case rpc::Request::kEvict: return "evict";
    case rpc::Request::kFlush: return "flush";
    case rpc::Request::kEngineReport: return "engine_report";
    case rpc::Request::kDirectoryUpdate: return "directory_update";
    case rpc::Request::kDirectoryLocate: return "directory_locate";
    case rpc::Request::kClusterLookup: return "cluster_lookup";
    case rpc::Request::kPeerHello: return "peer_hello";
    case rpc::Request::kHaveBlocks: return "have_blocks";
    case rpc::Request::kFetchBlocks: return "fetch_blocks";
    case rpc::Request::kHandoff: return "handoff";
    case rpc::Request::kHandOffTo: return "hand_off_to";
    case rpc::Request::kHandOffLayers: return "hand_off_layers";
    case rpc::Request::BODY_NOT_SET: break;
  }
  return "";
}

NodeMetrics::NodeMetrics() {
  request_duration_ =
      &registry_.AddHistogram("kvmesh_request_duration_seconds",
                              "Time a control-plane request spent in the node's handler, by API.",
                              {"api"}, metrics::LatencyBuckets());
  request_errors_ = &registry_.AddCounter(
      "kvmesh_request_errors_total",
      "Requests the handler answered with an error, by API and status code.", {"api", "code"});
  copy_duration_ = &registry_.AddHistogram(
      "kvmesh_tier_copy_duration_seconds",
      "Time of one block copy between the pool and a tier (offload, spill host to disk, onboard; "
      "a block of a range restored from disk in one read: its share of the range's time).",
      {"direction", "tier"}, metrics::LatencyBuckets());
  for (const rpc::Request::BodyCase api : kApis) {
    KVMESH_CHECK(static_cast<std::size_t>(api) < by_api_.size()) << "raise kMaxApis";
    by_api_[static_cast<std::size_t>(api)] =
        &request_duration_->WithLabels({std::string(ApiName(api))});
  }
  const auto copy = [this](CopyDirection d, KvTier t) {
    copies_[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)] =
        &copy_duration_->WithLabels({std::string(DirectionName(d)), std::string(KvTierName(t))});
  };
  copy(CopyDirection::kOffload, KvTier::kHost);
  copy(CopyDirection::kOffload, KvTier::kDisk);
  copy(CopyDirection::kSpill, KvTier::kDisk);
  copy(CopyDirection::kOnboard, KvTier::kHost);
  copy(CopyDirection::kOnboard, KvTier::kDisk);
  const auto counter = [this](const char* name, const char* help) {
    return &registry_.AddCounter(name, help).Get();
  };
  engine_requests_ =
      counter("kvmesh_engine_requests_total", "Requests engines reported as done (EngineReport).");
  engine_failed_requests_ = counter("kvmesh_engine_failed_requests_total",
                                    "Requests engines reported as failed (EngineReport).");
  engine_checks_ = counter("kvmesh_engine_checks_total",
                           "Decode outputs engines checked against their reference "
                           "(the synthetic engine's checks).");
  engine_check_failures_ = counter("kvmesh_engine_check_failures_total",
                                   "Engine checks that failed: a wrong, stale or corrupt block.");
  operator_evicted_ = counter("kvmesh_operator_evicted_blocks_total",
                              "Tree nodes dropped from the pool by kvctl evict.");
  operator_flushed_ = counter("kvmesh_operator_flushed_blocks_total",
                              "Blocks written to the disk tier by kvctl flush.");
}

void NodeMetrics::ObserveRequest(rpc::Request::BodyCase api, double seconds, StatusCode code) {
  const auto i = static_cast<std::size_t>(api);
  if (i < by_api_.size() && by_api_[i] != nullptr) by_api_[i]->Observe(seconds);
  if (code != StatusCode::kOk) {
    const std::string_view name = ApiName(api);
    request_errors_
        ->WithLabels(
            {std::string(name.empty() ? "unknown" : name), std::string(StatusCodeName(code))})
        .Inc();
  }
}

void NodeMetrics::ObserveCopy(CopyDirection direction, KvTier tier, std::int64_t blocks,
                              std::int64_t /*bytes*/, std::int64_t ns) {
  const auto d = static_cast<std::size_t>(direction);
  const auto t = static_cast<std::size_t>(tier);
  if (blocks <= 0) return;
  if (d < copies_.size() && t < copies_[d].size() && copies_[d][t] != nullptr) {
    copies_[d][t]->Observe(static_cast<double>(ns) * 1e-9 / static_cast<double>(blocks),
                           static_cast<std::uint64_t>(blocks));
  }
}

void NodeMetrics::AddEngineReport(const rpc::EngineReportRequest& r) {
  engine_requests_->Inc(std::max<std::int64_t>(0, r.requests()));
  engine_failed_requests_->Inc(std::max<std::int64_t>(0, r.failed_requests()));
  engine_checks_->Inc(std::max<std::int64_t>(0, r.checks()));
  engine_check_failures_->Inc(std::max<std::int64_t>(0, r.check_failures()));
}

void NodeMetrics::FillStats(rpc::StatsResponse* out) const {
  const metrics::FamilySnapshot errors = request_errors_->Collect();
  for (const rpc::Request::BodyCase api : kApis) {
    const metrics::Histogram* h = by_api_[static_cast<std::size_t>(api)];
    rpc::ApiStats* a = out->add_apis();
    a->set_api(std::string(ApiName(api)));
    ToProto(h->Snapshot(), a->mutable_latency());
    std::int64_t n = 0;
    for (const metrics::Sample& s : errors.samples) {
      if (s.labels[0].second == a->api()) n += static_cast<std::int64_t>(s.value);
    }
    a->set_errors(n);
  }
  for (std::size_t d = 0; d < copies_.size(); ++d) {
    for (std::size_t t = 0; t < copies_[d].size(); ++t) {
      if (copies_[d][t] == nullptr) continue;
      rpc::CopyStats* c = out->add_copies();
      c->set_direction(std::string(DirectionName(static_cast<CopyDirection>(d))));
      c->set_tier(std::string(KvTierName(static_cast<KvTier>(t))));
      ToProto(copies_[d][t]->Snapshot(), c->mutable_latency());
    }
  }
  out->set_engine_checks(engine_checks_->value());
  out->set_engine_check_failures(engine_check_failures_->value());
}

}  // namespace kvmesh
