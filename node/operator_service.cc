#include "node/operator_service.h"

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"
#include "node/block_inspect.h"
#include "node/flush.h"

namespace kvmesh {
namespace {

constexpr std::size_t kMaxListScan = 65536;
constexpr std::uint32_t kDefaultListLimit = 50;
constexpr std::uint32_t kMaxListLimit = 10000;
constexpr std::uint32_t kMaxDumpNodes = 10000;

void FillTier(const char* name, bool present, const TierStats& t, rpc::TierDetail* out) {
  rpc::TierStatus* s = out->mutable_status();
  s->set_name(name);
  s->set_present(present);
  s->set_capacity_bytes(t.capacity_bytes);
  s->set_used_bytes(t.used_bytes);
  s->set_entries(t.entries);
  s->set_disabled(t.disabled);
  out->set_puts(t.puts);
  out->set_put_bytes(t.put_bytes);
  out->set_hits(t.hits);
  out->set_misses(t.misses);
  out->set_corrupt(t.corrupt);
  out->set_evictions(t.evictions);
  out->set_spills(t.spills);
  out->set_io_errors(t.io_errors);
}

void FillCopy(const char* direction, const char* tier, const TierTraffic& t,
              rpc::StatsResponse* out) {
  for (rpc::CopyStats& c : *out->mutable_copies()) {
    if (c.direction() == direction && c.tier() == tier) {
      c.set_blocks(t.blocks);
      c.set_bytes(t.bytes);
      c.set_copy_s(t.copy_s);
      return;
    }
  }
  rpc::CopyStats* c = out->add_copies();
  c->set_direction(direction);
  c->set_tier(tier);
  c->set_blocks(t.blocks);
  c->set_bytes(t.bytes);
  c->set_copy_s(t.copy_s);
}

void FillDumpNode(const TreeDumpNode& n, rpc::TreeNodeEntry* e) {
  e->set_content_id(n.content_id.ToHex());
  e->set_parent_id(n.parent_id.ToHex());
  e->set_depth(n.depth);
  e->set_level(n.level);
  e->set_children(n.children);
  e->set_priority(n.priority);
  e->set_pins(n.pins);
  e->mutable_block_ids()->Add(n.block_ids.begin(), n.block_ids.end());
}

}  // namespace

OperatorService::OperatorService(OperatorContext context)
    : c_(std::move(context)),
      started_(std::chrono::steady_clock::now()),
      ages_(&c_.cache->manager()) {}

OperatorService::~OperatorService() = default;

bool OperatorService::Handles(rpc::Request::BodyCase body) {
  switch (body) {
    case rpc::Request::kPools:
    case rpc::Request::kListBlocks:
    case rpc::Request::kTree:
    case rpc::Request::kInspectBlock:
    case rpc::Request::kStats:
    case rpc::Request::kEvict:
    case rpc::Request::kFlush:
    case rpc::Request::kEngineReport: return true;
    default: return false;
  }
}

Status OperatorService::Handle(const rpc::Request& request, rpc::Response* out) {
  switch (request.body_case()) {
    case rpc::Request::kPools: Pools(out->mutable_pools()); return Status::Ok();
    case rpc::Request::kListBlocks:
      return ListBlocks(request.list_blocks(), out->mutable_list_blocks());
    case rpc::Request::kTree: return Tree(request.tree(), out->mutable_tree());
    case rpc::Request::kInspectBlock:
      return Inspect(request.inspect_block(), out->mutable_inspect_block());
    case rpc::Request::kStats: Stats(out->mutable_stats()); return Status::Ok();
    case rpc::Request::kEvict: return Evict(request.evict(), out->mutable_evict());
    case rpc::Request::kFlush: Flush(out->mutable_flush()); return Status::Ok();
    case rpc::Request::kEngineReport:
      if (c_.metrics != nullptr) c_.metrics->AddEngineReport(request.engine_report());
      out->mutable_engine_report();
      return Status::Ok();
    default: return Status::InvalidArgument("not an operator request");
  }
}

void OperatorService::Pools(rpc::PoolsResponse* out) const {
  const PoolPlan& plan = *c_.plan;
  out->set_model_name(plan.model_name);
  out->set_tokens_per_block(plan.cache.tokens_per_block);
  out->set_tensor_parallel_size(c_.pools->tensor_parallel_size());
  out->set_budget_bytes(plan.budget_bytes);
  out->set_budget_limited_by(plan.limited_by_max_tokens() ? "max_tokens"
                                                          : "free_gpu_memory_fraction");
  out->set_bytes_per_token(plan.bytes_per_token);
  out->set_eviction_policy(c_.eviction_policy);
  out->set_offload_min_priority(c_.offload_min_priority);
  const BlockManagerStats ms = c_.cache->manager().GetStats();
  out->set_tree_nodes(static_cast<std::int64_t>(ms.tree_nodes));
  for (const PoolStats& p : ms.pools) {
    const RankPool& rp = c_.pools->pools()[static_cast<std::size_t>(p.pool.value)];
    const PoolSpec& spec = plan.pool(rp.plan_pool);
    rpc::PoolDetail* d = out->add_pools();
    FillPoolStatus(p, rp, d->mutable_status());
    d->set_plan_pool(rp.plan_pool.value);
    d->set_dtype(std::string(KvDtypeName(rp.layout.dtype)));
    d->set_kv_layout(std::string(KvLayoutName(rp.layout.order())));
    d->mutable_layers()->Add(rp.layers.begin(), rp.layers.end());
    d->set_share(spec.share);
    d->set_pool_scale(rp.pool_scale);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& t = rp.layout.components[c];
      if (t.present()) DescribeComponent(static_cast<KvComponent>(c), t, d->add_components());
    }
    for (int prio = 0; prio <= kMaxPriority; ++prio) {
      const std::int64_t n = p.cached_by_priority[static_cast<std::size_t>(prio)];
      if (n == 0) continue;
      rpc::PriorityBlocks* pb = d->add_cached_by_priority();
      pb->set_priority(prio);
      pb->set_blocks(n);
    }
    d->set_input_blocks(static_cast<std::int64_t>(p.input_blocks));
    d->set_reused_blocks(static_cast<std::int64_t>(p.reused_blocks));
    d->set_stored_blocks(static_cast<std::int64_t>(p.stored_blocks));
    d->set_evicted_blocks(static_cast<std::int64_t>(p.evicted_blocks));
    d->set_claimed_blocks(static_cast<std::int64_t>(p.claimed_blocks));
    d->set_restored_blocks(static_cast<std::int64_t>(p.restored_blocks));
  }
  const OffloadStats os = c_.cache->engine().stats();
  FillTier("host", os.has_host, os.host, out->add_tiers());
  FillTier("disk", os.has_disk, os.disk, out->add_tiers());
}

