// BlockManager: the sequence API over the block pools of one model — which block holds which
// tokens, who may reuse it, and which block goes when a pool is full.
//
// THREAD SAFETY: every public method is thread-safe. One mutex (mu_) guards all state; the only
// work done outside it is the byte copy of a copy-on-partial-reuse (its source and destination are
// pinned meanwhile). Events can be polled without that mutex (KvEventBuffer has its own).
//
// Ownership: the manager owns its metadata. Pool memory (BlockManagerEnv::pool_memory) is the
// caller's (e.g. PoolStorage) and must outlive the manager; so must the clock, the executor and
// the eviction listener. PinnedBlocks handles must be released before the manager is destroyed.
//
// ---- Model
// Pools (BlockPoolConfig): one block id space each; window_tokens 0 = full attention, W > 0 =
// sliding window of W tokens (a token at position p attends to positions p-W+1 .. p). One prefix
// tree (prefix_tree.h) serves all pools: a tree node is one full block of a prefix and holds one
// block per pool. Identity and content ids: block_key.h. Eviction rules and block states:
// block_cache.h. Events: kv_events.h. Eviction hook: eviction_listener.h.
//
// ---- A sequence's life
//   AddSequence(request, prompt, options)
//     Matches the longest cached prefix of the prompt in the request's domain (salt, LoRA), pins
//     it, allocates fresh blocks for the rest (evicting as needed) and returns the block tables.
//     Reuse rules:
//       - The last prompt token is always recomputed: at most N-1 of N prompt tokens are reused.
//         options.reuse_last_token = true lifts this (block-granular callers such as trace replay,
//         where the blocks themselves are the units and all of them may match).
//       - Only blocks stored in the tree are reusable; a block is stored (StoreFullBlocks) as soon
//         as it is full and computed, while its request still runs (early reuse).
//       - A partly matching block (the next prompt block shares its first m tokens with a cached
//         child, or the last block matches but its last token must be recomputed) is reused
//         when the manager has pool memory: an unused cached leaf is claimed (taken out of the tree
//         and given to the sequence, no copy); a block in use or with children is copied — its
//         first m tokens, every component, by env.block_copy (cpu::BlockCopy unless set; the
//         CUDA block copy for device pools) — into a fresh block. Without pool
//         memory (a metadata-only manager) there is nothing to copy: partial reuse is off and
//         those tokens are recomputed. Blocks with multimodal items are never partly reused.
//       - Full-attention pools reuse every matched block; a window pool only the blocks that
//         overlap the window of the first recomputed token, [L-W+1, L) for L reused tokens, and
//         L shrinks (block by block) until every window pool has those blocks. Block table entries
//         a window pool does not hold are -1.
//     Retention: a block takes the highest priority of the options.retention ranges overlapping
//     its tokens (their duration with it); a new block no range covers gets kDefaultPriority
//     (35). A reused block covered by a range takes that range's priority and duration (the latest
//     request decides); one no range covers keeps its priority. Blocks allocated by AppendTokens
//     take options.decode_priority / decode_duration. A duration, counted from when the priority
//     is set, expires back to 35, exactly at clock time >= set time + duration (checked before
//     every eviction decision).
//   AppendTokens(request, tokens)      decode growth: new blocks as the sequence crosses block
//                                      boundaries; then window-pool blocks that fell out of the
//                                      window are released (cached ones stay cached; unstored ones
//                                      are freed).
//   StoreFullBlocks(request, n)        makes every full block of the first n tokens (default: all)
//                                      reusable, emitting kStored events; then releases window-pool
//                                      blocks out of the window that are stored. A block whose key
//                                      another sequence stored first stays private to this one.
//   RemoveSequence(request)            unpins everything: stored blocks stay cached (evictable
//                                      at their priority), private ones are freed.
//   LookupPrefix(tokens, options)      how many tokens AddSequence would reuse now; read-only.
//
// ---- For the tiers (added with store/'s offload and onboard; additive, the calls above behave as
//      before when they are not used)
//   Deferred eviction: an EvictionListener may take a victim's MoveOutTicket (eviction_listener.h,
//     pool/move_out.h) and copy the block asynchronously; the block is "moving out" — out of the
//     tree, not allocatable — until the ticket completes. An admission (or append, or restore)
//     that finds too few free blocks evicts other victims while fewer than
//     config.max_moving_out_blocks blocks of the pool are moving out; when that is not enough it
//     releases the lock, waits for a move to complete and plans again — nobody waits for a copy
//     while holding the lock. Available capacity counts moving-out blocks, so admissions do not
//     fail because of them. A claimed block (copy-free partial reuse) whose listener takes its
//     ticket goes to its sequence once the copy out completed: AddSequence waits for it after
//     releasing the lock.
//   Restore: PlanRestore / ReserveRestore / PublishRestore (block_restore.h) put blocks copied from
//     a tier into the pool, hidden until published; AddSequence then reuses them like any cached
//     block (reused_tokens counts them).
//   PendingContentIds(request)         the content ids a sequence's unstored blocks will be stored
//                                      under, computed once (StoreFullBlocks reuses them): for a
//                                      caller that looks them up in the tiers before computing.
//
// ---- Errors (a failed call changes nothing: no pins, blocks or sequences are left behind)
//   kInvalidArgument    empty tokens, a priority outside 0..100, retention ranges empty, out of
//                       order or overlapping, multimodal items out of order or outside the
//                       prompt, a request id already running, num_computed_tokens too large.
//   kNotFound           unknown request id or content id.
//   kResourceExhausted  a pool cannot supply the blocks; the message gives the numbers
//                       ("pool 0 needs 12 blocks, 3 free, 4 evictable").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "common/thread_annotations.h"
#include "kernels/block_copy.h"
#include "kernels/paged_kv_layout.h"
#include "pool/block_cache.h"
#include "pool/block_ids.h"
#include "pool/block_key.h"
#include "pool/block_manager_operator.h"
#include "pool/block_manager_stats.h"
#include "pool/block_restore.h"
#include "pool/eviction_listener.h"
#include "pool/eviction_policy.h"
#include "pool/kv_events.h"
#include "pool/move_out.h"
#include "pool/pinned_block.h"

