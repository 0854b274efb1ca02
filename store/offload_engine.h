// OffloadEngine: moves blocks between the primary pools and the tiers — offload of evicted blocks
// into the host tier (spilling on into RocksDB), onboard of tier blocks into pool blocks — with
// asynchronous copies and per-tier statistics. TieredCache (tiered_cache.h) builds the sequence
// API on it; the replay with tiers (tiered_replay.h) uses it directly.
//
// Ownership: the engine owns the tiers it is configured with (a HostTier of host_capacity_bytes
// evicting in host_eviction_policy's order, a RocksDbTier at disk->path; either may be absent) and
// its worker threads. The primary pools' memory (options.pools, e.g. PoolStorage views) is the
// caller's and must outlive the engine.
// Manager pool p is tier pool TierPoolId{p}; each pool's layout and pool scale come from its view.
//
// Offload (EvictionListener; the engine is the block manager's listener). For a victim evicted to
// make room (OnEvictDeferrable, called under the manager's lock):
//   - priority < offload_min_priority (default 35): not copied (counted: skipped_priority);
//   - clean — the host tier or the RocksDB tier already holds a complete copy (Contains): not
//     copied again (inclusive tiers; counted: skipped_clean). A block restored from a tier is
//     clean, since the tier keeps it;
//   - else the engine takes the block's MoveOutTicket and queues the copy; up to copy_threads
//     workers drain the queue in batches, putting each block into the top tier (host, or RocksDB
//     without a host tier) and completing its ticket: the slot is not reused before the copy is
//     done, and the manager's lock is not held during the copy.
//   A manager call that must wait for moves out first helps (HelpMoveOut): it takes a batch
//   off the queue and copies it itself, as a worker would, while the queue has any, and sleeps
//   only for copies a worker has already started. On a machine whose cores are all busy the
//   worker is often not running when the manager needs its blocks; waking it, then being woken
//   by it, cost more than the copies (tiered_replay_bench: docs/architecture.md, Tiers).
//   Claimed blocks (a sequence's copy-free partial reuse, kClaimed) take the same deferred path:
//   the engine takes the claim's ticket and a worker copies the block; the manager hands it to
//   the claiming sequence once the ticket completed, waiting without its lock.
// Spill: the host tier's eviction sink. A host victim not already on disk is copied into staging
// memory and written to RocksDB by the spill thread (bounded by max_spill_queue_bytes: a put that
// finds the queue full waits for it to drain — on a copy worker, never under the manager's lock),
// so no disk I/O runs in HostTier::Put. The host tier keeps the victim findable until the sink
// returned, and the staged block stays findable (CountHeld, Onboard: verified like any tier read,
// counted as a host hit) until RocksDB holds it, so a spill opens no window in which the block is
// in no tier.
//
// Onboard: CountHeld(ids) says how many blocks, from the first on, the tiers hold (every pool's
// block of each); Onboard(ids, blocks) copies them into the given pool blocks, host first, then
// RocksDB — every read verified by the tier (bundle checksum bound to content id and geometry) in
// the same pass as the copy (GetForRestore: the destinations are hidden, reserved blocks that
// nobody reads before they are published; a block that fails is never published). The blocks a
// pool's RocksDB tier holds are read in one MultiGet per range. A block that is missing or fails
// verification ends the run: the blocks before it are restored, it and those after are not (a
// failed check is a miss plus a counter, never data). A restore is cut into contiguous ranges of
// at least 1 MiB: a small one runs in the calling thread (no hand-off), a large one over the
// caller and the workers.
//
// Threads and locks. Copies run on `copy_threads` workers (0: in the calling thread, synchronous
// and deterministic — everything then runs under the manager's lock, for tests only), and on the
// thread of a manager call that waits for them (HelpMoveOut, without the manager's lock); spills on
// one spill thread (0 copy threads: in the putting thread). A worker never takes the block
// manager's lock, and the manager waits for move outs without holding it (pool/move_out.h). The
// tiers' own locks are taken under the manager's lock only by Contains (a map lookup); no disk
// I/O and no block copy runs under it unless copy_threads is 0 (then, with device pools, the
// staging copy and its device wait run under it too). A thread holds at most one staging lease,
// and never while it waits for the manager's lock. The engine's own state has three short locks
// that are never held together: the offload queue's, the spill queue's (with the bundles being
// spilled) and the one Drain waits under; the count of copies in flight is an atomic.
//
// Device pools (options.device_pools; nullopt = the pools are host memory, read and written
// directly, no staging copy). Pools in memory host code cannot address (GPU memory on cuda:N) are
// never dereferenced on the host: every copy is staged through a DeviceStaging area
// (device_staging.h; pinned host memory, one copy backend per device, each copy waited for).
//   - Offload: a worker takes a batch of victims, gathers their device blocks into a lease's
//     staging blocks (ToHost, one copy per pool), completes each MoveOutTicket as soon as its
//     bytes are in staging (the device block may be reused from then), then puts the blocks into
//     the top tier from the staging view. The synchronous path (OnEvict; copy_threads 0) does
//     the same with one block. A failed device copy counts as offload_failed: the ticket is
//     completed, nothing is put.
//   - Onboard: the tier reads go into the staging view (verified in the same pass as now, and
//     counted the same), then ToDevice scatters the blocks that verified in every pool into the
//     reserved destinations — only the leading run: a missing or corrupt block is never copied
//     to the device (a miss, as for host pools), nor are the blocks of its range after it, which
//     are not published either. A range longer than a staging area is done in chunks of
//     capacity() blocks. A failed device copy fails its blocks (onboard_failed; not published).
//   - ReadBlock: a host-readable copy of one pool block (flush, kvctl inspect, a peer's fetch).
//   - WriteBlock: one pool block, or a part of one (a layer range), written by host code (a block
//     from a peer, verified, possibly converted) into a staging block, then copied to the device.
//   - CopyPoolBlocks: the copy-on-partial-reuse copy (TieredCache passes it to the block manager
//     as BlockManagerEnv::block_copy), on the pool's device.
// The ticket and reservation contracts are unchanged; the staging adds copies, not states.
// Traffic: offload times include each block's share of its staging copy; onboard traffic counts
// the tier reads (bytes, and the time of the reads and of the device copies), so a block whose
// device copy then fails is counted there and in onboard_failed.
//
// Statistics (OffloadStats): copies and bytes per direction and tier, the time spent in them
// (rates = bytes / summed copy time), skips, failures, corrupt reads, and the tiers' own counters.
// Bytes are block bytes (every component), not counting bundle headers and checksums.
//
// Thread safety: thread-safe. Drain() waits for every copy started before it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "common/thread_pool.h"
#include "pool/eviction_listener.h"
#include "pool/kv_events.h"
#include "store/device_staging.h"
#include "store/host_tier.h"
#include "store/rocksdb_tier.h"

