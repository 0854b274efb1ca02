#include "pool/block_manager.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <random>

#include "common/check.h"
#include "common/strings.h"
#include "common/thread_pool.h"
#include "kernels/block_copy.h"
#include "pool/block_manager_internal.h"

namespace kvmesh {
namespace {

Status ValidateConfig(const BlockManagerConfig& c, const BlockManagerEnv& env) {
  const std::int32_t t = c.tokens_per_block;
  if (t < 2 || !std::has_single_bit(static_cast<std::uint32_t>(t))) {
    return Status::InvalidArgument(
        StrCat("tokens_per_block ", t, " is not a power of two greater than 1"));
  }
  if (c.pools.empty()) return Status::InvalidArgument("a block manager needs at least one pool");
  if (c.key_namespace.tokens_per_block != 0 && c.key_namespace.tokens_per_block != t) {
    return Status::InvalidArgument(StrCat("key_namespace.tokens_per_block ",
                                          c.key_namespace.tokens_per_block,
                                          " differs from tokens_per_block ", t));
  }
  if (c.event_capacity == 0) return Status::InvalidArgument("event_capacity must be positive");
  if (c.max_moving_out_blocks < 0) {
    return Status::InvalidArgument(
        StrCat("max_moving_out_blocks ", c.max_moving_out_blocks, " is negative"));
  }
  for (std::size_t p = 0; p < c.pools.size(); ++p) {
    const BlockPoolConfig& pool = c.pools[p];
    if (pool.num_blocks != kUnlimitedBlocks &&
        (pool.num_blocks <= 0 || pool.num_blocks > kMaxBlocksPerPool)) {
      return Status::InvalidArgument(StrCat("pool ", p, " num_blocks ", pool.num_blocks,
                                            " must be in 1..", kMaxBlocksPerPool,
                                            " or kUnlimitedBlocks"));
    }
    if (pool.window_tokens < 0) {
      return Status::InvalidArgument(
          StrCat("pool ", p, " window_tokens ", pool.window_tokens, " is negative"));
    }
  }
  if (env.pool_memory.empty()) return Status::Ok();
  if (env.pool_memory.size() != c.pools.size()) {
    return Status::InvalidArgument(StrCat("pool_memory has ", env.pool_memory.size(), " views for ",
                                          c.pools.size(), " pools"));
  }
  for (std::size_t p = 0; p < c.pools.size(); ++p) {
    const KvPoolView& v = env.pool_memory[p];
    if (c.pools[p].num_blocks == kUnlimitedBlocks) {
      return Status::InvalidArgument(StrCat("pool ", p, " is unlimited but has pool memory"));
    }
    if (v.num_blocks < c.pools[p].num_blocks) {
      return Status::InvalidArgument(StrCat("pool ", p, " memory holds ", v.num_blocks,
                                            " blocks, fewer than num_blocks ",
                                            c.pools[p].num_blocks));
    }
    if (v.layout.tokens_per_block() != t) {
      return Status::InvalidArgument(StrCat("pool ", p, " memory has tokens_per_block ",
                                            v.layout.tokens_per_block(), ", the manager ", t));
    }
    for (int k = 0; k < kNumKvComponents; ++k) {
      if (v.layout.components[k].present() && v.base[k] == nullptr) {
        return Status::InvalidArgument(StrCat("pool ", p, " memory lacks the base of component ",
                                              KvComponentName(static_cast<KvComponent>(k))));
      }
    }
  }
  return Status::Ok();
}

Status ValidateDuration(const std::optional<Nanos>& duration, std::string_view what) {
  if (!duration) return Status::Ok();
  if (duration->count() < 0) return Status::InvalidArgument(StrCat(what, " is negative"));
  if (*duration > kMaxRetentionDuration) {
    return Status::InvalidArgument(StrCat(what, " ", duration->count(), " ns is more than ",
                                          kMaxRetentionDuration.count(),
                                          " ns (100 years); leave it unset for no expiry"));
  }
  return Status::Ok();
}

Status ValidatePriority(int priority, std::string_view what) {
  if (priority < kMinPriority || priority > kMaxPriority) {
    return Status::InvalidArgument(
        StrCat(what, " ", priority, " is outside ", kMinPriority, "..", kMaxPriority));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateSequence(std::span<const Token> tokens, const SequenceOptions& o) {
  if (tokens.empty()) return Status::InvalidArgument("tokens is empty");
  KVMESH_RETURN_IF_ERROR(ValidatePriority(o.decode_priority, "decode_priority"));
  KVMESH_RETURN_IF_ERROR(ValidateDuration(o.decode_duration, "decode_duration"));
  std::int64_t prev_end = 0;
  for (std::size_t i = 0; i < o.retention.size(); ++i) {
    const RetentionRange& r = o.retention[i];
    if (r.begin_token < 0 || r.end_token <= r.begin_token) {
      return Status::InvalidArgument(StrCat("retention range ", i, " [", r.begin_token, ", ",
                                            r.end_token, ") is empty or negative"));
    }
    if (r.begin_token < prev_end) {
      return Status::InvalidArgument(StrCat("retention range ", i, " begins at ", r.begin_token,
                                            ", before the previous range ends at ", prev_end,
                                            " (ranges must be sorted and disjoint)"));
    }
    KVMESH_RETURN_IF_ERROR(
        ValidatePriority(r.priority, StrCat("retention range ", i, " priority")));
    KVMESH_RETURN_IF_ERROR(
        ValidateDuration(r.duration, StrCat("retention range ", i, " duration")));
    prev_end = r.end_token;
  }
  prev_end = 0;
  for (std::size_t i = 0; i < o.multimodal.size(); ++i) {
    const MultimodalItem& m = o.multimodal[i];
    if (m.begin_token < prev_end || m.num_tokens <= 0 ||
        m.begin_token + m.num_tokens > static_cast<std::int64_t>(tokens.size())) {
      return Status::InvalidArgument(
          StrCat("multimodal item ", i, " [", m.begin_token, ", ", m.begin_token + m.num_tokens,
                 ") is empty, overlaps the previous item or lies outside the ", tokens.size(),
                 " prompt tokens"));
    }
    prev_end = m.begin_token + m.num_tokens;
  }
  return Status::Ok();
}

namespace {

std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::optional<RetentionChoice> RetentionFor(const std::vector<RetentionRange>& ranges,
                                            std::int64_t begin, std::int64_t end) {
  std::optional<RetentionChoice> best;
  for (const RetentionRange& r : ranges) {
    if (r.end_token <= begin || r.begin_token >= end) continue;
    if (!best || r.priority > best->priority) best = RetentionChoice{r.priority, r.duration};
  }
  return best;
}

std::vector<std::int64_t> BlockByteOffsets(const BlockTable& table, const KvPoolLayout& layout,
                                           KvComponent c) {
  const std::int64_t bytes = layout.component(c).BytesPerBlock();
  std::vector<std::int64_t> out;
  out.reserve(table.block_ids.size());
  for (std::int32_t b : table.block_ids) out.push_back(b < 0 ? -1 : b * bytes);
  return out;
}

Result<std::unique_ptr<BlockManager>> BlockManager::Create(const BlockManagerConfig& config,
                                                           BlockManagerEnv env) {
  KVMESH_RETURN_IF_ERROR(ValidateConfig(config, env));
  std::uint64_t seed = env.hash_seed;
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ 1;
  }
  BlockManagerConfig c = config;
  c.key_namespace.tokens_per_block = c.tokens_per_block;
  return std::unique_ptr<BlockManager>(new BlockManager(std::move(c), std::move(env), seed));
}

namespace {
std::vector<CachePoolParams> CacheParams(const BlockManagerConfig& c) {
  std::vector<CachePoolParams> out;
  for (const BlockPoolConfig& p : c.pools) out.push_back({p.num_blocks, p.window_tokens});
  return out;
}
}  // namespace

BlockManager::BlockManager(BlockManagerConfig config, BlockManagerEnv env, std::uint64_t seed)
    : config_(std::move(config)),
      env_(std::move(env)),
      clock_(env_.clock != nullptr ? env_.clock : SystemClock::Default()),
      events_(config_.event_capacity),
      cache_(config_.tokens_per_block, CacheParams(config_), config_.eviction_policy,
             NamespaceDigest(config_.key_namespace), seed),
      pool_counters_(config_.pools.size()) {
  MutexLock lock(&mu_);
  cache_.set_listener(env_.eviction_listener);
  cache_.set_move_out(&moves_, config_.max_moving_out_blocks);
}

BlockManager::~BlockManager() {
  moves_.AwaitAllCompleted();  // the listener's copies may still read blocks of the pools
  MutexLock lock(&mu_);
  KVMESH_CHECK(external_pins_ == 0)
      << external_pins_ << " block pins outstanding when the block manager is destroyed";
}

void BlockManager::ExpireRetention() const {
  if (cache_.has_expiries()) cache_.ProcessExpiries(NowNs());  // the clock is read only then
}

void BlockManager::FlushEvents() {
  auto& pending = cache_.pending_events();
  if (pending.empty()) return;
  events_.Push(pending);
  pending.clear();
}

Status BlockManager::ExhaustedError(int p, std::int64_t need, std::int64_t unavailable) const {
  return Status::ResourceExhausted(StrCat(
      "pool ", p, " (", config_.pools[p].name, ") needs ", need, " blocks, ", cache_.free_blocks(p),
      " free, ", cache_.evictable_blocks(p) - unavailable, " evictable (", cache_.num_blocks(p),
      " in the pool, ", cache_.pinned_blocks(p), " pinned)"));
}

Status BlockManager::PlanAdmission(const Match& m, std::int64_t num_positions, Admission* a) const {
  const PrefixTree& tree = cache_.tree();
  const std::int64_t d = static_cast<std::int64_t>(m.path.size());
  a->num_positions = num_positions;
  if (m.partial != kNoNode) {
    a->claim = cache_.CanClaim(m.partial);
    a->copy = !a->claim;
  }
  a->first_new = d + (a->claim ? 1 : 0);
  for (int p = 0; p < num_pools(); ++p) {
    if (cache_.unlimited(p)) continue;
    const std::int64_t need = num_positions - a->first_new;
    // Blocks counted as evictable now that this admission pins (or claims) first.
    std::int64_t unavailable = 0;
    if (!cache_.is_window(p)) {
      for (NodeRef n : m.path) unavailable += tree.node(n).removable ? 1 : 0;
      if (m.partial != kNoNode) unavailable += tree.node(m.partial).removable ? 1 : 0;
    } else {
      for (std::int64_t j = m.window_first[p]; j < d; ++j) {
        unavailable += cache_.pins(p, tree.block(m.path[j], p)) == 0 ? 1 : 0;
      }
      if (m.partial != kNoNode) {
        unavailable += cache_.pins(p, tree.block(m.partial, p)) == 0 ? 1 : 0;
      }
    }
    if (need > cache_.Available(p) - unavailable) return ExhaustedError(p, need, unavailable);
  }
  return Status::Ok();
}

void BlockManager::CommitAdmission(Sequence* seq, const Match& m, Admission* a) {
  const PrefixTree& tree = cache_.tree();
  const std::int64_t d = static_cast<std::int64_t>(m.path.size());
  seq->tables.assign(num_pools(), std::vector<std::int32_t>(a->num_positions, -1));
  // Pin what is reused (and the copy source) before allocating, so eviction cannot take it.
  for (std::int64_t j = 0; j < d; ++j) {
    for (int p = 0; p < num_pools(); ++p) {
      if (j < m.window_first[p]) continue;
      const BlockId b = tree.block(m.path[j], p);
      cache_.Pin(p, b);
      seq->tables[p][j] = b.value;
    }
    seq->nodes.push_back(tree.handle(m.path[j]));
  }
  seq->stored_blocks = d;
  if (a->claim) {
    std::vector<BlockId> out(num_pools());
    cache_.Claim(m.partial, out);
    for (int p = 0; p < num_pools(); ++p) seq->tables[p][d] = out[p].value;
  } else if (a->copy) {
    for (int p = 0; p < num_pools(); ++p) cache_.Pin(p, tree.block(m.partial, p));
  }
  for (std::int64_t pos = a->first_new; pos < a->num_positions; ++pos) {
    for (int p = 0; p < num_pools(); ++p) seq->tables[p][pos] = cache_.Allocate(p).value;
  }
  if (a->copy) {
    for (int p = 0; p < num_pools(); ++p) cache_.Pin(p, BlockId{seq->tables[p][d]});
  }
}

bool BlockManager::MakeRoom(const Match& m, const Admission& a) {
  std::vector<std::int64_t> need(num_pools(), 0);
  bool short_of_free = false;
  for (int p = 0; p < num_pools(); ++p) {
    if (cache_.unlimited(p)) continue;
    need[p] = a.num_positions - a.first_new;
    short_of_free = short_of_free || cache_.free_blocks(p) < need[p];
  }
  if (!short_of_free) return true;
  // What this admission reuses (and the partial block it claims or copies) is pinned while room
  // is made, so that eviction cannot take it.
  const PrefixTree& tree = cache_.tree();
  std::vector<std::pair<int, BlockId>> pinned;
  for (std::size_t j = 0; j < m.path.size(); ++j) {
    for (int p = 0; p < num_pools(); ++p) {
      if (static_cast<std::int64_t>(j) < m.window_first[p]) continue;
      pinned.emplace_back(p, tree.block(m.path[j], p));
    }
  }
  if (m.partial != kNoNode) {
    for (int p = 0; p < num_pools(); ++p) {
      if (tree.block(m.partial, p).valid()) pinned.emplace_back(p, tree.block(m.partial, p));
    }
  }
  for (const auto& [p, b] : pinned) cache_.Pin(p, b);
  const bool ok = cache_.MakeAllocatable(need);
  for (const auto& [p, b] : pinned) cache_.Unpin(p, b);
  return ok;
}

void BlockManager::AwaitMoves(std::uint64_t target) {
  const auto start = std::chrono::steady_clock::now();
  if (EvictionListener* l = env_.eviction_listener; l != nullptr) {
    while (moves_.completions() < target && moves_.outstanding() > 0 && l->HelpMoveOut()) {
    }
  }
  moves_.AwaitCompletions(target);
  move_out_wait_ns_.fetch_add(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start)
                                     .count()),
      std::memory_order_relaxed);
}

void BlockManager::ApplyReuseRetention(const Sequence& seq, const Match& m) {
  if (seq.retention.empty()) return;
  const std::int64_t t = tokens_per_block();
  const std::int64_t now = NowNs();
  for (std::size_t j = 0; j < m.path.size(); ++j) {
    const auto choice = RetentionFor(seq.retention, static_cast<std::int64_t>(j) * t,
                                     static_cast<std::int64_t>(j + 1) * t);
    if (!choice) continue;
    cache_.SetRetention(m.path[j], choice->priority,
                        choice->duration ? now + choice->duration->count() : kNoExpiry);
  }
}

Result<AddSequenceResult> BlockManager::AddSequence(RequestId request,
                                                    std::span<const Token> prompt,
                                                    const SequenceOptions& options,
                                                    std::span<const NodeHandle> path_hint) {
  KVMESH_RETURN_IF_ERROR(ValidateSequence(prompt, options));
  const std::int64_t t = tokens_per_block();
  const std::int64_t n = static_cast<std::int64_t>(prompt.size());
  AddSequenceResult result;
  PinnedBlocks copy_pins;  // released (after the copy) outside the lock
  std::vector<BlockCopyPair> copies;
  std::vector<MovedOutBlock> claims;  // claimed blocks whose copy out the caller awaits
  // Until the admission fits without waiting: a wait for moves out happens without the lock,
  // and then everything is planned again (the tree may have changed meanwhile).
  std::uint64_t wait_target = 0;
  for (bool wait = false;; wait = true) {
    if (wait) AwaitMoves(wait_target);
    MutexLock lock(&mu_);
    if (sequences_.contains(request)) {
      return Status::InvalidArgument(StrCat("request ", request.value, " is already running"));
    }
    ExpireRetention();
    const NodeRef root = cache_.tree().AcquireRoot(options.domain);
    const bool allow_partial =
        config_.enable_partial_reuse && has_pool_memory() && options.allow_partial_reuse;
    const Match m = MatchPrefix(root, prompt, options, allow_partial, path_hint);
    Admission a;
    if (Status s = PlanAdmission(m, CeilDiv(n, t), &a); !s.ok()) {
      cache_.tree().ReleaseRoot(root);
      ++counters_.admissions_failed;
      return s;
    }
    if (!MakeRoom(m, a)) {
      cache_.tree().ReleaseRoot(root);
      FlushEvents();
      wait_target = cache_.move_wait_target();
      ++counters_.move_out_waits;
      continue;
    }
    auto seq = std::make_unique<Sequence>();
    seq->id = request;
    seq->root = root;
    seq->tokens.assign(prompt.begin(), prompt.end());
    seq->prompt_tokens = n;
    seq->prompt_positions = a.num_positions;
    seq->multimodal = options.multimodal;
    seq->retention = options.retention;
    seq->decode_priority = options.decode_priority;
    seq->decode_duration = options.decode_duration;
    seq->released_upto.assign(num_pools(), 0);
    CommitAdmission(seq.get(), m, &a);
    ApplyReuseRetention(*seq, m);

    const std::int64_t d = static_cast<std::int64_t>(m.path.size());
    result.reused_tokens = m.reused_tokens;
    result.reused_blocks = d;
    result.partial_tokens = m.partial_tokens;
    result.partial =
        a.claim ? PartialReuse::kClaimed : (a.copy ? PartialReuse::kCopied : PartialReuse::kNone);
    for (int p = 0; p < num_pools(); ++p) {
      result.tables.push_back(BlockTable{PoolId{p}, seq->tables[p]});
      BlockManagerPoolCounters& pc = pool_counters_[p];
      const std::int64_t reused_here = d - m.window_first[p];
      pc.input_blocks += reused_here + (a.num_positions - d);
      pc.reused_blocks += reused_here;
      pc.partial_reused_blocks += m.partial != kNoNode ? 1 : 0;
    }
    counters_.input_tokens += n;
    counters_.reused_tokens += m.reused_tokens;
    ++counters_.sequences_added;
    if (a.copy) {
      std::vector<PinnedBlockRef> refs;
      for (int p = 0; p < num_pools(); ++p) {
        const BlockId src = cache_.tree().block(m.partial, p);
        const BlockId dst{seq->tables[p][d]};
        refs.push_back({PoolId{p}, src, cache_.tree().node(m.partial).content_id});
        refs.push_back({PoolId{p}, dst, ContentId{}});
        copies.push_back({src.value, dst.value});
      }
      external_pins_ += static_cast<std::int64_t>(refs.size());
      copy_pins = PinnedBlocks(this, std::move(refs));
    }
    sequences_.emplace(request, std::move(seq));
    claims = cache_.TakePendingClaims();
    FlushEvents();
    break;
  }
  // A claimed block is the sequence's once its listener copied it out (without the lock). The
  // wait helps first, as AwaitMoves does: until the listener has nothing queued.
  if (!claims.empty() && env_.eviction_listener != nullptr) {
    while (env_.eviction_listener->HelpMoveOut()) {
    }
  }
  for (const MovedOutBlock& c : claims) moves_.AwaitClaim(c.pool, c.block);
  if (!copies.empty()) {
    // Outside the lock: the source (cached) and destination (this sequence's) are pinned.
    Status copy_status;
    for (int p = 0; p < num_pools() && copy_status.ok(); ++p) {
      BlockCopyArgs args;
      args.src = env_.pool_memory[p];
      args.dst = env_.pool_memory[p];
      args.pairs = &copies[p];
      args.num_pairs = 1;
      args.num_tokens = result.partial_tokens;
      copy_status =
          env_.block_copy ? env_.block_copy(args) : cpu::BlockCopy(args, env_.copy_executor);
    }
    if (!copy_status.ok()) {
      // The fresh block keeps whatever it held: the engine recomputes the partial tokens.
      MutexLock lock(&mu_);
      counters_.reused_tokens -= result.partial_tokens;
      for (auto& pc : pool_counters_) --pc.partial_reused_blocks;
      result.reused_tokens -= result.partial_tokens;
      result.partial_tokens = 0;
      result.partial = PartialReuse::kNone;
    }
  }
  return result;
}

}  // namespace kvmesh
