#include "pool/trace_replay.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/check.h"
#include "common/strings.h"
#include "pool/block_allocator.h"
#include "pool/optimal_replay.h"

namespace kvmesh {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

Status CheckPriority(const char* field, int p) {
  if (p < kMinPriority || p > kMaxPriority) {
    return Status::InvalidArgument(
        StrCat("priorities.", field, " ", p, " is outside ", kMinPriority, "..", kMaxPriority));
  }
  return Status::Ok();
}

KeyNamespace ReplayNamespace(std::int32_t tokens_per_block) {
  KeyNamespace ns;
  ns.model_id = "kvmesh-trace-replay";
  ns.tokens_per_block = tokens_per_block;
  ns.pool_group = "replay";
  return ns;
}

}  // namespace

Status ReplayConfig::Validate() const {
  if (tokens_per_block < 2 || (tokens_per_block & (tokens_per_block - 1)) != 0) {
    return Status::InvalidArgument(
        StrCat("tokens_per_block ", tokens_per_block, " is not a power of two greater than 1"));
  }
  if (capacity_blocks && (*capacity_blocks < 1 || *capacity_blocks > kMaxBlocksPerPool)) {
    return Status::InvalidArgument(
        StrCat("capacity_blocks ", *capacity_blocks, " is outside 1..", kMaxBlocksPerPool));
  }
  if (priorities.system_prompt_blocks < 0) {
    return Status::InvalidArgument(StrCat("priorities.system_prompt_blocks ",
                                          priorities.system_prompt_blocks, " is negative"));
  }
  if (priorities.trace_block_tokens < 1) {
    return Status::InvalidArgument(StrCat("priorities.trace_block_tokens ",
                                          priorities.trace_block_tokens, " must be at least 1"));
  }
  KVMESH_RETURN_IF_ERROR(
      CheckPriority("system_prompt_priority", priorities.system_prompt_priority));
  KVMESH_RETURN_IF_ERROR(CheckPriority("tail_priority", priorities.tail_priority));
  if (progress_interval < 1) {
    return Status::InvalidArgument(
        StrCat("progress_interval ", progress_interval, " must be at least 1"));
  }
  if (optimal && tier_hooks != nullptr) {
    return Status::InvalidArgument("the offline optimum replays the pool alone (no tier hooks)");
  }
  return Status::Ok();
}

Status SetReplayPolicy(std::string_view name, ReplayConfig* config) {
  if (AsciiLower(name) == "optimal") {
    config->optimal = true;
    return Status::Ok();
  }
  Result<EvictionPolicyKind> kind = ParseEvictionPolicy(name);
  if (!kind.ok()) {
    return Status::InvalidArgument(
        StrCat("eviction policy '", name, "' is not one of lru, priority-lru, learned, optimal"));
  }
  config->optimal = false;
  config->policy = *kind;
  return Status::Ok();
}

Result<std::unique_ptr<TraceReplay>> TraceReplay::Create(ReplayConfig config) {
  KVMESH_RETURN_IF_ERROR(config.Validate());
  if (config.optimal) {
    return Status::InvalidArgument(
        "the offline optimum needs the whole trace in advance: use ReplayTrace");
  }
  BlockManagerConfig mc;
  mc.tokens_per_block = config.tokens_per_block;
  mc.pools.push_back(
      BlockPoolConfig{.name = "replay",
                      .num_blocks = config.capacity_blocks.value_or(kUnlimitedBlocks),
                      .window_tokens = 0});
  mc.key_namespace = ReplayNamespace(config.tokens_per_block);
  mc.eviction_policy = config.policy;
  mc.event_capacity = 1024;  // nobody polls them; a small ring is enough
  mc.enable_partial_reuse = false;
  BlockManagerEnv env;
  env.hash_seed = 0x6b766d657368ull;  // fixed: runs are reproducible, timing included
  if (config.tier_hooks != nullptr) env.eviction_listener = config.tier_hooks->eviction_listener();
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<BlockManager> manager,
                          BlockManager::Create(mc, std::move(env)));
  return std::unique_ptr<TraceReplay>(new TraceReplay(std::move(config), std::move(manager)));
}

TraceReplay::TraceReplay(ReplayConfig config, std::unique_ptr<BlockManager> manager)
    : config_(std::move(config)), manager_(std::move(manager)) {
  options_.reuse_last_token = true;
  options_.allow_partial_reuse = false;
  result_.policy = config_.policy;
  result_.capacity_blocks = config_.capacity_blocks;
  result_.tokens_per_block = config_.tokens_per_block;
  result_.priorities = config_.priorities;
}

TraceReplay::~TraceReplay() = default;