namespace kvmesh {

// A completed copy, for latency histograms (node/node_metrics.h): its direction, the tier it wrote
// or read, how many blocks (1, or a range restored from RocksDB in one MultiGet), their block bytes
// and how long it took.
enum class CopyDirection : std::uint8_t { kOffload, kSpill, kOnboard };
using CopyObserver = std::function<void(CopyDirection direction, KvTier tier, std::int64_t blocks,
                                        std::int64_t bytes, std::int64_t ns)>;

struct OffloadEngineOptions {
  std::vector<KvPoolView> pools;  // the primary pools, in the block manager's pool order
  // Host tier: bytes of bundles it may hold (split equally between the pools); 0 = no host tier.
  std::int64_t host_capacity_bytes = 0;
  HostMemoryKind host_memory = HostMemoryKind::kAuto;
  bool host_prefault = true;
  // The host tier's victim order (HostTierOptions::eviction_policy; one policy per pool, entries
  // are slots). The default is the host tier's own, priority-lru; kvnode passes its config's
  // kv_cache.eviction_policy (learned by default) and `kvctl replay` its --policy.
  EvictionPolicyKind host_eviction_policy = EvictionPolicyKind::kPriorityLru;
  // RocksDB tier (path, capacity_bytes and tuning; its pools are filled in); nullopt = none.
  std::optional<RocksDbTierOptions> disk;
  int offload_min_priority = kTierDefaultPriority;  // 0..101; 101 = never offload
  int copy_threads = 2;                             // 0 = copies in the calling thread
  std::int64_t max_spill_queue_bytes = 64ll << 20;  // staged host→disk bytes
  // Called after every successful block copy, on the copying thread (cheap, thread-safe);
  // empty: none.
  CopyObserver on_copy;
  // The pools live in device memory: every copy is staged (see "Device pools" above). nullopt:
  // the pools are host memory.
  std::optional<DevicePoolsOptions> device_pools;
};

// Copies in one direction between the pools and one tier.
struct TierTraffic {
  std::int64_t blocks = 0;  // pool blocks copied (a node with blocks in two pools counts two)
  std::int64_t bytes = 0;   // block bytes
  double copy_s = 0;        // time spent in the copies, summed over threads
  [[nodiscard]] double bytes_per_s() const {
    return copy_s > 0 ? static_cast<double>(bytes) / copy_s : 0.0;
  }
};

struct OffloadStats {
  TierTraffic offload;                // pool → top tier (host, or RocksDB without a host tier)
  TierTraffic spill;                  // host → RocksDB
  TierTraffic onboard_host;           // host → pool
  TierTraffic onboard_disk;           // RocksDB → pool
  std::int64_t evictions_seen = 0;    // victims the listener was told of
  std::int64_t skipped_priority = 0;  // below offload_min_priority
  std::int64_t skipped_clean = 0;     // a tier held a valid copy already
  std::int64_t offload_failed = 0;    // the top tier refused (full of in-flight blocks, I/O error)
  std::int64_t spill_skipped_clean = 0;
  std::int64_t spill_failed = 0;
  std::int64_t onboard_missing = 0;  // a block the tiers turned out not to hold
  std::int64_t onboard_corrupt = 0;  // reads that failed verification (each a miss)
  std::int64_t onboard_failed = 0;   // other read errors (I/O)
  std::int64_t copies_in_flight = 0;
  // Of offload.blocks, copied by a manager call that was waiting for them (HelpMoveOut), not by a
  // copy worker.
  std::int64_t offload_helped = 0;
  double listener_s = 0;  // in the eviction listener's calls (under the manager's lock)
  double lookup_s = 0;    // in CountHeld (the tiers' indexes)
  bool has_host = false;
  bool has_disk = false;
  TierStats host;  // the tiers' own counters (zero when absent)
  TierStats disk;
};

// What an Onboard did.
struct OnboardResult {
  std::int64_t restored = 0;  // blocks [0, restored) are in the pool, verified
  std::int64_t from_host = 0;
  std::int64_t from_disk = 0;   // of restored: at least one pool's block came from disk
  std::vector<KvTier> sources;  // [restored]: kHost or kDisk
  Status stop_reason;           // why block `restored` was not (OK when all were)
};

// A host-readable pool block (OffloadEngine::ReadBlock): for host pools the pool block itself, for
// device pools a copy in a staging area, which the HostBlock holds until it dies (move-only).
class HostBlock {
 public:
  HostBlock(const KvPoolView& view, std::int64_t block,
            std::optional<DeviceStaging::Lease> lease = std::nullopt)
      : view_(&view), block_(block), lease_(std::move(lease)) {}
  // The view holding the block and the block's index in it; valid while the HostBlock lives.
  [[nodiscard]] const KvPoolView& view() const { return *view_; }
  [[nodiscard]] std::int64_t block() const { return block_; }
  // Whether the bytes are a staged copy (device pools) rather than the pool block itself.
  [[nodiscard]] bool staged() const { return lease_.has_value(); }