Status OperatorService::ListBlocks(const rpc::ListBlocksRequest& in, rpc::ListBlocksResponse* out) {
  BlockManager& m = c_.cache->manager();
  CachedBlockFilter filter;
  if (in.has_pool()) {
    if (in.pool() < 0 || in.pool() >= m.num_pools()) {
      return Status::InvalidArgument(
          StrCat("pool ", in.pool(), " does not exist (the node has ", m.num_pools(), ")"));
    }
    filter.pool = in.pool();
  }
  if (in.has_min_priority()) filter.min_priority = in.min_priority();
  if (in.has_max_priority()) filter.max_priority = in.max_priority();
  if (filter.min_priority < 0 || filter.max_priority > kMaxPriority ||
      filter.min_priority > filter.max_priority) {
    return Status::InvalidArgument(StrCat("priority range ", filter.min_priority, "..",
                                          filter.max_priority, " is not within 0..100"));
  }
  const std::uint32_t limit =
      in.limit() == 0 ? kDefaultListLimit : std::min(in.limit(), kMaxListLimit);
  const BlockListPage page = m.ListCachedBlocks(in.cursor(), limit, filter, kMaxListScan);
  ages_.Poll();
  OffloadEngine& engine = c_.cache->engine();
  for (const ListedBlock& lb : page.blocks) {
    const CachedBlockInfo& b = lb.info;
    rpc::BlockEntry* e = out->add_blocks();
    e->set_content_id(b.content_id.ToHex());
    e->set_parent_id(b.parent_id.ToHex());
    e->set_depth(b.depth);
    e->set_priority(b.priority);
    e->set_priority_expires_in_ms(
        lb.priority_expires_in_ns < 0 ? -1 : lb.priority_expires_in_ns / 1000000);
    e->mutable_block_ids()->Add(b.block_ids.begin(), b.block_ids.end());
    e->mutable_pins()->Add(b.pins.begin(), b.pins.end());
    if (in.tiers()) {
      for (int p = 0; p < engine.num_pools(); ++p) {
        e->add_host(engine.host() != nullptr &&
                    engine.host()->Contains(TierPoolId{p}, b.content_id));
        e->add_disk(engine.disk() != nullptr &&
                    engine.disk()->Contains(TierPoolId{p}, b.content_id));
      }
    }
    e->set_age_s(ages_.Age(b.content_id).value_or(-1.0));
  }
  out->set_next_cursor(page.next_cursor);
  out->set_total_blocks(page.total);
  out->set_scanned(page.scanned);
  return Status::Ok();
}