namespace kvmesh {

class ThreadPool;

struct BlockPoolConfig {
  std::string name;                // for messages and stats, e.g. "full/8x128"
  std::int64_t num_blocks = 0;     // or kUnlimitedBlocks (metadata-only managers only)
  std::int32_t window_tokens = 0;  // 0 = full attention
};

struct BlockManagerConfig {
  std::int32_t tokens_per_block = 0;  // a power of two > 1
  std::vector<BlockPoolConfig> pools;
  // key_namespace.tokens_per_block must be 0 (filled in) or equal to tokens_per_block.
  KeyNamespace key_namespace;
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kPriorityLru;
  std::size_t event_capacity = 1 << 16;  // KV events kept for polling (> 0)
  bool enable_partial_reuse = true;      // effective only with pool memory
  // Per pool: moving-out blocks (deferred evictions) tolerated before an allocation waits for one
  // instead of evicting another victim (>= 0; 0 = wait for each deferred victim).
  std::int64_t max_moving_out_blocks = 32;
};

struct BlockManagerEnv {
  const Clock* clock = nullptr;  // null: SystemClock::Default()
  // One view per pool, in pool order, each with at least num_blocks blocks and the manager's
  // tokens_per_block; empty = metadata-only (no copy-on-partial-reuse).
  std::vector<KvPoolView> pool_memory;
  ThreadPool* copy_executor = nullptr;  // for cpu::BlockCopy; null = calling thread
  // The copy-on-partial-reuse copy between two blocks of one pool's memory; it returns when the
  // destination is written (a device copy waits for its stream). Empty: cpu::BlockCopy on
  // copy_executor (host memory). Pools in device memory (kvnode on cuda:N) pass the CUDA block
  // copy. Called without the manager's lock, possibly from several threads at once.
  std::function<Status(const BlockCopyArgs&)> block_copy;
  EvictionListener* eviction_listener = nullptr;  // see eviction_listener.h
  std::uint64_t hash_seed = 0;                    // in-process bucket hash; 0 = random
};

// The longest retention duration a sequence may ask for (100 years; leave a duration unset for
// no expiry). Expiry is kept as clock nanoseconds plus the duration in an int64, so an unbounded
// duration would overflow it.
inline constexpr Nanos kMaxRetentionDuration = std::chrono::hours(24 * 365 * 100);

// Token positions [begin_token, end_token) of the prompt keep `priority`, for `duration` when
// set (then back to kDefaultPriority).
struct RetentionRange {
  std::int64_t begin_token = 0;
  std::int64_t end_token = 0;
  int priority = kDefaultPriority;
  std::optional<Nanos> duration;
};

struct SequenceOptions {
  CacheDomain domain;                      // salt and LoRA adapter
  std::vector<MultimodalItem> multimodal;  // sorted by begin_token, not overlapping
  std::vector<RetentionRange> retention;   // sorted by begin_token, not overlapping
  int decode_priority = kDefaultPriority;
  std::optional<Nanos> decode_duration;
  bool reuse_last_token = false;  // true: every prompt token may be reused (block-granular)
  bool allow_partial_reuse = true;
};

// One pool's block table of a sequence: block_ids[i] holds tokens [i*T, (i+1)*T), -1 where the
// pool holds no block for that position (window pools, outside the window). Kernels index the
// pool tensors' first dimension with these ids: block b of component c starts at byte
// b * layout.component(c).BytesPerBlock() (KvPoolView::BlockBytes; BlockByteOffsets below).
struct BlockTable {
  PoolId pool;
  std::vector<std::int32_t> block_ids;
};

// Byte offsets of a table's blocks in component `c` of a pool with `layout`; -1 stays -1.
std::vector<std::int64_t> BlockByteOffsets(const BlockTable& table, const KvPoolLayout& layout,
                                           KvComponent c);

enum class PartialReuse : std::uint8_t { kNone = 0, kCopied = 1, kClaimed = 2 };

struct AddSequenceResult {
  std::int64_t reused_tokens = 0;   // KV the engine need not compute: tokens [0, reused_tokens)
  std::int64_t reused_blocks = 0;   // full blocks matched (reused_tokens / T, rounded down)
  std::int32_t partial_tokens = 0;  // of reused_tokens, those in a partly reused block
  PartialReuse partial = PartialReuse::kNone;
  std::vector<BlockTable> tables;  // one per pool, in pool order
};

struct AppendResult {
  std::int64_t num_tokens = 0;  // sequence length after the append
  // Per pool: ids of the blocks added at the end of the table by this call.
  std::vector<std::vector<std::int32_t>> new_blocks;
  // Per pool: positions released (their table entries are now -1) by this call.
  std::vector<std::vector<std::int64_t>> released_positions;
};

struct PrefixLookup {
  std::int64_t cached_tokens = 0;
  std::int64_t cached_blocks = 0;  // full blocks
  std::int32_t partial_tokens = 0;
};

// What the manager knows of a cached block (a tree node).
struct CachedBlockInfo {
  ContentId content_id;
  ContentId parent_id;
  std::vector<std::int32_t> block_ids;  // per pool; -1 where absent
  std::vector<std::uint32_t> pins;      // per pool
  std::int32_t num_tokens = 0;
  std::int32_t depth = 0;  // block index in its prompts
  int priority = kDefaultPriority;
  std::optional<TimePoint> priority_expiry;
  // The manager's logical use clock when the block was last released (higher: used more
  // recently); comparable between blocks of one manager only.
  std::uint64_t last_use = 0;
};

struct CachedBlockPage {
  std::vector<CachedBlockInfo> blocks;
  std::uint64_t next_cursor = 0;  // 0: no more
};

// A filtered page (ListCachedBlocks with a CachedBlockFilter; block_manager_operator.h).
struct ListedBlock {
  CachedBlockInfo info;
  std::int64_t priority_expires_in_ns = -1;  // -1: no expiry
};
struct BlockListPage {
  std::vector<ListedBlock> blocks;
  std::uint64_t next_cursor = 0;  // 0: no more
  std::int64_t scanned = 0;       // nodes looked at
  std::int64_t total = 0;         // cached nodes now
};

class BlockManager final : private BlockPinOwner {
 public:
  static Result<std::unique_ptr<BlockManager>> Create(const BlockManagerConfig& config,
                                                      BlockManagerEnv env = {});
  ~BlockManager();
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  const BlockManagerConfig& config() const { return config_; }
  std::int32_t tokens_per_block() const { return config_.tokens_per_block; }
  int num_pools() const { return static_cast<int>(config_.pools.size()); }
  bool has_pool_memory() const { return !env_.pool_memory.empty(); }