 private:
  const KvPoolView* view_;
  std::int64_t block_;
  std::optional<DeviceStaging::Lease> lease_;
};

class OffloadEngine final : public EvictionListener {
 public:
  // kInvalidArgument: no pools, a pool view without memory, offload_min_priority outside
  // 0..101, copy_threads < 0, device_pools with a device list whose size is not the number of
  // pools or without make_backend (the error names the field); errors of HostTier::Create,
  // RocksDbTier::Open and DeviceStaging::Create (the backends, the staging memory).
  static Result<std::unique_ptr<OffloadEngine>> Create(OffloadEngineOptions options);
  // Drains (every copy and spill finishes), then closes the tiers (RocksDB flushes).
  ~OffloadEngine() override;
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  // ---- EvictionListener (called under the block manager's lock)
  void OnEvict(const EvictedBlock& block) override;
  void OnEvictDeferrable(const EvictedBlock& block, MoveOutTicket& ticket) override;
  // Called without the manager's lock by a manager call about to wait for moves out: copies a
  // batch of queued victims on the calling thread, as a worker would (counted: offload_helped).
  bool HelpMoveOut() override;

  // ---- onboard
  // How many of `ids`, from the first on, have every pool's block in some tier (not verified).
  // With `tiers`: for each counted block, appended, where a restore would read it — kHost when
  // every pool's block is in host memory (the host tier, or the spill staging on its way to
  // RocksDB), else kDisk. Lookups (kvnode's Lookup) use this, so that they say what Admit finds.
  std::int64_t CountHeld(std::span<const ContentId> ids, std::vector<KvTier>* tiers = nullptr);
  // Pins the host tier's copies of `ids` (every pool's; HostTier::PinForRestore) until the result
  // is released: a restore that will read them makes room in the pool first, and the blocks it
  // evicts go into the host tier, where they must not push out the copies it came to read. Empty
  // without a host tier.
  HostTier::RestorePins PinHostCopies(std::span<const ContentId> ids);
  // Copies block ids[i] of every pool into blocks[i * num_pools() + p] of pool p, verifying,
  // in order of ids; stops at the first block not restored. Copies run on the workers; returns
  // when they are done. REQUIRES: the destination blocks are the caller's (pinned, hidden) and
  // nobody reads or writes them during the call; blocks.size() == ids.size() * num_pools().
  OnboardResult Onboard(std::span<const ContentId> ids, std::span<const BlockId> blocks);
  // As Onboard, but returns at once; `done` runs on a worker (or in this thread with 0 copy
  // threads) when every copy is done. `done` must not take the block manager's lock (hand such
  // work to another thread; see Threads and locks).
  void OnboardAsync(std::vector<ContentId> ids, std::vector<BlockId> blocks,
                    std::function<void(OnboardResult)> done);

