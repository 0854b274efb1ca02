// The block manager's private state types, shared by its .cc files. Not part of the API.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pool/block_manager.h"

namespace kvmesh {

struct BlockManager::Sequence {
  RequestId id;
  NodeRef root = kNoNode;  // the domain root; the sequence holds a reference on it
  std::vector<Token> tokens;
  std::int64_t prompt_tokens = 0;
  std::int64_t prompt_positions = 0;  // positions allocated by AddSequence (prompt blocks)
  std::vector<MultimodalItem> multimodal;
  std::vector<RetentionRange> retention;
  int decode_priority = kDefaultPriority;
  std::optional<Nanos> decode_duration;
  // [pool][position]: the block this sequence holds (one pin each), or -1.
  std::vector<std::vector<std::int32_t>> tables;
  // [position < stored_blocks]: the tree node with this position's key (reused, stored by this
  // sequence, or stored first by another one).
  std::vector<NodeHandle> nodes;
  std::int64_t stored_blocks = 0;
  bool store_broken = false;                // a parent node went away: later blocks stay private
  std::vector<std::int64_t> released_upto;  // [pool]: window positions below were released
  // PendingContentIds: the content ids of positions [pending_ids_from, + size), kept for
  // StoreFullBlocks.
  std::vector<ContentId> pending_ids;
  std::int64_t pending_ids_from = 0;
};

struct BlockManager::Match {
  NodeRef root = kNoNode;
  std::vector<NodeRef> path;  // matched full blocks, in order
  NodeRef partial = kNoNode;  // the partly matching child of path.back() (or of the root)
  std::int32_t partial_tokens = 0;
  std::int64_t reused_tokens = 0;
  // [pool]: the first path position whose block that pool reuses (0 for full pools).
  std::vector<std::int64_t> window_first;
};

struct BlockManager::Admission {
  std::int64_t num_positions = 0;
  std::int64_t first_new = 0;  // first position that gets fresh blocks
  bool claim = false;
  bool copy = false;
};

// The priority (and expiry) a retention list gives tokens [begin, end): the highest priority of
// the ranges overlapping them; nullopt when none does.
struct RetentionChoice {
  int priority = kDefaultPriority;
  std::optional<Nanos> duration;
};
// kInvalidArgument unless the prompt and options are well formed (block_manager.h, Errors).
Status ValidateSequence(std::span<const Token> tokens, const SequenceOptions& options);

std::optional<RetentionChoice> RetentionFor(const std::vector<RetentionRange>& ranges,
                                            std::int64_t begin, std::int64_t end);

}  // namespace kvmesh