  // `path_hint`: RestorePlan::path of a PlanRestore of this prompt and options (the tiers' restore
  // path, which has just walked the tree): nodes still current, linked as the hint says and with
  // the prompt's tokens are taken without a lookup; the rest of the walk is done as usual. Any
  // other hint costs a lookup, never a wrong match.
  Result<AddSequenceResult> AddSequence(RequestId request, std::span<const Token> prompt,
                                        const SequenceOptions& options = {},
                                        std::span<const NodeHandle> path_hint = {})
      KVMESH_EXCLUDES(mu_);
  Result<AppendResult> AppendTokens(RequestId request, std::span<const Token> tokens)
      KVMESH_EXCLUDES(mu_);
  // Returns how many blocks were newly stored. num_computed_tokens: nullopt = every token.
  Result<std::int64_t> StoreFullBlocks(RequestId request,
                                       std::optional<std::int64_t> num_computed_tokens = {})
      KVMESH_EXCLUDES(mu_);
  // The content ids of the request's full blocks that are not stored yet, in order (from the
  // first block after its reused prefix): what StoreFullBlocks will store them under. They
  // are computed once and kept, so that StoreFullBlocks does not compute them again. For a caller
  // that needs them before the blocks are computed (the tiers, which look these ids up). `out` is
  // cleared first. kFailedPrecondition when the request's blocks can no longer be stored (a
  // stored block before them was evicted).
  Status PendingContentIds(RequestId request, std::vector<ContentId>* out) KVMESH_EXCLUDES(mu_);
  Status RemoveSequence(RequestId request) KVMESH_EXCLUDES(mu_);