Status OperatorService::Tree(const rpc::TreeRequest& in, rpc::TreeResponse* out) const {
  BlockManager& m = c_.cache->manager();
  const TreeSummary s = m.SummarizeTree();
  out->set_nodes(s.nodes);
  out->set_domains(s.domains);
  out->set_leaves(s.leaves);
  out->set_pinned_nodes(s.pinned_nodes);
  out->set_max_depth(s.max_depth);
  out->mutable_depth_histogram()->Add(s.depth_histogram.begin(), s.depth_histogram.end());
  out->mutable_fanout_histogram()->Add(s.fanout_histogram.begin(), s.fanout_histogram.end());
  out->mutable_domain_nodes()->Add(s.domain_nodes.begin(), s.domain_nodes.end());
  if (in.prefix().empty() && in.max_nodes() == 0) return Status::Ok();
  std::optional<ContentId> start;
  if (!in.prefix().empty()) {
    KVMESH_ASSIGN_OR_RETURN(start, m.ResolveContentIdPrefix(in.prefix()));
  }
  const int depth = in.max_depth() <= 0 ? 4 : in.max_depth();
  const std::uint32_t nodes = in.max_nodes() == 0 ? 200 : std::min(in.max_nodes(), kMaxDumpNodes);
  KVMESH_ASSIGN_OR_RETURN(const TreeDump dump, m.DumpTree(start, depth, nodes));
  for (const TreeDumpNode& n : dump.nodes) FillDumpNode(n, out->add_dump());
  out->set_truncated(dump.truncated);
  return Status::Ok();
}

Status OperatorService::Inspect(const rpc::InspectBlockRequest& in,
                                rpc::InspectBlockResponse* out) const {
  KVMESH_ASSIGN_OR_RETURN(const ContentId id,
                          c_.cache->manager().ResolveContentIdPrefix(in.content_id()));
  return InspectCachedBlock(*c_.cache, *c_.pools, id, out);
}

