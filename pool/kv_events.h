// KV events: what a router or the cluster directory needs to follow a node's cache.
//
//   kStored       a block became reusable (it entered the prefix tree); tier = kPrimary
//   kRemoved      a block left the primary pool's cache (evicted, claimed for partial reuse, or
//                 its node removed); tier = kNone
//   kTierChanged  a tier reports that the block's copy moved (offloaded to host, written to disk,
//                 dropped from a tier); tier = the tier it is now in, previous_tier where it was
//
// Events are per pool block: a tree node with blocks in two pools produces two kStored events
// with the same content id. Every event carries a sequence number, increasing by one per event
// from 1, shared by all event types, so a consumer sees one total order.
//
// KvEventBuffer is a bounded ring (capacity fixed at construction; Push never allocates). Each
// consumer keeps its own cursor and polls from it: Poll(next_seq) returns the events from
// next_seq on that are still retained and the cursor to poll from next. When the consumer fell
// behind and events were overwritten, the batch says so explicitly: lost = [first, last] sequence
// numbers that can no longer be read — the consumer must resynchronise (e.g. ask for a snapshot).
//
// Thread safety: thread-safe (one internal mutex, held only to copy events in or out). The block
// manager pushes while holding its own mutex (lock order: manager, then buffer); consumers never
// need the manager's lock.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/content_id.h"
#include "common/thread_annotations.h"
#include "pool/block_ids.h"

namespace kvmesh {

enum class KvEventType : std::uint8_t { kStored = 0, kRemoved = 1, kTierChanged = 2 };
// Where a copy of a block lives.
enum class KvTier : std::uint8_t { kNone = 0, kPrimary = 1, kHost = 2, kDisk = 3 };

std::string_view KvEventTypeName(KvEventType type);  // "stored", "removed", "tier_changed"
std::string_view KvTierName(KvTier tier);            // "none", "primary", "host", "disk"

struct KvEvent {
  std::uint64_t seq = 0;  // assigned by the buffer
  KvEventType type = KvEventType::kStored;
  PoolId pool;
  BlockId block;         // the block in the primary pool (kNoBlock for tier changes of a block
                         // no longer in the primary pool)
  ContentId content_id;  // the tree node's content id
  ContentId parent_id;   // the parent's content id (the domain id for a first block)
  std::int32_t num_tokens = 0;
  std::int32_t priority = 0;  // the block's retention priority when the event was made
  KvTier tier = KvTier::kNone;
  KvTier previous_tier = KvTier::kNone;
};

// Sequence numbers [first, last] that were overwritten before the consumer read them.
struct KvEventGap {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
};

struct KvEventBatch {
  std::vector<KvEvent> events;     // in sequence order, no gaps among them
  std::optional<KvEventGap> lost;  // set when events before events.front() were lost
  std::uint64_t next_seq = 1;      // poll from here next time
};

class KvEventBuffer {
 public:
  // REQUIRES: capacity > 0.
  explicit KvEventBuffer(std::size_t capacity);

  std::size_t capacity() const { return capacity_; }

  // Appends the events, assigning their sequence numbers (returned: the last one assigned; 0 for
  // an empty span). Oldest events are overwritten when the ring is full.
  std::uint64_t Push(std::span<KvEvent> events) KVMESH_EXCLUDES(mu_);

  // Events with seq >= from_seq, at most max_events. from_seq 0 is read as 1.
  KvEventBatch Poll(std::uint64_t from_seq, std::size_t max_events) const KVMESH_EXCLUDES(mu_);

  // The sequence number of the newest event (0 before the first).
  std::uint64_t last_seq() const KVMESH_EXCLUDES(mu_);
  // Events overwritten so far (whether or not any consumer read them).
  std::uint64_t overwritten() const KVMESH_EXCLUDES(mu_);

 private:
  const std::size_t capacity_;
  mutable Mutex mu_;
  std::vector<KvEvent> ring_ KVMESH_GUARDED_BY(mu_);  // slot of seq s is (s - 1) % capacity
  std::uint64_t last_seq_ KVMESH_GUARDED_BY(mu_) = 0;
};

}  // namespace kvmesh