  Result<PrefixLookup> LookupPrefix(std::span<const Token> tokens,
                                    const SequenceOptions& options = {}) const KVMESH_EXCLUDES(mu_);
  Result<std::vector<BlockTable>> GetBlockTables(RequestId request) const KVMESH_EXCLUDES(mu_);
  Result<std::int64_t> SequenceLength(RequestId request) const KVMESH_EXCLUDES(mu_);
  std::int64_t num_sequences() const KVMESH_EXCLUDES(mu_);

  // ---- for the tiers and transfers
  // Pins every block (all pools) of the cached node with this content id.
  Result<PinnedBlocks> PinByContentId(const ContentId& id) KVMESH_EXCLUDES(mu_);
  // Pins every block the sequence holds now; they outlive RemoveSequence until released.
  Result<PinnedBlocks> PinSequenceBlocks(RequestId request) KVMESH_EXCLUDES(mu_);
  Result<CachedBlockInfo> FindBlock(const ContentId& id) const KVMESH_EXCLUDES(mu_);
  // A page of the cached blocks (tree nodes) in node-index order from `cursor` on (0: the first):
  // at most `limit` (> 0) of them, and the cursor of the next page (0 once the listing is done).
  // One page is one snapshot under the lock; across pages, nodes added or removed meanwhile may be
  // missed, but none is listed twice. block_manager_list.cc.
  CachedBlockPage ListCachedBlocks(std::uint64_t cursor, std::size_t limit) const
      KVMESH_EXCLUDES(mu_);
  // ---- for operators (block_manager_operator.h; block_manager_operator.cc)
  // From `cursor`, the next at most `limit` (> 0) cached nodes that pass `filter`, looking at no
  // more than `max_scan` (> 0) nodes; next_cursor continues the listing (0 once it is done).
  BlockListPage ListCachedBlocks(std::uint64_t cursor, std::size_t limit,
                                 const CachedBlockFilter& filter, std::size_t max_scan) const
      KVMESH_EXCLUDES(mu_);
  TreeSummary SummarizeTree() const KVMESH_EXCLUDES(mu_);
  // Preorder from the node `start` (nullopt: every domain root's children as level 0), at most
  // max_depth levels below it and max_nodes nodes. kNotFound for an unknown content id.
  Result<TreeDump> DumpTree(std::optional<ContentId> start, int max_depth,
                            std::size_t max_nodes) const KVMESH_EXCLUDES(mu_);
  // The cached node whose content id starts with `hex` (1..32 hex digits). kInvalidArgument: not
  // hex, or more than one node matches (the message says how many); kNotFound: none does.
  Result<ContentId> ResolveContentIdPrefix(std::string_view hex) const KVMESH_EXCLUDES(mu_);
  // Drops unpinned cached nodes on request (the rule is in block_manager_operator.h).
  // kNotFound: an unknown subtree content id; kInvalidArgument: no selection, or both.
  Result<EvictOutcome> EvictCachedBlocks(const EvictSelection& selection) KVMESH_EXCLUDES(mu_);