void OperatorService::Stats(rpc::StatsResponse* out) const {
  out->set_uptime_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  if (c_.metrics != nullptr) c_.metrics->FillStats(out);
  const TieredCacheStats ts = c_.cache->stats();
  out->set_admissions(ts.admissions);
  out->set_input_blocks(ts.input_blocks);
  out->set_pool_hit_blocks(ts.pool_hit_blocks);
  out->set_host_hit_blocks(ts.host_hit_blocks);
  out->set_disk_hit_blocks(ts.disk_hit_blocks);
  out->set_remote_hit_blocks(ts.remote_hit_blocks);
  out->set_missed_blocks(ts.missed_blocks);
  std::int64_t evicted = 0;
  const BlockManagerStats ms = c_.cache->manager().GetStats();
  for (const PoolStats& p : ms.pools) evicted += static_cast<std::int64_t>(p.evicted_blocks);
  out->set_evicted_blocks(evicted);
  out->set_last_event_seq(ms.last_event_seq);
  out->set_tree_nodes(static_cast<std::int64_t>(ms.tree_nodes));
  const OffloadStats& os = ts.offload;
  out->set_host_evictions(os.host.evictions);
  out->set_disk_evictions(os.disk.evictions);
  out->set_offload_skipped_priority(os.skipped_priority);
  out->set_offload_skipped_clean(os.skipped_clean);
  out->set_onboard_corrupt(os.onboard_corrupt);
  FillCopy("offload", os.has_host ? "host" : "disk", os.offload, out);
  FillCopy("spill", "disk", os.spill, out);
  FillCopy("onboard", "host", os.onboard_host, out);
  FillCopy("onboard", "disk", os.onboard_disk, out);
  // Offloads go to one tier (host, or disk without a host tier): drop the other's empty row.
  auto* copies = out->mutable_copies();
  for (int i = copies->size() - 1; i >= 0; --i) {
    const rpc::CopyStats& c = copies->Get(i);
    if (c.direction() == "offload" && c.tier() != (os.has_host ? "host" : "disk")) {
      copies->DeleteSubrange(i, 1);
    }
  }
  if (c_.server != nullptr) {
    const ControlServerStats ss = c_.server->stats();
    out->set_requests_rejected(ss.requests_rejected);
    out->set_connections(ss.connections);
    out->set_inflight(ss.inflight);
  }
}

Status OperatorService::Evict(const rpc::EvictRequest& in, rpc::EvictResponse* out) {
  BlockManager& m = c_.cache->manager();
  EvictSelection sel;
  sel.dry_run = in.dry_run();
  if (!in.content_id().empty()) {
    KVMESH_ASSIGN_OR_RETURN(sel.subtree, m.ResolveContentIdPrefix(in.content_id()));
  }
  if (in.has_below_priority()) {
    if (in.below_priority() < 0 || in.below_priority() > kMaxPriority + 1) {
      return Status::InvalidArgument(
          StrCat("below priority ", in.below_priority(), " is not within 0..101"));
    }
    sel.below_priority = in.below_priority();
  }
  const std::int64_t offloads_before = c_.cache->engine().stats().offload.blocks;
  KVMESH_ASSIGN_OR_RETURN(const EvictOutcome o, m.EvictCachedBlocks(sel));
  out->set_evicted(o.evicted);
  out->set_kept_pinned(o.kept_pinned);
  out->set_kept_for_descendants(o.kept_for_descendants);
  out->set_kept_partial(o.kept_partial);
  out->set_dry_run(sel.dry_run);
  if (!sel.dry_run) {
    // Claimed blocks leave through the deferred path like every other victim (their copies run on
    // the copy workers): wait for them, so the answer says what reached a tier.
    c_.cache->engine().Drain();
    out->set_offloaded(c_.cache->engine().stats().offload.blocks - offloads_before);
    if (c_.metrics != nullptr) c_.metrics->AddOperatorEvicted(o.evicted);
    KVMESH_LOG_INFO(
        "evict on request evicted {} kept_pinned {} kept_for_descendants {} "
        "kept_partial {}",
        o.evicted, o.kept_pinned, o.kept_for_descendants, o.kept_partial);
  }
  return Status::Ok();
}

void OperatorService::Flush(rpc::FlushResponse* out) {
  const auto start = std::chrono::steady_clock::now();
  const FlushCounts f = FlushToDiskTier(
      *c_.cache, {.min_priority = c_.offload_min_priority, .full = FullDiskTier::kIsAFailure});
  out->set_written(f.written);
  out->set_failures(f.failures);
  out->set_not_fitting(f.not_fitting);
  out->set_already_on_disk(f.already);
  out->set_has_disk(c_.cache->engine().disk() != nullptr);
  out->set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (c_.metrics != nullptr) c_.metrics->AddOperatorFlushed(f.written);
  KVMESH_LOG_INFO("flush on request written {} failures {} not_fitting {} already_on_disk {}",
                  f.written, f.failures, f.not_fitting, f.already);
}

}  // namespace kvmesh
