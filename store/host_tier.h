// HostTier: the secondary tier — complete blocks (bundles, store/block_bundle.h) in host memory,
// pinned (cudaHostAlloc) when CUDA and a device are present, page-aligned otherwise.
//
// Memory: one allocation of `capacity_bytes`, split between the configured pools at creation by
// their shares (equal unless given), like the primary pools. Each pool's part is an array of
// fixed-size slots, one bundle each (a pool's bundles all have the same size), padded to 64 bytes.
// Index: (pool, content id) → slot, one shard (mutex, index, free list, eviction lists) per pool.
//
// Eviction (per pool, when a put finds no free slot): the ready, unpinned block that
// options.eviction_policy (pool/eviction_policy.h) names. The default, priority-lru: all blocks of
// the lowest priority before any of the next one, within a priority the least recently used (put
// or get) first; learned: priorities the same, within one the block least likely to be used again
// by what this tier has seen of puts and gets (pool/learned_policy.h). A victim is handed to the
// eviction sink (e.g. a RocksDB tier's PutBundle, or the offload engine's spill staging) before its
// slot is reused, and stays in the index — found by Contains, readable by Get — until the sink has
// returned: a sink that makes the block findable elsewhere before returning (staging, the tier
// below) leaves no moment in which the block is in no tier. A sink failure is counted
// (spill_failures) and the block is dropped — a tier is a cache. Blocks being written or read, and
// blocks pinned for a restore (PinForRestore), are never victims.
//
// Slot states (one shard's mutex guards every transition):
//
//   state     in index  evictable  how it is entered                 how it is left
//   kFree     no        no         creation; erase/corrupt, unpinned  put takes it (→ kWriting)
//   kWriting  yes*      no         put reserved it (free or victim)   put publishes (→ kReady)
//   kReady    yes       if pins 0  put published                      chosen as victim (→
//                                                                     spilling); erased (→ kFree
//                                                                     once pins 0)
//   spilling  yes       no         a put chose it as its victim       the sink returned and no
//   (kReady)                                                          reader holds it (→ kWriting
//                                                                     for the new block)
//   (* a kWriting slot is in the index so that a second put of the same id does not copy again,
//      but gets and Contains treat it as absent: a block is never visible before its copy is done.
//      While its victim spills, the new block's id is in the shard's `incoming` set instead.)
//
// A reader pins a ready slot under the lock (pins > 0: not evictable, not reused), verifies and
// copies out without the lock, and unpins under the lock. A writer reserves a slot under the lock,
// runs the sink and encodes without the lock, and publishes under the lock. So no lock is held
// across a copy of block bytes or a call of the sink. An erase of a pinned or writing slot removes
// it from the index at once and frees the slot when its last user is done.
//
// Every get verifies the bundle (structure, fingerprint, content id, checksum) before writing the
// destination — GetForRestore, into a restore's hidden destination, in the same pass as the copy
// (the header and table first); a slot that fails is erased, counted (corrupt) and reported as
// kCorruption. Stage times (stats().stages): index bookkeeping, encode, verify+copy.
//
// Thread safety: thread-safe. The eviction sink is called from the thread of the Put or PutBundle
// that evicts, with no tier lock held; it may call into other tiers, but not back into this one for
// the same pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "pool/eviction_policy.h"
#include "pool/flat_node_index.h"
#include "store/block_bundle.h"
#include "store/host_memory.h"
#include "store/tier.h"

namespace kvmesh {

struct HostTierPool {
  TierPoolId id;
  KvPoolLayout layout;
  float pool_scale = 1.0f;  // fp8_per_tensor scale or nvfp4 global scale
  double share = 0;         // fraction of capacity_bytes; 0: an equal part of what is left
};

// Receives evicted blocks. Returns OK when the block was taken.
using TierEvictionSink = std::function<Status(const EvictedBundle&)>;

struct HostTierOptions {
  std::int64_t capacity_bytes = 0;
  std::vector<HostTierPool> pools;
  HostMemoryKind memory = HostMemoryKind::kAuto;
  bool prefault = true;       // touch every page at creation (aligned memory)
  TierEvictionSink on_evict;  // may be empty: victims are dropped
  // The order of victims within each pool (one policy per pool, entries are slots).
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kPriorityLru;
};

class HostTier final : public BlockTier {
  struct Shard;  // per pool (below)