void TraceReplay::FillOptions(const TraceRequest& request) {
  options_.retention.clear();
  if (config_.policy != EvictionPolicyKind::kPriorityLru) return;
  const ReplayPriorities& p = config_.priorities;
  const auto n = std::ssize(request.hash_ids);
  const std::int64_t t = config_.tokens_per_block;
  const bool partial_tail = request.input_length < n * p.trace_block_tokens;
  const std::int64_t system =
      std::min<std::int64_t>(p.system_prompt_blocks, partial_tail ? n - 1 : n);
  if (system > 0) {
    options_.retention.push_back(RetentionRange{
        .begin_token = 0, .end_token = system * t, .priority = p.system_prompt_priority});
  }
  if (partial_tail) {
    options_.retention.push_back(RetentionRange{
        .begin_token = (n - 1) * t, .end_token = n * t, .priority = p.tail_priority});
  }
}

void TraceReplay::CallTierHooks(RequestId id, const TraceRequest& request,
                                const AddSequenceResult& added) {
  const std::int64_t pool_hit_blocks = added.reused_blocks;
  const auto n = std::ssize(request.hash_ids);
  if (pool_hit_blocks >= n) return;
  // The ids the manager will store the missed blocks under (computed once: StoreFullBlocks uses
  // them).
  const Status ids = manager_->PendingContentIds(id, &missed_);
  KVMESH_CHECK(ids.ok()) << ids.ToString();
  KVMESH_CHECK(std::ssize(missed_) == n - pool_hit_blocks)
      << missed_.size() << " pending ids for " << n - pool_hit_blocks << " missed blocks";
  const std::int64_t restored = config_.tier_hooks->OnPoolMiss(
      ReplayMiss{.request_index = result_.requests,
                 .request = &request,
                 .pool_hit_blocks = pool_hit_blocks,
                 .missed = missed_,
                 .missed_blocks = std::span<const std::int32_t>(added.tables[0].block_ids)
                                      .subspan(static_cast<std::size_t>(pool_hit_blocks))});
  KVMESH_CHECK(restored >= 0 && restored <= std::ssize(missed_))
      << "OnPoolMiss returned " << restored << " of " << missed_.size() << " missed blocks";
  result_.restored_blocks += restored;
}

Status TraceReplay::Replay(const TraceRequest& request) {
  const auto start = SteadyClock::now();
  const RequestId id{static_cast<std::uint64_t>(result_.requests)};
  ++result_.requests;
  const auto n = std::ssize(request.hash_ids);
  if (n == 0) return Status::Ok();
  result_.input_blocks += n;
  if (config_.capacity_blocks && n > *config_.capacity_blocks) {
    ++result_.rejected_requests;  // it could never be admitted: nothing reused
    result_.wall_s += SecondsSince(start);
    return Status::Ok();
  }
  const std::int64_t t = config_.tokens_per_block;
  tokens_.resize(static_cast<std::size_t>(n * t));
  for (std::int64_t i = 0; i < n; ++i) {
    BlockTokens(request.hash_ids[static_cast<std::size_t>(i)],
                std::span<Token>(tokens_.data() + i * t, static_cast<std::size_t>(t)));
  }
  FillOptions(request);
  KVMESH_ASSIGN_OR_RETURN(const AddSequenceResult added,
                          manager_->AddSequence(id, tokens_, options_));
  result_.reused_blocks += added.reused_blocks;
  if (config_.tier_hooks != nullptr) CallTierHooks(id, request, added);
  Result<std::int64_t> stored = manager_->StoreFullBlocks(id);
  const Status removed = manager_->RemoveSequence(id);
  if (!stored.ok()) return stored.status();
  KVMESH_RETURN_IF_ERROR(removed);
  result_.wall_s += SecondsSince(start);
  return Status::Ok();
}

ReplayResult TraceReplay::Summary() const {
  ReplayResult r = result_;
  r.stats = manager_->GetStats();
  r.evicted_blocks = static_cast<std::int64_t>(r.stats.pools[0].evicted_blocks);
  r.cached_blocks = r.stats.pools[0].cached_blocks;
  return r;
}

Result<ReplayResult> ReplayTrace(std::span<const TraceRequest> trace, const ReplayConfig& config) {
  if (config.optimal) return ReplayOptimal(trace, config);
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<TraceReplay> replay, TraceReplay::Create(config));
  ReplayProgress progress;
  progress.requests_total = std::ssize(trace);
  const auto start = SteadyClock::now();
  for (std::size_t i = 0; i < trace.size(); ++i) {
    KVMESH_RETURN_IF_ERROR(replay->Replay(trace[i]).WithContext(StrCat("request ", i)));
    const auto done = static_cast<std::int64_t>(i + 1);
    if (config.progress && (done % config.progress_interval == 0 || i + 1 == trace.size())) {
      const ReplayResult& r = replay->counts();
      progress.requests_done = done;
      progress.input_blocks = r.input_blocks;
      progress.reused_blocks = r.reused_blocks;
      progress.elapsed_s = SecondsSince(start);
      config.progress(progress);
    }
  }
  ReplayResult result = replay->Summary();
  result.wall_s = SecondsSince(start);
  return result;
}

}  // namespace kvmesh
