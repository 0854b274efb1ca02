// The block manager's restore API (block_restore.h): plan, reserve hidden blocks, publish.
#include <algorithm>
#include <limits>

#include "common/check.h"
#include "common/strings.h"
#include "pool/block_manager_internal.h"

namespace kvmesh {

struct RestoreReservation::State {
  NodeRef root = kNoNode;  // holds a root reference until released
  NodeHandle parent;       // the node of block first_block - 1; none when first_block == 0
  std::vector<PinnedBlockRef> parent_pins;
  std::int64_t first_block = 0;
  std::int64_t count = 0;
  int num_pools = 0;
  std::vector<Token> tokens;                // [count * tokens_per_block]
  std::vector<std::vector<BlockMmRef>> mm;  // [count]
  std::vector<RetentionChoice> retention;   // [count]
  std::vector<BlockId> blocks;              // [count * num_pools]
  std::vector<ContentId> ids;               // [count]
  bool released = false;
};

RestoreReservation::RestoreReservation() = default;

RestoreReservation::RestoreReservation(BlockManager* owner, std::unique_ptr<State> state)
    : owner_(owner), state_(std::move(state)) {}

RestoreReservation::RestoreReservation(RestoreReservation&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), state_(std::move(other.state_)) {}

RestoreReservation& RestoreReservation::operator=(RestoreReservation&& other) noexcept {
  if (this != &other) {
    Abandon();
    owner_ = std::exchange(other.owner_, nullptr);
    state_ = std::move(other.state_);
  }
  return *this;
}

RestoreReservation::~RestoreReservation() { Abandon(); }

void RestoreReservation::Abandon() {
  if (owner_ != nullptr && state_ != nullptr && !state_->released) owner_->AbandonRestore(*state_);
  owner_ = nullptr;
  state_.reset();
}

std::int64_t RestoreReservation::first_block() const { return state_ ? state_->first_block : 0; }
std::int64_t RestoreReservation::count() const { return state_ ? state_->count : 0; }

BlockId RestoreReservation::block(std::int64_t i, int pool) const {
  KVMESH_CHECK(state_ && i >= 0 && i < state_->count && pool >= 0 && pool < state_->num_pools)
      << "reserved block " << i << " of pool " << pool;
  return state_->blocks[static_cast<std::size_t>(i * state_->num_pools + pool)];
}

const ContentId& RestoreReservation::content_id(std::int64_t i) const {
  KVMESH_CHECK(state_ && i >= 0 && i < state_->count) << "reserved block " << i;
  return state_->ids[static_cast<std::size_t>(i)];
}

namespace {

// Full blocks of the prompt that may be reused (the last token is recomputed unless
// reuse_last_token).
std::int64_t ReusableBlocks(std::size_t n, const SequenceOptions& options, std::int64_t t) {
  const auto len = static_cast<std::int64_t>(n);
  return (options.reuse_last_token ? len : len - 1) / t;
}

}  // namespace

Result<RestorePlan> BlockManager::PlanRestore(std::span<const Token> prompt,
                                              const SequenceOptions& options) const {
  KVMESH_RETURN_IF_ERROR(ValidateSequence(prompt, options));
  const std::int64_t t = tokens_per_block();
  const std::int64_t max_blocks = ReusableBlocks(prompt.size(), options, t);
  RestorePlan plan;
  plan.content_ids.reserve(static_cast<std::size_t>(std::max<std::int64_t>(max_blocks, 0)));
  ContentId domain_id;
  bool have_domain = false;
  ContentId namespace_digest;
  std::vector<BlockMmRef> mm;
  {
    MutexLock lock(&mu_);
    const PrefixTree& tree = cache_.tree();
    namespace_digest = tree.namespace_digest();
    NodeRef cur = tree.FindRoot(options.domain);
    if (cur != kNoNode) {
      domain_id = tree.node(cur).content_id;
      have_domain = true;
      for (std::int64_t i = 0; i < max_blocks; ++i) {
        mm.clear();
        MmRefsForBlock(options.multimodal, i * t, t, &mm);
        cur = tree.FindChild(cur, prompt.subspan(i * t, t), mm);
        if (cur == kNoNode) break;
        plan.content_ids.push_back(tree.node(cur).content_id);
        plan.path.push_back(tree.handle(cur));
      }
    }
  }
  plan.pool_blocks = static_cast<std::int64_t>(plan.content_ids.size());
  // The candidates' ids, outside the lock (one SHA-256 per block).
  ContentIdHasher hasher;
  if (!have_domain) domain_id = hasher.ForDomain(namespace_digest, options.domain);
  ContentId parent = plan.pool_blocks > 0 ? plan.content_ids.back() : domain_id;
  for (std::int64_t i = plan.pool_blocks; i < max_blocks; ++i) {
    mm.clear();
    MmRefsForBlock(options.multimodal, i * t, t, &mm);
    parent = hasher.ForBlock(parent, domain_id, prompt.subspan(i * t, t), mm);
    plan.content_ids.push_back(parent);
  }
  return plan;
}

Result<RestoreReservation> BlockManager::ReserveRestore(std::span<const Token> prompt,
                                                        const SequenceOptions& options,
                                                        const RestorePlan& plan,
                                                        std::int64_t count) {
  KVMESH_RETURN_IF_ERROR(ValidateSequence(prompt, options));
  const std::int64_t t = tokens_per_block();
  const std::int64_t max_blocks = ReusableBlocks(prompt.size(), options, t);
  if (static_cast<std::int64_t>(plan.content_ids.size()) != max_blocks || plan.pool_blocks < 0 ||
      plan.pool_blocks > max_blocks) {
    return Status::InvalidArgument(StrCat("restore plan of ", plan.content_ids.size(),
                                          " blocks does not fit a prompt of ", max_blocks,
                                          " reusable blocks"));
  }
  if (count < 0 || count > plan.num_candidates()) {
    return Status::InvalidArgument(
        StrCat("restore count ", count, " is outside 0..", plan.num_candidates()));
  }
  // A wait for moves out happens without the lock; then everything is looked at again.
  std::uint64_t wait_target = 0;
  for (bool wait = false;; wait = true) {
    if (wait) AwaitMoves(wait_target);
    MutexLock lock(&mu_);
    Result<std::unique_ptr<RestoreReservation::State>> st =
        ReserveLocked(prompt, options, plan, count);
    if (!st.ok()) return st.status();
    if (*st == nullptr) {  // must wait for moves out
      wait_target = cache_.move_wait_target();
      ++counters_.move_out_waits;
      continue;
    }
    return RestoreReservation(this, std::move(*st));
  }
}

Result<std::unique_ptr<RestoreReservation::State>> BlockManager::ReserveLocked(
    std::span<const Token> prompt, const SequenceOptions& options, const RestorePlan& plan,
    std::int64_t count) {
  const std::int64_t t = tokens_per_block();
  auto st = std::make_unique<RestoreReservation::State>();
  st->first_block = plan.pool_blocks;
  st->num_pools = num_pools();
  ExpireRetention();
  PrefixTree& tree = cache_.tree();
  st->root = tree.AcquireRoot(options.domain);
  NodeRef cur = st->root;
  std::vector<BlockMmRef> mm;
  for (std::int64_t i = 0; i < plan.pool_blocks; ++i) {
    mm.clear();
    MmRefsForBlock(options.multimodal, i * t, t, &mm);
    cur = tree.FindChild(cur, prompt.subspan(i * t, t), mm);
    if (cur == kNoNode || tree.node(cur).content_id != plan.content_ids[i]) {
      tree.ReleaseRoot(st->root);
      if (cur != kNoNode) return Status::InvalidArgument("restore plan of other tokens");
      return Status::FailedPrecondition(
          StrCat("the tree no longer holds block ", i, " of the restore plan; plan again"));
    }
  }
  if (plan.pool_blocks < static_cast<std::int64_t>(plan.content_ids.size())) {
    // Stored or restored since the plan: restoring it again would only make a duplicate.
    const std::int64_t i = plan.pool_blocks;
    mm.clear();
    MmRefsForBlock(options.multimodal, i * t, t, &mm);
    if (tree.FindChild(cur, prompt.subspan(i * t, t), mm) != kNoNode) {
      tree.ReleaseRoot(st->root);
      return Status::FailedPrecondition(StrCat(
          "the tree holds block ", i, " since the restore plan, which had it missing; plan again"));
    }
  }
  if (plan.pool_blocks > 0) {
    st->parent = tree.handle(cur);
    for (int p = 0; p < num_pools(); ++p) {
      const BlockId b = tree.block(cur, p);
      if (!b.valid()) continue;
      cache_.Pin(p, b);
      st->parent_pins.push_back({PoolId{p}, b, tree.node(cur).content_id});
    }
    external_pins_ += static_cast<std::int64_t>(st->parent_pins.size());
  }
  std::int64_t k = count;
  for (int p = 0; p < num_pools(); ++p) k = std::min(k, cache_.Available(p));
  std::vector<std::int64_t> need(num_pools(), 0);
  for (int p = 0; p < num_pools(); ++p) need[p] = cache_.unlimited(p) ? 0 : k;
  if (k > 0 && !cache_.MakeAllocatable(need)) {  // undo, wait without the lock, try again
    for (const PinnedBlockRef& r : st->parent_pins) cache_.Unpin(r.pool.value, r.block);
    external_pins_ -= static_cast<std::int64_t>(st->parent_pins.size());
    tree.ReleaseRoot(st->root);
    FlushEvents();
    return std::unique_ptr<RestoreReservation::State>();
  }
  st->count = k;
  st->blocks.reserve(static_cast<std::size_t>(k * num_pools()));
  for (std::int64_t i = 0; i < k; ++i) {
    for (int p = 0; p < num_pools(); ++p) st->blocks.push_back(cache_.Allocate(p));
  }
  external_pins_ += k * num_pools();
  const std::int64_t first = plan.pool_blocks;
  st->tokens.assign(prompt.begin() + first * t, prompt.begin() + (first + k) * t);
  for (std::int64_t i = 0; i < k; ++i) {
    auto& refs = st->mm.emplace_back();
    MmRefsForBlock(options.multimodal, (first + i) * t, t, &refs);
    st->retention.push_back(RetentionFor(options.retention, (first + i) * t, (first + i + 1) * t)
                                .value_or(RetentionChoice{}));
    st->ids.push_back(plan.content_ids[first + i]);
  }
  FlushEvents();
  return st;
}

void BlockManager::ReleaseRestore(RestoreReservation::State& st, std::int64_t from) {
  for (std::int64_t i = from; i < st.count; ++i) {
    for (int p = 0; p < st.num_pools; ++p) {
      cache_.Unpin(p, st.blocks[static_cast<std::size_t>(i * st.num_pools + p)]);
    }
  }
  external_pins_ -= (st.count - from) * st.num_pools;
  for (const PinnedBlockRef& r : st.parent_pins) cache_.Unpin(r.pool.value, r.block);
  external_pins_ -= static_cast<std::int64_t>(st.parent_pins.size());
  st.parent_pins.clear();
  cache_.tree().ReleaseRoot(st.root);
  st.root = kNoNode;
  st.released = true;
}

void BlockManager::AbandonRestore(RestoreReservation::State& st) {
  MutexLock lock(&mu_);
  ReleaseRestore(st, 0);
  FlushEvents();
}

Result<PublishedRestore> BlockManager::PublishRestore(RestoreReservation reservation,
                                                      std::int64_t ready, bool keep_pinned) {
  if (reservation.owner_ != this || reservation.state_ == nullptr || reservation.state_->released) {
    return Status::InvalidArgument("restore reservation is empty or of another block manager");
  }
  RestoreReservation::State& st = *reservation.state_;
  if (ready < 0 || ready > st.count) {
    return Status::InvalidArgument(StrCat("ready ", ready, " is outside 0..", st.count));
  }
  PublishedRestore out;
  std::vector<PinnedBlockRef> refs;
  const std::int64_t t = tokens_per_block();
  const int np = st.num_pools;
  MutexLock lock(&mu_);
  ExpireRetention();
  PrefixTree& tree = cache_.tree();
  NodeRef parent = st.root;
  if (st.first_block > 0) parent = tree.IsCurrent(st.parent) ? st.parent.node : kNoNode;
  std::optional<std::int64_t> now;
  std::int64_t i = 0;
  for (; i < ready && parent != kNoNode; ++i) {
    const std::span<const Token> key(st.tokens.data() + i * t, static_cast<std::size_t>(t));
    const std::span<const BlockId> blocks(st.blocks.data() + i * np, static_cast<std::size_t>(np));
    const std::uint64_t hash = tree.KeyHash(parent, key, st.mm[i]);
    NodeRef node = tree.FindChild(parent, key, st.mm[i], hash);
    if (node != kNoNode) {  // stored meanwhile: keep that node, free ours
      for (int p = 0; p < np; ++p) cache_.Unpin(p, blocks[p]);
      external_pins_ -= np;
      ++out.duplicates;
      if (keep_pinned) {
        for (int p = 0; p < np; ++p) {
          const BlockId b = tree.block(node, p);
          if (!b.valid()) continue;
          cache_.Pin(p, b);
          refs.push_back({PoolId{p}, b, st.ids[i]});
          ++external_pins_;
        }
      }
    } else {
      const RetentionChoice& r = st.retention[i];
      std::int64_t expiry = kNoExpiry;
      if (r.duration) {
        if (!now) now = NowNs();
        expiry = *now + r.duration->count();
      }
      node = cache_.Store(parent, key, st.mm[i], hash, blocks, r.priority, expiry);
      KVMESH_CHECK(tree.node(node).content_id == st.ids[i])
          << "restored block " << i << " stored under another content id than planned";
      ++out.published;
      for (int p = 0; p < np; ++p) {
        cache_.CountRestored(p);
        if (keep_pinned) {
          refs.push_back({PoolId{p}, blocks[p], st.ids[i]});  // the reservation's pin moves over
        } else {
          cache_.Unpin(p, blocks[p]);
          --external_pins_;
        }
      }
    }
    parent = node;
  }
  out.discarded = st.count - i;
  ReleaseRestore(st, i);
  FlushEvents();
  reservation.owner_ = nullptr;
  reservation.state_.reset();
  out.pins = PinnedBlocks(this, std::move(refs));
  return out;
}

}  // namespace kvmesh