  // ---- pool blocks from the host
  // A host-readable copy of block `block` of pool `pool` (see HostBlock). Device pools: waits for
  // a staging area and copies the block into it (kCudaError when the copy fails). REQUIRES: the
  // block is the caller's for the call (pinned, or otherwise not reused meanwhile); while it holds
  // the HostBlock, the caller takes no block manager lock and reads no other block (the staging
  // areas are few, and the listener may wait for one under the manager's lock).
  // kInvalidArgument: pool or block out of range.
  [[nodiscard]] Result<HostBlock> ReadBlock(int pool, std::int64_t block);
  // Writes block `block` of pool `pool` from host code: `fill(view, b)` writes block b of `view` —
  // the pool itself for host pools; for device pools a staging block, which is copied into the
  // pool block once fill returned OK (waited for). An error of fill (a bundle that fails its
  // check) is returned and nothing reaches the device. REQUIRES: the block is the caller's (a
  // reserved, hidden block); the same rules as ReadBlock while fill runs.
  // `part` (optional): fill writes only the part of the block that part(view, b) cuts out of block
  // b of a view (a one-block view, pointer arithmetic only: LayerRangeCodec::BlockView, a layer
  // range), and only that part goes to the device, the rest of the pool block untouched. A cut
  // outside its block is kInvalidArgument.
  [[nodiscard]] Status WriteBlock(
      int pool, std::int64_t block,
      const std::function<Status(const KvPoolView&, std::int64_t)>& fill,
      const DeviceStaging::PartOf& part = nullptr);
  // A copy between blocks of one pool's memory, returning when the destination is written:
  // cpu::BlockCopy for host pools, the pool's device backend for device pools. TieredCache hands it
  // to the block manager as its copy-on-partial-reuse copy (BlockManagerEnv::block_copy).
  [[nodiscard]] Status CopyPoolBlocks(const BlockCopyArgs& args);
  // Whether the pools are device memory (options.device_pools), and their staging (null if not).
  [[nodiscard]] bool device_pools() const { return staging_ != nullptr; }
  DeviceStaging* staging() { return staging_.get(); }

