// The pure parts of the cluster prefix directory (node/prefix_directory.h): rendezvous hashing of
// content ids to home nodes, a home node's shard of the index, and a node's own holdings.
//
// Rendezvous (highest random weight) hashing: the home of a content id among members M is the
// member m maximising Score(id, m) = mix(id's first 8 bytes XOR FNV-1a-64(m's node id)). Every node
// computes the same home from the same member list, with no coordination; a member joining takes
// from each other member only the ids it now wins (about 1/|M| of them), and a member leaving hands
// only its own ids to the others.
//
// Thread safety: HomeRing is a value (thread-safe as values are); DirectoryShard and Holdings are
// thread-safe (one mutex each, never held across I/O).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/content_id.h"
#include "node/prefix_locator.h"
#include "pool/kv_events.h"

namespace kvmesh {

std::uint64_t NodeIdHash(std::string_view node_id);
std::uint64_t RendezvousScore(const ContentId& id, std::uint64_t node_hash);

class HomeRing {
 public:
  HomeRing() = default;
  // `members`: every node id, this node's included; duplicates are ignored.
  explicit HomeRing(std::vector<std::string> members);
  [[nodiscard]] bool empty() const { return ids_.empty(); }
  [[nodiscard]] const std::vector<std::string>& members() const { return ids_; }
  // REQUIRES: !empty().
  [[nodiscard]] const std::string& HomeOf(const ContentId& id) const;

 private:
  std::vector<std::string> ids_;  // sorted
  std::vector<std::uint64_t> hashes_;
};

// One directory entry as a holder reports it: its best tier, or removed.
struct HoldingUpdate {
  ContentId id;
  bool removed = false;
  HolderTier tier = HolderTier::kPool;
};

// The part of the index a home node keeps: content id → the nodes holding it and their tier.
class DirectoryShard {
 public:
  void Apply(const std::string& node_id, const std::vector<HoldingUpdate>& updates);
  // Forgets every entry of `node_id` (it left the cluster).
  void DropNode(const std::string& node_id);
  // Forgets every id whose home under `ring` is not `self` (their holders re-publish to the new
  // home). Returns the number of ids dropped.
  std::size_t DropNotHomedAt(const HomeRing& ring, const std::string& self);
  // The holders of `id`, fastest tier first, then by node id.
  [[nodiscard]] std::vector<BlockHolder> Holders(const ContentId& id) const;
  [[nodiscard]] std::size_t size() const;  // ids with at least one holder

 private:
  mutable std::mutex mu_;
  // guarded by mu_
  std::unordered_map<ContentId, std::map<std::string, HolderTier>, ContentIdHash> entries_;
};

// What this node holds, fed by its own KV events: per content id which primary pools hold its
// block and whether the host or disk tier has a copy. Apply returns the ids whose best tier
// changed (the updates to send to their homes).
//
// Every event sets a state (kStored: pool p holds the block; kRemoved: it does not; kTierChanged:
// the copy left previous_tier and is in tier), so applying an event twice changes nothing. That is
// what makes a resynchronisation exact: Replace(snapshot) installs what the node holds, and the
// events polled afterwards (some already reflected in the snapshot) are applied on top.
class Holdings {
 public:
  std::vector<HoldingUpdate> Apply(const std::vector<KvEvent>& events);
  // Discards the state and installs `snapshot` (kStored for each pool block, kTierChanged into
  // kHost or kDisk for each tier copy). Returns the ids whose best tier differs from before,
  // removals included (an id held before and absent from the snapshot).
  std::vector<HoldingUpdate> Replace(const std::vector<KvEvent>& snapshot);
  // Every held id with its best tier (a re-publish after a membership change).
  [[nodiscard]] std::vector<HoldingUpdate> All() const;
  [[nodiscard]] std::size_t size() const;  // held ids

  // Pools 0..62 have a bit each; pools from 63 on share the last one (no model has that many).
  static constexpr int kTrackedPools = 64;

 private:
  struct State {
    std::uint64_t primary_pools = 0;  // bit p: pool p holds the block
    bool host = false;
    bool disk = false;
  };
  static std::optional<HolderTier> Best(const State& s);
  static void ApplyOne(const KvEvent& e, State& s);
  mutable std::mutex mu_;
  std::unordered_map<ContentId, State, ContentIdHash> held_;  // guarded by mu_
};

}  // namespace kvmesh
