// Restoring blocks into the pool from the tiers: the types of the block manager's two-phase
// restore API (BlockManager::PlanRestore / ReserveRestore / PublishRestore, block_manager.h).
//
// The tiers (store/) hold blocks by content id. When a prompt's prefix goes on beyond what the
// prefix tree holds, the blocks after the tree's match may be in a lower tier. Restoring one is:
//
//   1. PlanRestore(prompt, options)        the content ids of the prompt's reusable full blocks:
//                                          [0, pool_blocks) are in the tree now, the rest are the
//                                          candidates, in order (read-only; ids are hashed outside
//                                          the manager's lock).
//   2. (tiers) how many candidates, from the first on, a tier holds.
//   3. ReserveRestore(prompt, options, plan, count)
//                                          allocates `count` blocks per pool (fewer when the pools
//                                          cannot supply them), private and pinned, in no tree:
//                                          nobody can match, read or evict them. The node the
//                                          restored chain hangs from (block pool_blocks - 1, or
//                                          the domain root) is pinned so it stays.
//   4. (tiers) copy + verify each candidate into its reserved blocks, asynchronously if wanted;
//      the reserved blocks are the copy's destination and nothing else touches them.
//   5. PublishRestore(reservation, ready)  stores the first `ready` blocks in the tree (they become
//                                          visible, reusable, kStored events), frees the rest, and
//                                          unpins the parent; optionally keeps the published
//                                          blocks pinned (PinnedBlocks) until the caller's
//                                          AddSequence has pinned them as a sequence's.
//
// A block is thus never visible in the pool before its copy completed. A reservation that is
// destroyed unpublished frees its blocks (a failed restore leaves nothing behind). If another
// sequence stored one of the restored keys meanwhile, the stored node wins and the restored block
// is freed (counted in PublishedRestore::duplicates).
//
// Thread safety: RestorePlan and PublishedRestore are values. A RestoreReservation is a move-only
// handle, externally synchronised; it must not outlive its manager.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/content_id.h"
#include "pool/block_ids.h"
#include "pool/pinned_block.h"
#include "pool/prefix_tree.h"

namespace kvmesh {

class BlockManager;

struct RestorePlan {
  // Full blocks of the prompt found in the prefix tree, from the first on (window limits and
  // partial blocks aside: what a restore would hang from).
  std::int64_t pool_blocks = 0;
  // Content ids of the prompt's reusable full blocks (the last prompt token is not reusable unless
  // options.reuse_last_token): ids [0, pool_blocks) of tree nodes, then the candidates.
  std::vector<ContentId> content_ids;
  // The tree nodes of blocks [0, pool_blocks) as PlanRestore found them: a hint that lets
  // AddSequence of the same prompt skip looking them up again (each is checked before use).
  std::vector<NodeHandle> path;

  [[nodiscard]] std::int64_t num_candidates() const {
    return static_cast<std::int64_t>(content_ids.size()) - pool_blocks;
  }
};

class RestoreReservation {
 public:
  RestoreReservation();
  RestoreReservation(RestoreReservation&&) noexcept;
  RestoreReservation& operator=(RestoreReservation&&) noexcept;
  RestoreReservation(const RestoreReservation&) = delete;
  RestoreReservation& operator=(const RestoreReservation&) = delete;
  // Frees the reserved blocks and unpins the parent unless published.
  ~RestoreReservation();

  // Reserved blocks (full blocks of the prompt) [first_block(), first_block() + count()).
  [[nodiscard]] std::int64_t first_block() const;
  [[nodiscard]] std::int64_t count() const;
  [[nodiscard]] bool empty() const { return count() == 0; }
  // The block reserved in `pool` for reserved block i (0 <= i < count()).
  [[nodiscard]] BlockId block(std::int64_t i, int pool) const;
  // The content id the block will be published under.
  [[nodiscard]] const ContentId& content_id(std::int64_t i) const;

  struct State;  // block_manager_restore.cc

 private:
  friend class BlockManager;
  RestoreReservation(BlockManager* owner, std::unique_ptr<State> state);
  void Abandon();

  BlockManager* owner_ = nullptr;
  std::unique_ptr<State> state_;
};

struct PublishedRestore {
  std::int64_t published = 0;   // blocks stored in the tree by this restore
  std::int64_t duplicates = 0;  // ready blocks whose key was stored meanwhile (theirs kept)
  std::int64_t discarded = 0;   // reserved blocks freed unpublished (not ready, or no parent)
  // With keep_pinned: pins on every block of the nodes [first_block, first_block + published +
  // duplicates) — the restored chain, whoever stored it.
  PinnedBlocks pins;
};

}  // namespace kvmesh