  // Records a kTierChanged event (the tiers call this; the manager keeps no tier state).
  void ReportTierChange(PoolId pool, const ContentId& id, KvTier from, KvTier to)
      KVMESH_EXCLUDES(mu_);

  // ---- restore from the tiers (block_restore.h; block_manager_restore.cc)
  // The content ids of the prompt's reusable full blocks and how many the tree holds. Errors: as
  // AddSequence's validation (kInvalidArgument).
  Result<RestorePlan> PlanRestore(std::span<const Token> prompt,
                                  const SequenceOptions& options = {}) const KVMESH_EXCLUDES(mu_);
  // Reserves blocks for candidates [plan.pool_blocks, plan.pool_blocks + count) of `plan` (made by
  // PlanRestore for this prompt and options): min(count, what every pool can supply) blocks per
  // pool, private and pinned, in no tree (evicting as AddSequence would; the blocks the plan
  // matched are pinned first, so the chain stays). The reservation's count() may be 0.
  // kInvalidArgument: count outside 0..plan.num_candidates(), or a plan of other tokens;
  // kFailedPrecondition: the tree no longer holds the plan's pool_blocks blocks (plan again).
  Result<RestoreReservation> ReserveRestore(std::span<const Token> prompt,
                                            const SequenceOptions& options, const RestorePlan& plan,
                                            std::int64_t count) KVMESH_EXCLUDES(mu_);
  // Stores reserved blocks [0, ready) in the tree, in order, under the retention `options` of
  // ReserveRestore gave (their token ranges' priorities; default 35), frees the others and the
  // parent's pins. keep_pinned: the result pins the restored chain (see PublishedRestore).
  // REQUIRES: every byte of blocks [0, ready) written. kInvalidArgument: a reservation of another
  // manager, an empty handle, ready outside 0..count().
  Result<PublishedRestore> PublishRestore(RestoreReservation reservation, std::int64_t ready,
                                          bool keep_pinned) KVMESH_EXCLUDES(mu_);

  // ---- observation
  const KvEventBuffer& events() const { return events_; }
  KvEventBatch PollEvents(std::uint64_t from_seq, std::size_t max_events = 4096) const {
    return events_.Poll(from_seq, max_events);
  }
  BlockManagerStats GetStats() const KVMESH_EXCLUDES(mu_);
  // Recomputes every internal counter and index and compares (tests; O(everything)).
  Status CheckInvariants() const KVMESH_EXCLUDES(mu_);

 private:
  struct Sequence;
  struct Match;
  struct Admission;
  friend class RestoreReservation;

