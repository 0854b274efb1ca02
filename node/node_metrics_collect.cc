// The scrape-time families of a kvnode (node_metrics.h): computed from the statistics the block
// manager, the tiered cache and the control server keep, and from /proc/self.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/strings.h"
#include "node/handoff.h"
#include "node/node_metrics.h"
#include "node/peer_service.h"
#include "node/remote_fetch.h"

namespace kvmesh {
namespace {

using metrics::FamilySnapshot;
using metrics::Labels;
using metrics::MetricType;

constexpr const char* kStates[] = {"free",   "cached",    "private",
                                   "pinned", "evictable", "moving_out"};

// Appends families and their samples in a few lines each.
class Families {
 public:
  explicit Families(std::vector<FamilySnapshot>* out) : out_(out) {}

  FamilySnapshot& Add(std::string name, std::string help, MetricType type) {
    out_->push_back({std::move(name), std::move(help), type, {}, {}});
    return out_->back();
  }
  void One(std::string name, std::string help, MetricType type, double value, Labels labels = {}) {
    Add(std::move(name), std::move(help), type).samples.push_back({std::move(labels), value});
  }

 private:
  std::vector<FamilySnapshot>* out_;
};

void Put(FamilySnapshot& f, Labels labels, double value) {
  f.samples.push_back({std::move(labels), value});
}

void CollectPools(const BlockManagerStats& ms, const NodePools& pools, Families& f) {
  FamilySnapshot& blocks = f.Add("kvmesh_pool_blocks",
                                 "Blocks of a pool by state now (pinned blocks are also cached or "
                                 "private; evictable: what eviction could free now).",
                                 MetricType::kGauge);
  FamilySnapshot& capacity =
      f.Add("kvmesh_pool_capacity_blocks", "Blocks of a pool.", MetricType::kGauge);
  FamilySnapshot& capacity_bytes =
      f.Add("kvmesh_pool_capacity_bytes", "Bytes of a pool's memory (every component).",
            MetricType::kGauge);
  FamilySnapshot& block_size =
      f.Add("kvmesh_pool_block_size_bytes", "Bytes of one block of a pool (every component).",
            MetricType::kGauge);
  FamilySnapshot& by_priority =
      f.Add("kvmesh_pool_cached_blocks_by_priority",
            "Cached blocks of a pool by retention priority (priorities that hold blocks, and the "
            "default 35).",
            MetricType::kGauge);
  FamilySnapshot& evictions =
      f.Add("kvmesh_pool_evictions_total", "Blocks evicted from a pool to make room.",
            MetricType::kCounter);
  FamilySnapshot& stored =
      f.Add("kvmesh_pool_stored_blocks_total",
            "Blocks that became reusable in a pool (StoreFullBlocks).", MetricType::kCounter);
  FamilySnapshot& restored =
      f.Add("kvmesh_pool_restored_blocks_total", "Blocks restored into a pool from a tier.",
            MetricType::kCounter);
  FamilySnapshot& claimed =
      f.Add("kvmesh_pool_claimed_blocks_total",
            "Cached blocks taken out of a pool for partial reuse or by kvctl evict.",
            MetricType::kCounter);
  for (const PoolStats& p : ms.pools) {
    const RankPool& rp = pools.pools()[static_cast<std::size_t>(p.pool.value)];
    const Labels id = {{"pool", std::to_string(p.pool.value)}, {"key", p.name}};
    const std::int64_t values[] = {p.free_blocks,   p.cached_blocks,    p.private_blocks,
                                   p.pinned_blocks, p.evictable_blocks, p.moving_out_blocks};
    for (std::size_t i = 0; i < std::size(kStates); ++i) {
      Labels l = id;
      l.emplace_back("state", kStates[i]);
      Put(blocks, std::move(l), static_cast<double>(values[i]));
    }
    Put(capacity, id, static_cast<double>(p.num_blocks));
    Put(block_size, id, static_cast<double>(rp.layout.BytesPerBlock()));
    Put(capacity_bytes, id, static_cast<double>(p.num_blocks * rp.layout.BytesPerBlock()));
    for (int prio = 0; prio <= kMaxPriority; ++prio) {
      const std::int64_t n = p.cached_by_priority[static_cast<std::size_t>(prio)];
      if (n == 0 && prio != kDefaultPriority) continue;
      Labels l = id;
      l.emplace_back("priority", std::to_string(prio));
      Put(by_priority, std::move(l), static_cast<double>(n));
    }
    Put(evictions, id, static_cast<double>(p.evicted_blocks));
    Put(stored, id, static_cast<double>(p.stored_blocks));
    Put(restored, id, static_cast<double>(p.restored_blocks));
    Put(claimed, id, static_cast<double>(p.claimed_blocks));
  }
  f.One("kvmesh_sequences_running", "Sequences admitted and not released.", MetricType::kGauge,
        static_cast<double>(ms.running_sequences));
  f.One("kvmesh_move_out_waits_total",
        "Times an admission, append or restore waited for evicted blocks still being copied to a "
        "tier (deferred eviction) before it could allocate: offload holding admissions back.",
        MetricType::kCounter, static_cast<double>(ms.counters.move_out_waits));
  f.One("kvmesh_move_out_wait_seconds_total",
        "Seconds those waits took, the copies the waiting call did itself included: the time "
        "offload added to admissions, appends and restores.",
        MetricType::kCounter, static_cast<double>(ms.counters.move_out_wait_ns) * 1e-9);
  f.One("kvmesh_tree_nodes", "Cached blocks (prefix-tree nodes) over every pool.",
        MetricType::kGauge, static_cast<double>(ms.tree_nodes));
  f.One("kvmesh_kv_events_total", "KV events recorded (stored, removed, tier changed).",
        MetricType::kCounter, static_cast<double>(ms.last_event_seq));
  f.One("kvmesh_kv_events_overwritten_total",
        "KV events overwritten in the ring before every consumer read them.", MetricType::kCounter,
        static_cast<double>(ms.events_overwritten));
}

void CollectDirectory(const DirectoryStats& d, Families& f) {
  f.One("kvmesh_directory_held_ids", "Content ids this node holds, as its directory holdings say.",
        MetricType::kGauge, static_cast<double>(d.held_ids));
  f.One("kvmesh_directory_shard_ids", "Content ids homed at this node that have a holder.",
        MetricType::kGauge, static_cast<double>(d.shard_ids));
  f.One("kvmesh_directory_updates_sent_total", "Directory entries sent to their home nodes.",
        MetricType::kCounter, static_cast<double>(d.updates_sent));
  f.One("kvmesh_directory_updates_received_total", "Directory entries applied from peers.",
        MetricType::kCounter, static_cast<double>(d.updates_received));
  f.One("kvmesh_directory_send_failures_total",
        "Update messages a home did not acknowledge (their entries stay queued).",
        MetricType::kCounter, static_cast<double>(d.send_failures));
  f.One("kvmesh_directory_republished_total",
        "Entries re-sent because their home moved (membership changes).", MetricType::kCounter,
        static_cast<double>(d.republished));
  f.One("kvmesh_directory_events_lost_total",
        "KV events the directory's publisher lost to a full event ring.", MetricType::kCounter,
        static_cast<double>(d.events_lost));
  FamilySnapshot& resyncs = f.Add(
      "kvmesh_directory_resyncs_total",
      "Holdings rebuilt from a snapshot of the pools and tiers, by cause.", MetricType::kCounter);
  Put(resyncs, {{"cause", "lost_events"}}, static_cast<double>(d.resyncs_after_loss));
  Put(resyncs, {{"cause", "periodic"}}, static_cast<double>(d.resyncs - d.resyncs_after_loss));
}

void CollectMembership(const PeerTableStats& t, Families& f) {
  f.One("kvmesh_cluster_members", "Members in this node's view of the cluster, itself included.",
        MetricType::kGauge, static_cast<double>(t.members + 1));
  FamilySnapshot& changes =
      f.Add("kvmesh_cluster_member_changes_total",
            "Changes to this node's member list: members that joined, left (left, lease lapsed) "
            "or rejoined (seen again with a new incarnation: it restarted, or its lease lapsed).",
            MetricType::kCounter);
  Put(changes, {{"change", "joined"}}, static_cast<double>(t.joined));
  Put(changes, {{"change", "left"}}, static_cast<double>(t.left));
  Put(changes, {{"change", "rejoined"}}, static_cast<double>(t.rejoined));
  f.One("kvmesh_cluster_membership_up",
        "1 while the membership source answers (etcd: its last step succeeded; static: always), "
        "else 0: the node keeps its last member list.",
        MetricType::kGauge, t.health.ok ? 1 : 0);
  f.One("kvmesh_cluster_membership_failures_total",
        "Failed membership steps (etcd calls that failed; each retried with backoff).",
        MetricType::kCounter, static_cast<double>(t.health.failures));
  f.One("kvmesh_cluster_lease_grants_total",
        "etcd leases this node was granted: 1 at start, one more each time its lease lapsed.",
        MetricType::kCounter, static_cast<double>(t.health.joins));
}

void CollectHits(const TieredCacheStats& ts, Families& f) {
  f.One("kvmesh_admissions_total", "Admitted requests.", MetricType::kCounter,
        static_cast<double>(ts.admissions));
  FamilySnapshot& hits =
      f.Add("kvmesh_prompt_blocks_total",
            "Block positions of admitted prompts by where their KV came from: reused from the "
            "pool, restored from the host tier or the disk tier, fetched from a peer (remote), "
            "or missed (recomputed).",
            MetricType::kCounter);
  Put(hits, {{"tier", "pool"}}, static_cast<double>(ts.pool_hit_blocks));
  Put(hits, {{"tier", "host"}}, static_cast<double>(ts.host_hit_blocks));
  Put(hits, {{"tier", "disk"}}, static_cast<double>(ts.disk_hit_blocks));
  Put(hits, {{"tier", "remote"}}, static_cast<double>(ts.remote_hit_blocks));
  Put(hits, {{"tier", "miss"}}, static_cast<double>(ts.missed_blocks));
}

void CollectRemoteFetch(const RemoteFetchStats& s, Families& f) {
  FamilySnapshot& fetches =
      f.Add("kvmesh_remote_fetches_total",
            "Remote prefix fetches in Admit (a holder was asked), by outcome: completed, or failed "
            "(timeout, peer gone, refused; the blocks are computed).",
            MetricType::kCounter);
  Put(fetches, {{"outcome", "completed"}}, static_cast<double>(s.fetches - s.failed_fetches));
  Put(fetches, {{"outcome", "failed"}}, static_cast<double>(s.failed_fetches));
  FamilySnapshot& blocks = f.Add(
      "kvmesh_remote_fetch_blocks_total",
      "Blocks that arrived from peers, by outcome: verified and published, or refused (failed "
      "verification: corrupt or foreign).",
      MetricType::kCounter);
  Put(blocks, {{"outcome", "published"}}, static_cast<double>(s.fetched_blocks));
  Put(blocks, {{"outcome", "refused"}}, static_cast<double>(s.refused_blocks));
  f.One("kvmesh_remote_fetch_bytes_total", "Bundle bytes received from peers.",
        MetricType::kCounter, static_cast<double>(s.fetched_bytes));
}

void CollectTiers(const OffloadStats& os, Families& f) {
  struct Tier {
    const char* name;
    bool present;
    const TierStats& s;
  };
  const Tier tiers[] = {{"host", os.has_host, os.host}, {"disk", os.has_disk, os.disk}};
  FamilySnapshot& cap =
      f.Add("kvmesh_tier_capacity_bytes", "Bytes a tier may hold.", MetricType::kGauge);
  FamilySnapshot& used =
      f.Add("kvmesh_tier_used_bytes", "Bundle bytes a tier holds now.", MetricType::kGauge);
  FamilySnapshot& entries =
      f.Add("kvmesh_tier_blocks", "Blocks a tier holds now.", MetricType::kGauge);
  FamilySnapshot& evictions = f.Add("kvmesh_tier_evictions_total",
                                    "Blocks a tier evicted for capacity.", MetricType::kCounter);
  FamilySnapshot& corrupt =
      f.Add("kvmesh_tier_corrupt_blocks_total",
            "Stored blocks that failed verification (dropped, a miss).", MetricType::kCounter);
  FamilySnapshot& hits =
      f.Add("kvmesh_tier_hits_total", "Verified reads of a tier.", MetricType::kCounter);
  FamilySnapshot& misses = f.Add("kvmesh_tier_misses_total", "Reads of blocks a tier did not hold.",
                                 MetricType::kCounter);
  FamilySnapshot& io_errors =
      f.Add("kvmesh_tier_io_errors_total", "Environment failures of a tier (RocksDB).",
            MetricType::kCounter);
  FamilySnapshot& disabled =
      f.Add("kvmesh_tier_disabled", "1 when a tier disabled itself after an I/O error.",
            MetricType::kGauge);
  for (const Tier& t : tiers) {
    if (!t.present) continue;
    const Labels l = {{"tier", t.name}};
    Put(cap, l, static_cast<double>(t.s.capacity_bytes));
    Put(used, l, static_cast<double>(t.s.used_bytes));
    Put(entries, l, static_cast<double>(t.s.entries));
    Put(evictions, l, static_cast<double>(t.s.evictions));
    Put(corrupt, l, static_cast<double>(t.s.corrupt));
    Put(hits, l, static_cast<double>(t.s.hits));
    Put(misses, l, static_cast<double>(t.s.misses));
    Put(io_errors, l, static_cast<double>(t.s.io_errors));
    Put(disabled, l, t.s.disabled ? 1.0 : 0.0);
  }
  struct Traffic {
    const char* direction;
    const char* tier;
    const TierTraffic& t;
  };
  const Traffic traffic[] = {{"offload", os.has_host ? "host" : "disk", os.offload},
                             {"spill", "disk", os.spill},
                             {"onboard", "host", os.onboard_host},
                             {"onboard", "disk", os.onboard_disk}};
  FamilySnapshot& bytes =
      f.Add("kvmesh_tier_copied_bytes_total",
            "Block bytes copied between the pool and a tier, by direction.", MetricType::kCounter);
  FamilySnapshot& blocks =
      f.Add("kvmesh_tier_copied_blocks_total",
            "Blocks copied between the pool and a tier, by direction.", MetricType::kCounter);
  FamilySnapshot& seconds =
      f.Add("kvmesh_tier_copy_seconds_total",
            "Time spent in block copies, summed over copy threads.", MetricType::kCounter);
  for (const Traffic& t : traffic) {
    const Labels l = {{"direction", t.direction}, {"tier", t.tier}};
    Put(bytes, l, static_cast<double>(t.t.bytes));
    Put(blocks, l, static_cast<double>(t.t.blocks));
    Put(seconds, l, t.t.copy_s);
  }
  FamilySnapshot& skipped = f.Add("kvmesh_offload_skipped_blocks_total",
                                  "Evicted blocks not offloaded: below the offload priority, or "
                                  "clean (a tier holds them).",
                                  MetricType::kCounter);
  Put(skipped, {{"reason", "priority"}}, static_cast<double>(os.skipped_priority));
  Put(skipped, {{"reason", "clean"}}, static_cast<double>(os.skipped_clean));
  f.One("kvmesh_offload_helped_blocks_total",
        "Of the offloaded blocks, those copied by a pool call that was waiting for them (on its "
        "own thread), not by a copy worker.",
        MetricType::kCounter, static_cast<double>(os.offload_helped));
  f.One("kvmesh_onboard_corrupt_blocks_total",
        "Tier reads during restores that failed verification (each a miss).", MetricType::kCounter,
        static_cast<double>(os.onboard_corrupt));
  f.One("kvmesh_tier_copies_in_flight", "Block copies running now.", MetricType::kGauge,
        static_cast<double>(os.copies_in_flight));
}

// The holder's side of remote fetches and whole handoffs (PeerService), and the handoffs
// themselves on both nodes.
void CollectPeer(const PeerServiceStats& served, const HandoffSenderStats& sent,
                 const HandoffReceiverStats& received, Families& f) {
  FamilySnapshot& fetches = f.Add(
      "kvmesh_peer_fetches_served_total",
      "FetchBlocks requests of peers (their remote fetches and whole handoffs) this node answered "
      "as the holder, by outcome.",
      MetricType::kCounter);
  Put(fetches, {{"outcome", "served"}}, static_cast<double>(served.fetches_served));
  Put(fetches, {{"outcome", "failed"}}, static_cast<double>(served.fetches_failed));
  FamilySnapshot& blocks = f.Add(
      "kvmesh_peer_sent_blocks_total",
      "Blocks this node sent to peers as the holder; missing: asked for but no longer held (sent "
      "as zeros, a miss on the other side).",
      MetricType::kCounter);
  Put(blocks, {{"outcome", "sent"}}, static_cast<double>(served.blocks_sent));
  Put(blocks, {{"outcome", "missing"}}, static_cast<double>(served.blocks_missing));
  f.One("kvmesh_peer_sent_bytes_total", "Bundle bytes this node sent to peers as the holder.",
        MetricType::kCounter, static_cast<double>(served.bytes_sent));
  FamilySnapshot& handoffs = f.Add(
      "kvmesh_handoffs_received_total",
      "Handoffs this node received as the decode node, by mode and outcome (a whole handoff that "
      "failed is an error of the handoff API: kvmesh_request_errors_total).",
      MetricType::kCounter);
  Put(handoffs, {{"mode", "whole"}, {"outcome", "completed"}},
      static_cast<double>(received.handoffs));
  Put(handoffs, {{"mode", "streamed"}, {"outcome", "completed"}},
      static_cast<double>(received.streams.completed));
  Put(handoffs, {{"mode", "streamed"}, {"outcome", "failed"}},
      static_cast<double>(received.streams.failed));
  f.One("kvmesh_handoff_streams_refused_total",
        "Streamed handoffs this node received that a layer range failing verification ended "
        "(counted as failed too).",
        MetricType::kCounter, static_cast<double>(received.streams.refused));
  FamilySnapshot& moved =
      f.Add("kvmesh_handoff_received_blocks_total",
            "Blocks handoffs moved into this node's pool, verified and published, by mode.",
            MetricType::kCounter);
  Put(moved, {{"mode", "whole"}}, static_cast<double>(received.moved_blocks));
  Put(moved, {{"mode", "streamed"}}, static_cast<double>(received.streams.moved_blocks));
  FamilySnapshot& streams = f.Add(
      "kvmesh_handoff_streams_sent_total",
      "Streamed handoffs this node sent as the prefill node that ended, by outcome: answered by "
      "the decode node, or failed (start refused, deadline, link, cancel).",
      MetricType::kCounter);
  Put(streams, {{"outcome", "answered"}}, static_cast<double>(sent.streams_answered));
  Put(streams, {{"outcome", "failed"}}, static_cast<double>(sent.streams_failed));
  f.One("kvmesh_handoff_streamed_bytes_total",
        "Layer-range bytes this node sent in streamed handoffs as the prefill node.",
        MetricType::kCounter, static_cast<double>(sent.bytes_served));
}

void CollectControl(const ControlServer& server, Families& f) {
  const ControlServerStats s = server.stats();
  f.One("kvmesh_control_connections", "Open control-plane connections (engines, kvctl).",
        MetricType::kGauge, static_cast<double>(s.connections));
  f.One("kvmesh_control_requests_inflight", "Requests accepted and not yet answered.",
        MetricType::kGauge, static_cast<double>(s.inflight));
  f.One("kvmesh_control_sessions_total", "Authenticated connections.", MetricType::kCounter,
        static_cast<double>(s.sessions_opened));
  f.One("kvmesh_control_auth_failures_total",
        "Handshakes refused: wrong secret, bad handshake, handshake timeout.", MetricType::kCounter,
        static_cast<double>(s.auth_failures));
  f.One("kvmesh_control_connections_refused_total", "Connections refused over max_connections.",
        MetricType::kCounter, static_cast<double>(s.connections_refused));
  f.One("kvmesh_control_requests_total", "Requests answered (rejected ones included).",
        MetricType::kCounter, static_cast<double>(s.requests_total));
  f.One("kvmesh_control_requests_failed_total", "Requests answered with an error.",
        MetricType::kCounter, static_cast<double>(s.requests_failed));
  f.One("kvmesh_control_requests_rejected_total",
        "Requests refused by the in-flight limits (resource_exhausted).", MetricType::kCounter,
        static_cast<double>(s.requests_rejected));
  f.One("kvmesh_control_bad_frames_total", "Frames refused: headers, payloads, message types.",
        MetricType::kCounter, static_cast<double>(s.bad_frames));
  f.One("kvmesh_control_busy_poll_hits_total",
        "Requests an io thread found by busy polling their connection after answering the one "
        "before (control.busy_poll_us): read without a thread wake-up.",
        MetricType::kCounter, static_cast<double>(s.busy_poll_hits));
  f.One("kvmesh_control_busy_poll_seconds_total",
        "Time io threads spent busy polling connections, found or not: the CPU it costs.",
        MetricType::kCounter, s.busy_poll_seconds);
}

}  // namespace

void CollectNodeMetrics(const NodeMetricSources& s, std::vector<FamilySnapshot>* out) {
  Families f(out);
  const NodeDescription& d = *s.description;
  f.One("kvmesh_node_info", "The node's identity (value 1).", MetricType::kGauge, 1,
        {{"node_id", d.node_id},
         {"version", d.version},
         {"model", d.model_name},
         {"dtype", d.dtype},
         {"kv_layout", d.kv_layout},
         {"device", d.device}});
  const Readiness r = s.readiness ? s.readiness() : Readiness::kStarting;
  f.One("kvmesh_node_ready", "1 while the node serves requests (/readyz 200), else 0.",
        MetricType::kGauge, r == Readiness::kServing ? 1 : 0);
  f.One("kvmesh_node_uptime_seconds", "Seconds since the node started serving.", MetricType::kGauge,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count());
  if (s.cache != nullptr && s.pools != nullptr) {
    CollectPools(s.cache->manager().GetStats(), *s.pools, f);
    const TieredCacheStats ts = s.cache->stats();
    CollectHits(ts, f);
    CollectTiers(ts.offload, f);
  }
  if (s.server != nullptr) CollectControl(*s.server, f);
  if (s.directory != nullptr) CollectDirectory(s.directory->stats(), f);
  if (s.peers != nullptr) {
    if (const PeerTableStats t = s.peers->stats(); t.health.kind != "none") {
      CollectMembership(t, f);
    }
  }
  if (s.fetcher != nullptr) CollectRemoteFetch(s.fetcher->stats(), f);
  if (s.peer_service != nullptr && s.handoff_sender != nullptr && s.handoff_receiver != nullptr) {
    CollectPeer(s.peer_service->stats(), s.handoff_sender->stream_stats(),
                s.handoff_receiver->stats(), f);
  }
}

void CollectProcessMetrics(std::vector<FamilySnapshot>* out) {
  Families f(out);
  const long page = ::sysconf(_SC_PAGESIZE);
  const long ticks = ::sysconf(_SC_CLK_TCK);
  std::ifstream statm("/proc/self/statm");
  long long vm_pages = 0;
  long long rss_pages = 0;
  if (statm >> vm_pages >> rss_pages) {
    f.One("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::kGauge,
          static_cast<double>(rss_pages) * static_cast<double>(page));
    f.One("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::kGauge,
          static_cast<double>(vm_pages) * static_cast<double>(page));
  }
  std::error_code ec;
  std::int64_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  f.One("process_open_fds", "Open file descriptors.", MetricType::kGauge, static_cast<double>(fds));
  // /proc/self/stat: fields after the command (which may hold spaces) in parentheses.
  std::ifstream stat_file("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos || ticks <= 0) return;
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> v;
  for (std::string x; fields >> x;) v.push_back(x);
  // v[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
  if (v.size() < 20) return;
  const double cpu = (std::stod(v[11]) + std::stod(v[12])) / static_cast<double>(ticks);
  f.One("process_cpu_seconds_total", "User and system CPU time in seconds.", MetricType::kCounter,
        cpu);
  std::ifstream uptime_file("/proc/uptime");
  double uptime = 0;
  if (uptime_file >> uptime) {
    const double since_boot = std::stod(v[19]) / static_cast<double>(ticks);
    const double now = static_cast<double>(::time(nullptr));
    f.One("process_start_time_seconds", "Start time of the process since the Unix epoch.",
          MetricType::kGauge, now - uptime + since_boot);
  }
}

}  // namespace kvmesh
