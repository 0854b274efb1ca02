// Typed ids of the block manager: BlockId (a block of one pool), RequestId (a sequence), NodeRef
// (a prefix-tree node), and the token type. PoolId (the index of a pool in its plan) is the pool
// plan's type (pool/pool_plan.h), shared so that a plan's pool and a block manager's pool are the
// same id.
//
// Values; thread-safe as values are.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

#include "pool/pool_plan.h"  // PoolId

namespace kvmesh {

// A token id as the engine's tokenizer produced it.
using Token = std::int32_t;

// A block of one pool: the index in the pool tensor's first dimension. Block 17 is the same slice
// in every layer and every component of its pool. -1 means "no block".
struct BlockId {
  std::int32_t value = -1;
  [[nodiscard]] constexpr bool valid() const { return value >= 0; }
  friend constexpr auto operator<=>(const BlockId&, const BlockId&) = default;
};
inline constexpr BlockId kNoBlock{-1};

// The engine's id of a request (a sequence). Unique among the running sequences of one manager.
struct RequestId {
  std::uint64_t value = 0;
  friend constexpr auto operator<=>(const RequestId&, const RequestId&) = default;
};

inline std::ostream& operator<<(std::ostream& os, BlockId id) { return os << id.value; }
inline std::ostream& operator<<(std::ostream& os, RequestId id) { return os << id.value; }

}  // namespace kvmesh

template <>
struct std::hash<kvmesh::RequestId> {
  std::size_t operator()(kvmesh::RequestId id) const noexcept {
    return std::hash<std::uint64_t>()(id.value);
  }
};