 public:
  // kInvalidArgument: no pools, a duplicate pool id, shares that are negative or sum above 1, a
  // pool whose layout the bundle codec rejects, a pool part too small for one slot.
  // kResourceExhausted / kCudaError: the allocation failed.
  static Result<std::unique_ptr<HostTier>> Create(HostTierOptions options);
  ~HostTier() override;
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  std::string_view name() const override { return "host"; }
  Status Put(TierPoolId pool, const ContentId& id, const KvPoolView& src, std::int64_t block,
             int priority) override;
  Status PutBundle(TierPoolId pool, const ContentId& id, std::span<const std::byte> bundle,
                   int priority) override;
  Status Get(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
             std::int64_t block) override;
  // Calls fn for every ready block of `pool` (its id, priority and bundle), the block pinned while
  // fn runs (not evicted or reused meanwhile); blocks put during the walk may or may not be seen,
  // and a victim being spilled is not. Each visited block becomes the most recently used. fn must
  // not call into this tier for the same pool. Returns how many blocks fn saw (0 for an unknown
  // pool). The bundles' last_use: the pool's use stamps (larger: used more recently). For flushing
  // at shutdown.
  std::int64_t ForEachBlock(TierPoolId pool, const std::function<void(const EvictedBundle&)>& fn);
  // The same for one block: calls fn if `pool` holds `id` ready, the block pinned while fn runs
  // (and then the most recently used). Whether fn ran. fn must not call into this tier for the same
  // pool.
  bool VisitBlock(TierPoolId pool, const ContentId& id,
                  const std::function<void(const EvictedBundle&)>& fn);

  Status GetForRestore(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                       std::int64_t block) override;
  bool Contains(TierPoolId pool, const ContentId& id) override;
  Status Erase(TierPoolId pool, const ContentId& id) override;
  std::vector<ContentId> ReadyIds(TierPoolId pool) override;
  TierStats stats() const override;

  // Blocks pinned for a restore (PinForRestore); unpinned when destroyed or released. Movable; must
  // not outlive the tier.
  class RestorePins {
   public:
    RestorePins() = default;
    RestorePins(RestorePins&& other) noexcept;
    RestorePins& operator=(RestorePins&& other) noexcept;
    RestorePins(const RestorePins&) = delete;
    RestorePins& operator=(const RestorePins&) = delete;
    ~RestorePins() { Release(); }

    [[nodiscard]] std::int64_t count() const { return static_cast<std::int64_t>(slots_.size()); }
    void Release();

   private:
    friend class HostTier;
    HostTier* tier_ = nullptr;
    std::vector<std::pair<Shard*, std::int32_t>> slots_;
  };
  // Pins the ready blocks of `pool` among `ids` for a restore about to read them (Get,
  // GetForRestore): no put takes them as its victim until `pins` lets go, so the evictions the
  // restore itself causes (the pool blocks it frees go into this tier) cannot push them out first.
  // Ids not held, still being written or already spilling are skipped. A pin counts as one use of
  // the block (a get of a pinned block adds none); unpinned, it is the most recently used. Adds to
  // `pins`, which must be empty or from this tier.
  void PinForRestore(TierPoolId pool, std::span<const ContentId> ids, RestorePins& pins);

  // Whether the memory is CUDA pinned memory.
  bool pinned() const { return memory_.pinned(); }
  // Slots of a pool (0 for an unknown pool), and the codec of its bundles (null when unknown).
  std::int64_t SlotCount(TierPoolId pool) const;
  const BundleCodec* Codec(TierPoolId pool) const;

  // For tests that inject corruption: the bytes of the slot holding a ready block (empty when the
  // block is not held). The span stays valid while the block is not evicted or erased.
  std::span<std::byte> SlotBytesForTesting(TierPoolId pool, const ContentId& id);

