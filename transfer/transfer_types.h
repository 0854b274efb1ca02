// Value types of the block transfer engine (transfer/transfer_engine.h): typed ids, slices, the
// worker address blob and the statistics.
//
// A slice is (region, offset, length): a byte range of memory registered with the engine. A
// receiver grants destination slices, a sender sends source slices; neither is ever a raw address
// that crosses the wire. The peer learns only a transfer id and the slice lengths (GrantInfo).
//
// Values; thread-safe as values are.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <vector>

namespace kvmesh {

// A peer as the caller names it (the membership layer's node id). Chosen by the caller, unique per
// engine; a peer that restarts keeps its id and is connected again with its new address.
struct PeerId {
  std::uint64_t value = 0;
  friend constexpr auto operator<=>(const PeerId&, const PeerId&) = default;
};

// A transfer, named by its receiver: 64 random bits (getrandom; 60 on an engine with lanes, whose
// low 4 bits say over how many lanes the grant is striped), unique among the receiver's live
// grants, never 0. It is a capability — it reaches only the sender the grant is for, over the
// authenticated control plane — and it is checked against the grant table on every message.
struct TransferId {
  std::uint64_t value = 0;
  [[nodiscard]] constexpr bool valid() const { return value != 0; }
  friend constexpr auto operator<=>(const TransferId&, const TransferId&) = default;
};

// A memory region registered with one engine (RegisterRegion). Local to that engine; never sent.
struct RegionId {
  std::uint32_t value = 0;
  [[nodiscard]] constexpr bool valid() const { return value != 0; }
  friend constexpr auto operator<=>(const RegionId&, const RegionId&) = default;
};

// A byte range [offset, offset + length) of a registered region.
struct Slice {
  RegionId region;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// The UCX worker address of an engine: an opaque blob that travels over the control plane.
using WorkerAddress = std::vector<std::byte>;

// What a sender needs to know about a grant: its id and the length of each destination slice, in
// order. Offsets and regions stay with the receiver.
struct GrantInfo {
  TransferId id;
  std::vector<std::uint64_t> slice_lengths;
};

// The GrantInfo of a grant of `slices` (the receiver sends it to the sender).
inline GrantInfo DescribeGrant(TransferId id, std::span<const Slice> slices) {
  GrantInfo info{id, {}};
  info.slice_lengths.reserve(slices.size());
  for (const Slice& slice : slices) info.slice_lengths.push_back(slice.length);
  return info;
}

// Counters of one engine since it was created. Every message the engine refused is counted under
// the reason it was refused for.
struct TransferStats {
  std::uint64_t grants_started = 0;
  std::uint64_t grants_completed = 0;  // completed OK: every slice filled
  std::uint64_t grants_failed = 0;     // completed with an error (timeout, cancel, peer, protocol)
  std::uint64_t sends_started = 0;
  std::uint64_t sends_completed = 0;
  std::uint64_t sends_failed = 0;
  std::uint64_t slices_received = 0;  // destination slices filled
  std::uint64_t bytes_received = 0;
  std::uint64_t slices_sent = 0;  // source slices whose send completed OK
  std::uint64_t bytes_sent = 0;
  std::uint64_t slices_receiving = 0;  // gauge: rendezvous receives in flight now
  // Refused data messages (the data was not written anywhere):
  std::uint64_t rejected_malformed = 0;         // wrong header size, magic, version, not rendezvous
  std::uint64_t rejected_unknown_peer = 0;      // from an endpoint that is no connected peer
  std::uint64_t rejected_unknown_transfer = 0;  // no live grant with this id (never, expired)
  std::uint64_t rejected_wrong_peer = 0;        // the grant is for another peer
  std::uint64_t rejected_bad_slice = 0;  // index out of range, length != granted, slice not empty
  std::uint64_t rejected_closed = 0;     // the grant is draining after a timeout/cancel/error
  std::uint64_t unknown_done = 0;        // completion reports for no send of ours (dropped)
  std::uint64_t peer_failures = 0;       // connections that failed (UCX error callback)
  std::uint64_t forced_closes = 0;       // connections closed to abort an in-flight rendezvous
};

inline std::ostream& operator<<(std::ostream& os, PeerId id) { return os << id.value; }
inline std::ostream& operator<<(std::ostream& os, TransferId id) { return os << id.value; }
inline std::ostream& operator<<(std::ostream& os, RegionId id) { return os << id.value; }

}  // namespace kvmesh

template <>
struct std::hash<kvmesh::PeerId> {
  std::size_t operator()(kvmesh::PeerId id) const noexcept {
    return std::hash<std::uint64_t>()(id.value);
  }
};
template <>
struct std::hash<kvmesh::TransferId> {
  std::size_t operator()(kvmesh::TransferId id) const noexcept {
    return std::hash<std::uint64_t>()(id.value);
  }
};
