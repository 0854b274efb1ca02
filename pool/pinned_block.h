// PinnedBlocks: an RAII pin on one or more blocks of a block manager.
//
// A pinned block is never evicted, freed or rewritten: eviction skips it, and a block whose owner
// (a sequence) goes away while it is pinned stays allocated until the last pin is dropped. The
// tiers pin blocks while they copy them out, transfers while bytes are in flight, the block
// manager itself the source and destination of a copy-on-partial-reuse. The pins are dropped when
// the handle is destroyed or Release() is called, whichever comes first.
//
// Obtained from BlockManager::PinByContentId / PinSequenceBlocks. Move-only. The manager must
// outlive its handles (checked: the manager's destructor aborts when pins are outstanding).
//
// Thread safety: a handle is externally synchronised; distinct handles may be released from
// distinct threads (the manager's unpin is thread-safe).
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "common/content_id.h"
#include "pool/block_ids.h"

namespace kvmesh {

struct PinnedBlockRef {
  PoolId pool;
  BlockId block;
  ContentId content_id;  // zero for a block that is not in the prefix tree
};

// What a pin owner implements (BlockManager). Unpin takes back the pins of a handle.
class BlockPinOwner {
 public:
  virtual void UnpinBlocks(std::span<const PinnedBlockRef> blocks) = 0;

 protected:
  ~BlockPinOwner() = default;
};

class PinnedBlocks {
 public:
  PinnedBlocks() = default;
  // Takes over pins the owner already counted.
  PinnedBlocks(BlockPinOwner* owner, std::vector<PinnedBlockRef> blocks)
      : owner_(owner), blocks_(std::move(blocks)) {}
  PinnedBlocks(PinnedBlocks&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)), blocks_(std::move(other.blocks_)) {
    other.blocks_.clear();
  }
  PinnedBlocks& operator=(PinnedBlocks&& other) noexcept {
    if (this != &other) {
      Release();
      owner_ = std::exchange(other.owner_, nullptr);
      blocks_ = std::move(other.blocks_);
      other.blocks_.clear();
    }
    return *this;
  }
  PinnedBlocks(const PinnedBlocks&) = delete;
  PinnedBlocks& operator=(const PinnedBlocks&) = delete;
  ~PinnedBlocks() { Release(); }

  [[nodiscard]] std::span<const PinnedBlockRef> blocks() const { return blocks_; }
  [[nodiscard]] bool empty() const { return blocks_.empty(); }
  [[nodiscard]] std::size_t size() const { return blocks_.size(); }

  // Drops the pins now; the handle becomes empty.
  void Release() {
    if (owner_ != nullptr && !blocks_.empty()) owner_->UnpinBlocks(blocks_);
    owner_ = nullptr;
    blocks_.clear();
  }

 private:
  BlockPinOwner* owner_ = nullptr;
  std::vector<PinnedBlockRef> blocks_;
};

}  // namespace kvmesh
