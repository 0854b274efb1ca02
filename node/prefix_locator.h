// PrefixLocator: where in the cluster the blocks of a prefix are believed to be — the seam between
// the cluster prefix directory (which answers it from its partitioned, event-fed index) and the
// parts that act on the answer (remote prefix fetch in Admit, `kvctl route`).
//
// An answer is a belief, not a promise: a holder may have evicted the block since its last KV event
// reached the directory, or be gone. Callers therefore verify every block they fetch (bundle
// checksum bound to content id and geometry) and treat a wrong or missing block as a miss.
//
// Thread safety: implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/content_id.h"
#include "common/result.h"

namespace kvmesh {

// The tier a holder reported the block in (the fastest one it has).
enum class HolderTier : std::uint8_t { kPool = 0, kHost = 1, kDisk = 2 };

struct BlockHolder {
  std::string node_id;
  HolderTier tier = HolderTier::kPool;
  friend bool operator==(const BlockHolder&, const BlockHolder&) = default;
};

class PrefixLocator {
 public:
  virtual ~PrefixLocator() = default;

  // For each of `ids` (a prompt's consecutive blocks, in order), the peers believed to hold it,
  // fastest tier first; never this node itself. Fails only when the answer cannot be had at all
  // within `timeout` (then the caller computes the blocks); a partial answer (some shards
  // unreachable) returns what is known, with those blocks' lists empty.
  [[nodiscard]] virtual Result<std::vector<std::vector<BlockHolder>>> Locate(
      std::span<const ContentId> ids, std::chrono::milliseconds timeout) = 0;
};

}  // namespace kvmesh