  // Waits until every copy and spill started before the call has finished.
  void Drain() KVMESH_EXCLUDES(drain_mu_);
  [[nodiscard]] OffloadStats stats() const;

  [[nodiscard]] int num_pools() const { return static_cast<int>(options_.pools.size()); }
  // The pools' views. For device pools the bases are device addresses: read blocks through
  // ReadBlock, never through these.
  [[nodiscard]] const std::vector<KvPoolView>& pools() const { return options_.pools; }
  HostTier* host() { return host_.get(); }
  RocksDbTier* disk() { return disk_.get(); }
  [[nodiscard]] int copy_threads() const { return options_.copy_threads; }

 private:
  struct Counters;
  struct OnboardJob;
  struct PendingOffload {
    EvictedBlock block;
    MoveOutTicket ticket;
  };
  struct PendingSpill {
    TierPoolId pool;
    ContentId id;
    int priority = 0;
    std::shared_ptr<const std::vector<std::byte>> bundle;
  };

  explicit OffloadEngine(OffloadEngineOptions options);
  Status Open();
  BlockTier* top() { return host_ ? static_cast<BlockTier*>(host_.get()) : disk_.get(); }
  bool IsClean(const EvictedBlock& block);
  // Whether an evicted block is to be copied down: counts it, and why it is not (no tier, below
  // the offload priority, clean).
  bool ShouldCopy(const EvictedBlock& block);
  // Puts the block into the top tier from `src` block `block` (the pool, or a staging area);
  // counts, adding `extra_ns` (its share of a staging copy) to its copy time.
  void CopyOut(const EvictedBlock& block, const KvPoolView& src, std::int64_t src_block,
               std::int64_t extra_ns = 0);
  // Device pools: stages the blocks of `batch` (up to a lease's capacity per pool at a time),
  // completes their tickets once staged, and puts them into the top tier.
  void CopyOutStaged(std::span<PendingOffload> batch);
  // The synchronous offload of one block (copy_threads 0, or OnEvict): direct or staged.
  void CopyOutNow(const EvictedBlock& block);
  // The host tier's eviction sink.
  Status Spill(const EvictedBundle& victim);
  // Restores blocks [begin, end) of a job (every pool; RocksDB reads batched per pool); records
  // each block's status and source in the job. Device pools: through a staging lease, in chunks.
  void CopyIn(OnboardJob& job, std::size_t begin, std::size_t end);
  // Reads blocks [begin, end) of a job from the tiers into dst[p]: block i goes to block
  // i - begin of it when `staged`, else to the job's destination block.
  void ReadFromTiers(OnboardJob& job, std::size_t begin, std::size_t end,
                     std::span<const KvPoolView> dst, bool staged);
  // Device pools: copies the chunk [begin, end)'s leading run of blocks that every pool read from
  // the lease's staging blocks into the job's destinations; fails the blocks whose copy failed.
  // Returns whether every block of the chunk is restored.
  bool StagedToDevice(OnboardJob& job, std::size_t begin, std::size_t end,
                      DeviceStaging::Lease& lease);
  // Records a block that was not restored (counted by why).
  void FailBlock(OnboardJob& job, std::size_t i, Status st);
  // Blocks per range of a restore (at least 1 MiB of blocks).
  [[nodiscard]] std::size_t OnboardRange() const;
  // A copy worker's loop: takes queued offloads in batches until the queue is empty.
  void DrainOffloads() KVMESH_EXCLUDES(queue_mu_);
  // Copies a batch taken off offload_queue_ (staged for device pools) and completes its tickets;
  // then counts it out of in_flight_.
  void RunOffloads(std::vector<PendingOffload>& batch) KVMESH_EXCLUDES(queue_mu_);
  // The spill thread's loop: writes queued spills, a batch per RocksDB write, until the queue is
  // empty.
  void DrainSpills() KVMESH_EXCLUDES(spill_mu_);
  // The bundle of a block being spilled, or null.
  std::shared_ptr<const std::vector<std::byte>> Staged(TierPoolId pool, const ContentId& id)
      KVMESH_EXCLUDES(spill_mu_);
  // Counts jobs into and out of in_flight_.
  void Started(std::int64_t n = 1);
  void Finished(std::int64_t n = 1) KVMESH_EXCLUDES(drain_mu_);

