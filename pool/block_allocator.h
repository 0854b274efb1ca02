// BlockAllocator: the free list of one pool's block ids.
//
// A pool of N blocks hands out ids 0..N-1, lowest first at the start, then last-freed first (a
// block freed a moment ago is warm in every cache). An unlimited allocator (num_blocks ==
// kUnlimitedBlocks, for metadata-only managers such as trace replay without a capacity) hands out
// fresh ids when its free list is empty and never runs out.
//
// Allocate and Free are O(1) and do not allocate memory once the free list has reached its
// largest size (a limited allocator reserves it up front).
//
// Thread safety: externally synchronised.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "common/check.h"
#include "pool/block_ids.h"

namespace kvmesh {

inline constexpr std::int64_t kUnlimitedBlocks = -1;
// Block ids are int32: the most blocks one pool can have.
inline constexpr std::int64_t kMaxBlocksPerPool = std::numeric_limits<std::int32_t>::max();

class BlockAllocator {
 public:
  // REQUIRES: num_blocks == kUnlimitedBlocks or 0 <= num_blocks <= kMaxBlocksPerPool.
  explicit BlockAllocator(std::int64_t num_blocks) : num_blocks_(num_blocks) {
    KVMESH_CHECK(num_blocks == kUnlimitedBlocks ||
                 (num_blocks >= 0 && num_blocks <= kMaxBlocksPerPool))
        << "num_blocks " << num_blocks;
    if (!unlimited()) {
      free_.reserve(static_cast<std::size_t>(num_blocks));
      for (std::int64_t b = num_blocks - 1; b >= 0; --b) {
        free_.push_back(static_cast<std::int32_t>(b));
      }
      issued_ = num_blocks;
    }
  }

  [[nodiscard]] bool unlimited() const { return num_blocks_ == kUnlimitedBlocks; }
  // The pool size, or kUnlimitedBlocks.
  [[nodiscard]] std::int64_t num_blocks() const { return num_blocks_; }
  // Ids handed out at least once, plus (limited) the whole pool: the size per-block arrays need.
  [[nodiscard]] std::int64_t id_space() const { return issued_; }
  [[nodiscard]] std::int64_t num_free() const { return static_cast<std::int64_t>(free_.size()); }
  [[nodiscard]] std::int64_t num_allocated() const { return issued_ - num_free(); }

  std::optional<BlockId> Allocate() {
    if (!free_.empty()) {
      const std::int32_t b = free_.back();
      free_.pop_back();
      return BlockId{b};
    }
    if (unlimited()) {
      KVMESH_CHECK(issued_ < kMaxBlocksPerPool) << "unlimited pool ran out of block ids";
      return BlockId{static_cast<std::int32_t>(issued_++)};
    }
    return std::nullopt;
  }

  // REQUIRES: b was allocated and not freed since.
  void Free(BlockId b) {
    KVMESH_DCHECK(b.valid() && b.value < issued_) << b.value;
    free_.push_back(b.value);
  }

 private:
  std::int64_t num_blocks_;
  std::int64_t issued_ = 0;
  std::vector<std::int32_t> free_;
};

}  // namespace kvmesh