 private:
  enum class SlotState : std::uint8_t { kFree, kWriting, kReady };
  struct Slot {
    SlotState state = SlotState::kFree;
    ContentId id;
    int priority = kTierDefaultPriority;
    int pins = 0;
    bool erase_pending = false;  // removed from the index; free it when its users are done
    bool spilling = false;       // a ready victim being handed to the sink (still readable)
    bool victim_erased = false;  // spilling, and erased meanwhile (already out of the index)
    std::uint64_t last_use = 0;  // the shard's stamp when a use of it last ended
  };
  struct Shard {
    Shard(HostTierPool config, BundleCodec codec) : config(config), codec(std::move(codec)) {}
    const HostTierPool config;
    const BundleCodec codec;
    std::byte* base = nullptr;
    std::int64_t slot_bytes = 0;
    std::int32_t num_slots = 0;
    Mutex mu;
    std::vector<Slot> slots KVMESH_GUARDED_BY(mu);
    std::vector<std::int32_t> free_slots KVMESH_GUARDED_BY(mu);
    // Evictable slots (ready, unpinned), in eviction order; told of every slot's puts and gets.
    std::unique_ptr<EvictionPolicy> policy KVMESH_GUARDED_BY(mu);
    std::uint64_t stamp KVMESH_GUARDED_BY(mu) = 0;  // use stamps for the policy
    // Content id -> slot: a flat open-addressing index (pool/flat_node_index.h) whose lookups
    // compare the id the slot holds (a slot in the index always holds the id it is found by).
    FlatNodeIndex index KVMESH_GUARDED_BY(mu);
    // The slot holding `id` in the index, or -1.
    std::int32_t Lookup(const ContentId& id) const KVMESH_REQUIRES(mu) {
      const std::uint32_t s =
          index.Find(ContentIdHash()(id), [&](std::uint32_t c) KVMESH_NO_THREAD_SAFETY_ANALYSIS {
            return slots[c].id == id;  // called within Lookup, under mu
          });
      return s == FlatNodeIndex::kEmpty ? -1 : static_cast<std::int32_t>(s);
    }
    // `id` -> `slot`, replacing any slot it had.
    void IndexSet(const ContentId& id, std::int32_t slot) KVMESH_REQUIRES(mu) {
      IndexErase(id);
      index.Insert(ContentIdHash()(id), static_cast<std::uint32_t>(slot));
    }
    // Removes `id` from the index if it is there.
    void IndexErase(const ContentId& id) KVMESH_REQUIRES(mu) {
      if (const std::int32_t s = Lookup(id); s >= 0) {
        index.Erase(ContentIdHash()(id), static_cast<std::uint32_t>(s));
      }
    }
    // Puts whose slot's victim is spilling: reserved (a second put of the id copies nothing), not
    // yet in the index. An erase of one removes it (the put then frees its slot on publishing).
    std::unordered_map<ContentId, bool, ContentIdHash> incoming KVMESH_GUARDED_BY(mu);
    std::condition_variable cv;  // a spilling slot's last reader is done
  };
  // What a put reserved: a slot, and the victim it displaced (if any).
  struct Reservation {
    std::int32_t slot = -1;
    bool already_held = false;
    bool has_victim = false;  // the slot's victim is spilling; `id` is in the incoming set
    EvictedBundle victim;
    ContentId id;
    int priority = kTierDefaultPriority;
  };

  HostTier(HostTierOptions options, HostMemory memory);
  Result<Shard*> FindShard(TierPoolId pool, int priority) const;
  bool VisitSlot(Shard& shard, std::int32_t slot, const ContentId* id, TierPoolId pool,
                 const std::function<void(const EvictedBundle&)>& fn);
  // Get (verify, then copy) or GetForRestore (one pass).
  Status Read(TierPoolId pool, const ContentId& id, const KvPoolView& dst, std::int64_t block,
              bool one_pass);
  std::byte* SlotData(const Shard& shard, std::int32_t slot) const {
    return shard.base + static_cast<std::int64_t>(slot) * shard.slot_bytes;
  }
  // Reserves a slot for `id` (evicting if needed: the victim is spilled through the sink first).
  // kResourceExhausted when none can be had.
  Result<Reservation> Reserve(Shard& shard, const ContentId& id, int priority);
  // Hands the victim to the sink, then gives its slot to the reserved id.
  void Spill(Shard& shard, Reservation& r);
  void Publish(Shard& shard, std::int32_t slot);
  // Puts the reserved slot back to free (a failed write).
  void Abandon(Shard& shard, std::int32_t slot);
  void MakeEvictable(Shard& shard, std::int32_t slot) KVMESH_REQUIRES(shard.mu);
  // A reader's pin of a ready slot (a use of its block), and its end: the slot becomes evictable
  // again (or is freed, if erased meanwhile) with its last pin.
  void PinSlot(Shard& shard, std::int32_t slot) KVMESH_REQUIRES(shard.mu);
  void UnpinSlot(Shard& shard, std::int32_t slot) KVMESH_REQUIRES(shard.mu);
  void RemoveEvictable(Shard& shard, std::int32_t slot) KVMESH_REQUIRES(shard.mu);
  void FreeSlot(Shard& shard, std::int32_t slot) KVMESH_REQUIRES(shard.mu);
  // Drops the slot from the index; frees it now or when its last user is done.
  void EraseSlot(Shard& shard, std::int32_t slot) KVMESH_REQUIRES(shard.mu);

  HostTierOptions options_;
  HostMemory memory_;
  std::vector<std::unique_ptr<Shard>> shards_;
  mutable TierCounters counters_;
};

}  // namespace kvmesh