  OffloadEngineOptions options_;
  std::vector<std::int64_t> block_bytes_;  // [pool]
  std::vector<BundleCodec> codecs_;        // [pool]
  // Destroyed in reverse: workers first (they use the tiers), then the host tier (whose sink uses
  // the spill thread and the disk tier), then the disk tier.
  std::unique_ptr<RocksDbTier> disk_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<Counters> counters_;
  // Device pools only: the staging areas and copy backends (outlive the workers).
  std::unique_ptr<DeviceStaging> staging_;

  // Three locks, so that the replay (or engine) thread queueing an offload, the copy worker taking
  // a batch and the spill thread finishing one do not wait for each other's bookkeeping.
  // Copy and spill jobs started, not done; Drain waits on drain_cv_ for 0 (drain_mu_ is taken to
  // notify, so a waiter that saw it non-zero is woken).
  std::atomic<std::int64_t> in_flight_{0};
  Mutex drain_mu_;
  std::condition_variable drain_cv_;
  // The offload queue and its workers.
  Mutex queue_mu_;
  std::deque<PendingOffload> offload_queue_ KVMESH_GUARDED_BY(queue_mu_);
  int drainers_ KVMESH_GUARDED_BY(queue_mu_) = 0;  // workers draining offload_queue_
  // The spill queue; spill_cv_ wakes a spill waiting for room in it.
  Mutex spill_mu_;
  std::condition_variable spill_cv_;
  std::int64_t spill_queued_bytes_ KVMESH_GUARDED_BY(spill_mu_) = 0;
  std::deque<PendingSpill> spill_queue_ KVMESH_GUARDED_BY(spill_mu_);
  bool spill_draining_ KVMESH_GUARDED_BY(spill_mu_) = false;  // DrainSpills runs
  // Bundles being spilled, by (pool, content id).
  struct StagedKeyHash {
    std::size_t operator()(const std::pair<std::int32_t, ContentId>& k) const noexcept {
      return ContentIdHash{}(k.second) ^ static_cast<std::size_t>(k.first);
    }
  };
  std::unordered_map<std::pair<std::int32_t, ContentId>,
                     std::shared_ptr<const std::vector<std::byte>>, StagedKeyHash>
      staged_ KVMESH_GUARDED_BY(spill_mu_);

  std::unique_ptr<ThreadPool> spill_pool_;
  std::unique_ptr<ThreadPool> copy_pool_;
};

}  // namespace kvmesh
