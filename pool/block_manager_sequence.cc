// The block manager's calls on running sequences (append, store, remove), pins for the tiers and
// transfers, and observation (tables, stats, invariants).
#include <algorithm>

#include "common/check.h"
#include "common/strings.h"
#include "pool/block_manager_internal.h"

namespace kvmesh {
namespace {

Status UnknownRequest(RequestId request) {
  return Status::NotFound(StrCat("request ", request.value, " is not running"));
}

}  // namespace

void BlockManager::ReleaseOutOfWindow(Sequence* seq, bool stored_only, AppendResult* out) {
  const std::int64_t t = tokens_per_block();
  const std::int64_t n = static_cast<std::int64_t>(seq->tokens.size());
  for (int p = 0; p < num_pools(); ++p) {
    const std::int64_t w = cache_.window(p);
    if (w == 0 || n <= w) continue;
    // Position i is out of the window once its last token precedes n - w.
    std::int64_t limit = (n - w) / t;
    if (stored_only) limit = std::min(limit, seq->stored_blocks);
    auto& table = seq->tables[p];
    for (std::int64_t i = seq->released_upto[p]; i < limit; ++i) {
      if (table[i] < 0) continue;
      cache_.Unpin(p, BlockId{table[i]});
      table[i] = -1;
      if (out != nullptr) out->released_positions[p].push_back(i);
    }
    seq->released_upto[p] = std::max(seq->released_upto[p], limit);
  }
}

Result<AppendResult> BlockManager::AppendTokens(RequestId request, std::span<const Token> tokens) {
  if (tokens.empty()) return Status::InvalidArgument("tokens is empty");
  // A wait for moves out happens without the lock; then everything is looked at again.
  std::uint64_t wait_target = 0;
  for (bool wait = false;; wait = true) {
    if (wait) AwaitMoves(wait_target);
    MutexLock lock(&mu_);
    auto it = sequences_.find(request);
    if (it == sequences_.end()) return UnknownRequest(request);
    Sequence* seq = it->second.get();
    ExpireRetention();
    const std::int64_t t = tokens_per_block();
    const std::int64_t new_len = static_cast<std::int64_t>(seq->tokens.size() + tokens.size());
    const std::int64_t have = static_cast<std::int64_t>(seq->tables[0].size());
    const std::int64_t add = std::max<std::int64_t>(0, (new_len + t - 1) / t - have);
    std::vector<std::int64_t> need(num_pools(), 0);
    for (int p = 0; p < num_pools(); ++p) {
      if (add > cache_.Available(p)) return ExhaustedError(p, add, 0);
      if (!cache_.unlimited(p)) need[p] = add;
    }
    if (add > 0 && !cache_.MakeAllocatable(need)) {
      FlushEvents();
      wait_target = cache_.move_wait_target();
      ++counters_.move_out_waits;
      continue;
    }
    return AppendLocked(seq, tokens, add, new_len);
  }
}

AppendResult BlockManager::AppendLocked(Sequence* seq, std::span<const Token> tokens,
                                        std::int64_t add, std::int64_t new_len) {
  AppendResult out;
  out.new_blocks.resize(num_pools());
  out.released_positions.resize(num_pools());
  for (std::int64_t k = 0; k < add; ++k) {
    for (int p = 0; p < num_pools(); ++p) {
      const BlockId b = cache_.Allocate(p);
      seq->tables[p].push_back(b.value);
      out.new_blocks[p].push_back(b.value);
    }
  }
  seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
  out.num_tokens = new_len;
  ReleaseOutOfWindow(seq, /*stored_only=*/false, &out);
  FlushEvents();
  return out;
}

Result<std::int64_t> BlockManager::StoreFullBlocks(RequestId request,
                                                   std::optional<std::int64_t> num_computed) {
  MutexLock lock(&mu_);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return UnknownRequest(request);
  Sequence* seq = it->second.get();
  const std::int64_t len = static_cast<std::int64_t>(seq->tokens.size());
  const std::int64_t computed = num_computed.value_or(len);
  if (computed < 0 || computed > len) {
    return Status::InvalidArgument(StrCat("num_computed_tokens ", computed, " is outside 0..", len,
                                          " (the length of request ", request.value, ")"));
  }
  ExpireRetention();
  PrefixTree& tree = cache_.tree();
  const std::int64_t t = tokens_per_block();
  std::optional<std::int64_t> now;  // the clock is read once, and only when a duration needs it
  auto expiry = [&](const std::optional<Nanos>& duration) {
    if (!duration) return kNoExpiry;
    if (!now) now = NowNs();
    return *now + duration->count();
  };
  std::int64_t stored = 0;
  std::vector<BlockMmRef> mm;
  std::vector<BlockId> blocks(num_pools());
  for (std::int64_t i = seq->stored_blocks; !seq->store_broken && (i + 1) * t <= computed; ++i) {
    NodeRef parent = seq->root;
    if (i > 0) {
      if (!tree.IsCurrent(seq->nodes[i - 1])) {
        seq->store_broken = true;
        break;
      }
      parent = seq->nodes[i - 1].node;
    }
    const std::span<const Token> key(seq->tokens.data() + i * t, static_cast<std::size_t>(t));
    mm.clear();
    MmRefsForBlock(seq->multimodal, i * t, t, &mm);
    const std::uint64_t hash = tree.KeyHash(parent, key, mm);
    NodeRef node = tree.FindChild(parent, key, mm, hash);
    if (node == kNoNode) {
      bool any = false;
      for (int p = 0; p < num_pools(); ++p) {
        blocks[p] = BlockId{seq->tables[p][i]};
        any = any || blocks[p].valid();
      }
      if (!any) {  // every block of this position was released before it was stored
        seq->store_broken = true;
        break;
      }
      RetentionChoice r;
      if (i < seq->prompt_positions) {
        r = RetentionFor(seq->retention, i * t, (i + 1) * t).value_or(RetentionChoice{});
      } else {
        r = RetentionChoice{seq->decode_priority, seq->decode_duration};
      }
      const std::int64_t k = i - seq->pending_ids_from;
      const ContentId* known = k >= 0 && k < std::ssize(seq->pending_ids)
                                   ? &seq->pending_ids[static_cast<std::size_t>(k)]
                                   : nullptr;
      node = cache_.Store(parent, key, mm, hash, blocks, r.priority, expiry(r.duration), known);
      ++stored;
    }
    // else: another sequence stored this key first; this sequence's blocks stay private.
    seq->nodes.push_back(tree.handle(node));
    seq->stored_blocks = i + 1;
  }
  ReleaseOutOfWindow(seq, /*stored_only=*/true, nullptr);
  FlushEvents();
  return stored;
}

Status BlockManager::PendingContentIds(RequestId request, std::vector<ContentId>* out) {
  out->clear();
  MutexLock lock(&mu_);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return UnknownRequest(request);
  Sequence* seq = it->second.get();
  const std::int64_t t = tokens_per_block();
  const std::int64_t from = seq->stored_blocks;
  const std::int64_t end = static_cast<std::int64_t>(seq->tokens.size()) / t;
  PrefixTree& tree = cache_.tree();
  if (seq->store_broken || (from > 0 && !tree.IsCurrent(seq->nodes[from - 1]))) {
    return Status::FailedPrecondition(StrCat("request ", request.value, ": its blocks from ", from,
                                             " on can no longer be stored (a block before them "
                                             "left the cache)"));
  }
  // Those already computed from `from` on are kept (pending_ids_from <= from: stored_blocks only
  // grows); the ones stored since are dropped, the rest computed now.
  std::vector<ContentId>& ids = seq->pending_ids;
  ids.erase(ids.begin(), ids.begin() + std::min(from - seq->pending_ids_from, std::ssize(ids)));
  seq->pending_ids_from = from;
  ContentId parent = ids.empty() ? (from > 0 ? tree.node(seq->nodes[from - 1].node).content_id
                                             : tree.node(seq->root).content_id)
                                 : ids.back();
  std::vector<BlockMmRef> mm;
  for (std::int64_t i = from + std::ssize(ids); i < end; ++i) {
    const std::span<const Token> key(seq->tokens.data() + i * t, static_cast<std::size_t>(t));
    mm.clear();
    MmRefsForBlock(seq->multimodal, i * t, t, &mm);
    parent = tree.ChildContentId(parent, seq->root, key, mm);
    ids.push_back(parent);
  }
  out->assign(ids.begin(), ids.end());
  return Status::Ok();
}

Status BlockManager::RemoveSequence(RequestId request) {
  MutexLock lock(&mu_);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return UnknownRequest(request);
  Sequence* seq = it->second.get();
  ExpireRetention();
  // Root to leaf, so that deeper blocks get the later use stamps.
  const std::size_t positions = seq->tables[0].size();
  for (std::size_t i = 0; i < positions; ++i) {
    for (int p = 0; p < num_pools(); ++p) {
      const std::int32_t b = seq->tables[p][i];
      if (b >= 0) cache_.Unpin(p, BlockId{b});
    }
  }
  cache_.tree().ReleaseRoot(seq->root);
  sequences_.erase(it);
  ++counters_.sequences_removed;
  FlushEvents();
  return Status::Ok();
}

Result<PinnedBlocks> BlockManager::PinByContentId(const ContentId& id) {
  MutexLock lock(&mu_);
  const PrefixTree& tree = cache_.tree();
  const NodeRef n = tree.FindByContentId(id);
  if (n == kNoNode) return Status::NotFound(StrCat("no cached block has content id ", id.ToHex()));
  std::vector<PinnedBlockRef> refs;
  for (int p = 0; p < num_pools(); ++p) {
    const BlockId b = tree.block(n, p);
    if (!b.valid()) continue;
    cache_.Pin(p, b);
    refs.push_back({PoolId{p}, b, id});
  }
  external_pins_ += static_cast<std::int64_t>(refs.size());
  return PinnedBlocks(this, std::move(refs));
}

Result<PinnedBlocks> BlockManager::PinSequenceBlocks(RequestId request) {
  MutexLock lock(&mu_);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return UnknownRequest(request);
  const Sequence& seq = *it->second;
  std::vector<PinnedBlockRef> refs;
  for (int p = 0; p < num_pools(); ++p) {
    for (std::int32_t b : seq.tables[p]) {
      if (b < 0) continue;
      cache_.Pin(p, BlockId{b});
      const NodeRef n = cache_.node_of(p, BlockId{b});
      refs.push_back(
          {PoolId{p}, BlockId{b}, n == kNoNode ? ContentId{} : cache_.tree().node(n).content_id});
    }
  }
  external_pins_ += static_cast<std::int64_t>(refs.size());
  return PinnedBlocks(this, std::move(refs));
}

void BlockManager::UnpinBlocks(std::span<const PinnedBlockRef> blocks) {
  MutexLock lock(&mu_);
  for (const PinnedBlockRef& r : blocks) cache_.Unpin(r.pool.value, r.block);
  external_pins_ -= static_cast<std::int64_t>(blocks.size());
  FlushEvents();
}

void BlockManager::ReportTierChange(PoolId pool, const ContentId& id, KvTier from, KvTier to) {
  MutexLock lock(&mu_);
  KvEvent e;
  e.type = KvEventType::kTierChanged;
  e.pool = pool;
  e.content_id = id;
  e.num_tokens = tokens_per_block();
  e.tier = to;
  e.previous_tier = from;
  const PrefixTree& tree = cache_.tree();
  const NodeRef n = tree.FindByContentId(id);
  if (n != kNoNode) {
    e.parent_id = tree.parent_content_id(n);
    e.priority = tree.node(n).priority;
    if (pool.value >= 0 && pool.value < num_pools()) e.block = tree.block(n, pool.value);
  }
  cache_.pending_events().push_back(e);
  FlushEvents();
}

Result<std::vector<BlockTable>> BlockManager::GetBlockTables(RequestId request) const {
  MutexLock lock(&mu_);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return UnknownRequest(request);
  std::vector<BlockTable> out;
  out.reserve(num_pools());
  for (int p = 0; p < num_pools(); ++p) out.push_back({PoolId{p}, it->second->tables[p]});
  return out;
}

Result<std::int64_t> BlockManager::SequenceLength(RequestId request) const {
  MutexLock lock(&mu_);
  auto it = sequences_.find(request);
  if (it == sequences_.end()) return UnknownRequest(request);
  return static_cast<std::int64_t>(it->second->tokens.size());
}

std::int64_t BlockManager::num_sequences() const {
  MutexLock lock(&mu_);
  return static_cast<std::int64_t>(sequences_.size());
}

BlockManagerStats BlockManager::GetStats() const {
  MutexLock lock(&mu_);
  ExpireRetention();
  cache_.ReclaimMovedOut();  // completed moves count as free
  BlockManagerStats s;
  s.counters = counters_;
  s.counters.move_out_wait_ns = move_out_wait_ns_.load(std::memory_order_relaxed);
  s.running_sequences = static_cast<std::int64_t>(sequences_.size());
  s.tree_nodes = cache_.tree().num_nodes();
  s.last_event_seq = events_.last_seq();
  s.events_overwritten = events_.overwritten();
  s.eviction_policy = config_.eviction_policy;
  for (int p = 0; p < num_pools(); ++p) {
    PoolStats ps;
    ps.pool = PoolId{p};
    ps.name = config_.pools[p].name;
    ps.window_tokens = config_.pools[p].window_tokens;
    ps.num_blocks = cache_.num_blocks(p);
    ps.free_blocks = cache_.free_blocks(p);
    ps.cached_blocks = cache_.cached_blocks(p);
    ps.pinned_blocks = cache_.pinned_blocks(p);
    ps.moving_out_blocks = cache_.moving_out_blocks(p);
    ps.private_blocks = cache_.allocated_blocks(p) - ps.cached_blocks - ps.moving_out_blocks;
    ps.evictable_blocks = cache_.evictable_blocks(p);
    const CachePoolCounters& cc = cache_.counters(p);
    ps.allocated_blocks = cc.allocated_blocks;
    ps.stored_blocks = cc.stored_blocks;
    ps.evicted_blocks = cc.evicted_blocks;
    ps.claimed_blocks = cc.claimed_blocks;
    ps.moved_out_blocks = cc.moved_out_blocks;
    ps.restored_blocks = cc.restored_blocks;
    ps.allocation_waits = cc.allocation_waits;
    ps.cached_by_priority = cc.cached_by_priority;
    ps.input_blocks = pool_counters_[p].input_blocks;
    ps.reused_blocks = pool_counters_[p].reused_blocks;
    ps.partial_reused_blocks = pool_counters_[p].partial_reused_blocks;
    s.pools.push_back(std::move(ps));
  }
  return s;
}

Status BlockManager::CheckInvariants() const {
  MutexLock lock(&mu_);
  KVMESH_RETURN_IF_ERROR(cache_.CheckInvariants());
  // Every pin is a sequence's table entry or an outstanding PinnedBlocks handle.
  std::int64_t held = 0;
  for (const auto& [id, seq] : sequences_) {
    for (int p = 0; p < num_pools(); ++p) {
      if (seq->tables[p].size() != seq->tables[0].size()) {
        return Status::Internal(StrCat("request ", id.value, " tables differ in length"));
      }
      for (std::int32_t b : seq->tables[p]) {
        if (b < 0) continue;
        if (!cache_.allocated(p, BlockId{b})) {
          return Status::Internal(
              StrCat("request ", id.value, " holds free block ", b, " of pool ", p));
        }
        ++held;
      }
    }
    if (!cache_.tree().node(seq->root).alive || !cache_.tree().node(seq->root).is_root) {
      return Status::Internal(StrCat("request ", id.value, " lost its domain root"));
    }
  }
  std::int64_t pins = 0;
  for (int p = 0; p < num_pools(); ++p) pins += cache_.TotalPins(p);
  if (pins != held + external_pins_) {
    return Status::Internal(
        StrCat("pins ", pins, " != sequence blocks ", held, " + external pins ", external_pins_));
  }
  return Status::Ok();
}

}  // namespace kvmesh