  BlockManager(BlockManagerConfig config, BlockManagerEnv env, std::uint64_t hash_seed);

  void UnpinBlocks(std::span<const PinnedBlockRef> blocks) override KVMESH_EXCLUDES(mu_);

  // block_manager_match.cc
  Match MatchPrefix(NodeRef root, std::span<const Token> tokens, const SequenceOptions& options,
                    bool allow_partial, std::span<const NodeHandle> path_hint = {}) const
      KVMESH_REQUIRES(mu_);
  void ApplyWindowLimit(Match* m) const KVMESH_REQUIRES(mu_);
  // block_manager.cc
  Status PlanAdmission(const Match& m, std::int64_t num_positions, Admission* a) const
      KVMESH_REQUIRES(mu_);
  void CommitAdmission(Sequence* seq, const Match& m, Admission* a) KVMESH_REQUIRES(mu_);
  // Makes the admission's fresh blocks allocatable without waiting; false when a move out must
  // complete first (the caller waits without the lock and plans again).
  bool MakeRoom(const Match& m, const Admission& a) KVMESH_REQUIRES(mu_);
  void ApplyReuseRetention(const Sequence& seq, const Match& m) KVMESH_REQUIRES(mu_);
  void ReleaseOutOfWindow(Sequence* seq, bool stored_only, AppendResult* out) KVMESH_REQUIRES(mu_);
  // AppendTokens once `add` blocks per pool are allocatable.
  AppendResult AppendLocked(Sequence* seq, std::span<const Token> tokens, std::int64_t add,
                            std::int64_t new_len) KVMESH_REQUIRES(mu_);
  std::int64_t NowNs() const { return clock_->Now().time_since_epoch().count(); }
  void FlushEvents() KVMESH_REQUIRES(mu_);
  // Applies retention expiries that are due (before any eviction decision or observation).
  void ExpireRetention() const KVMESH_REQUIRES(mu_);
  Status ExhaustedError(int pool, std::int64_t need, std::int64_t unavailable) const
      KVMESH_REQUIRES(mu_);
  // block_manager_restore.cc: ReserveRestore under the lock; null when a move out must complete
  // first (nothing is left reserved).
  Result<std::unique_ptr<RestoreReservation::State>> ReserveLocked(std::span<const Token> prompt,
                                                                   const SequenceOptions& options,
                                                                   const RestorePlan& plan,
                                                                   std::int64_t count)
      KVMESH_REQUIRES(mu_);
  // block_manager_restore.cc: frees reserved blocks [from, count) and the parent's pins and root.
  void ReleaseRestore(RestoreReservation::State& st, std::int64_t from) KVMESH_REQUIRES(mu_);
  // block_manager_list.cc: a cached node as FindBlock describes it.
  CachedBlockInfo DescribeNode(NodeRef n) const KVMESH_REQUIRES(mu_);
  void AbandonRestore(RestoreReservation::State& st) KVMESH_EXCLUDES(mu_);
  // Waits until `target` moves out completed (or none is outstanding), first helping the eviction
  // listener with its queued move-out work (EvictionListener::HelpMoveOut) while it has some.
  void AwaitMoves(std::uint64_t target) KVMESH_EXCLUDES(mu_);

  const BlockManagerConfig config_;
  const BlockManagerEnv env_;
  const Clock* clock_;
  KvEventBuffer events_;
  MoveOutQueue moves_;  // thread-safe; outlives cache_, which points to it
  std::atomic<std::uint64_t> move_out_wait_ns_{0};  // AwaitMoves' wall time, summed

  mutable Mutex mu_;
  // mutable: observers (GetStats, FindBlock) first apply retention expiries that are due.
  mutable BlockCache cache_ KVMESH_GUARDED_BY(mu_);
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_ KVMESH_GUARDED_BY(mu_);
  std::int64_t external_pins_ KVMESH_GUARDED_BY(mu_) = 0;
  BlockManagerCounters counters_ KVMESH_GUARDED_BY(mu_);
  std::vector<BlockManagerPoolCounters> pool_counters_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
