// LayerRangeFetcher: the decode node's pull of one layer range of a streaming handoff (node/
// handoff.h, docs/handoff.md "Streaming") — layers [begin, end) of each pool of every block the
// decode node reserved for the stream, from the prefill node, verified before a byte is used.
//
// Fetch(link, handoff id, target, ranges, deadline), in runs of what a staging arena holds (sized
// as if every range travelled whole, so that a sender that must stage whole ranges — device
// pools — has the room too; at most 1024 blocks):
//   1. receive-staging slots (node/peer_staging.h) and a grant naming, for each block and pool in
//      order, the parts of its range's wire form (store/layer_range_codec.h): in place — no
//      conversion, host pools registered with the engine — the header and checksum into a slot and
//      the components straight into the reserved block's layers; otherwise every part into the
//      slot (padding zeroed here);
//   2. FetchBlocks{handoff_id, first_block, blocks, layer_begin, layer_end, our range sizes} to the
//      sender, which sends each range as soon as it sealed it;
//   3. each block is verified as soon as its slices are whole (node/arrival_decoder.h), on a
//      thread of the fetch while the next blocks are on the wire: in place, LayerRangeCodec::
//      VerifyInPlace (the header completely: content id, fingerprint, layers; the checksum over the
//      header, the block's layers and zero padding); otherwise Verify in the slot, then one copy —
//      converting HND <-> NHD when the sender's order is the other one (kernels/block_copy.h) —
//      into the reserved block's layers (device pools: into those layers of a staging block,
//      then only they to the device, OffloadEngine::WriteBlock with a part).
// The first block that fails ends the fetch with its error: a range that fails verification,
// whatever UCX wrote, is in a reserved block nobody sees; the caller frees the reservation
// unpublished. A failed or slow transfer cancels the grant and waits until UCX no longer writes
// into it before the slots go back (as remote fetch does) and marks the link failed.
//
// Thread safety: a fetcher is confined to one stream's puller thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "node/peer_sessions.h"
#include "pool/block_restore.h"
#include "store/block_bundle.h"
#include "store/layer_range_codec.h"
#include "store/offload_engine.h"

namespace kvmesh {

struct LayerRangeFetchOptions {
  PeerSessions* sessions = nullptr;  // outlives the fetcher
  OffloadEngine* engine = nullptr;   // the pools; outlives the fetcher
  std::vector<KvPoolView> views;     // our pools
  // Per pool, the codecs of the sender's ranges (ours, or ours in the other order: `convert`) and
  // of our own pools (the destination of a converting copy).
  std::vector<LayerRangeCodec> theirs;
  std::vector<LayerRangeCodec> ours;
  bool convert = false;
};

// Where a stream's ranges go: reserved block i (0 <= i < reservation.count()) is the prompt's
// block first_block + i, verified against ids[i] (the sender's content id of it).
struct LayerRangeTarget {
  const RestoreReservation* reservation = nullptr;
  std::int64_t first_block = 0;
  std::span<const ContentId> ids;
};

struct LayerRangeFetchStats {
  std::int64_t runs = 0;             // FetchBlocks calls
  std::int64_t ranges_verified = 0;  // (block, pool) ranges verified and written
  std::int64_t converted = 0;        // of those, converted HND <-> NHD
  std::int64_t bytes = 0;            // wire bytes received
};

class LayerRangeFetcher {
 public:
  explicit LayerRangeFetcher(LayerRangeFetchOptions options);

  // Pulls `ranges` (per pool; empty: none of that pool) of every block of `target`. OK: every
  // range verified and written. Errors: kCorruption (a range failed verification), kNotFound
  // (the sender did not send a block), the transfer's and the link's.
  Status Fetch(PeerLink& link, std::uint64_t handoff_id, const LayerRangeTarget& target,
               std::span<const LayerSpan> ranges, std::chrono::steady_clock::time_point deadline);
  [[nodiscard]] const LayerRangeFetchStats& stats() const { return stats_; }
  [[nodiscard]] bool in_place() const { return in_place_; }

 private:
  // One run: reserved blocks [first, first + count).
  Status FetchRun(PeerLink& link, std::uint64_t handoff_id, const LayerRangeTarget& target,
                  std::span<const LayerSpan> ranges, std::int64_t first, std::int64_t count,
                  std::chrono::steady_clock::time_point deadline);
  // Verifies and writes reserved block `i`'s range of pool `pool` from `piece` (its slot area:
  // the seal when in place, else the whole range).
  Status DecodeRange(const LayerRangeTarget& target, std::int64_t i, std::size_t pool,
                     LayerSpan range, std::span<std::byte> piece);

  const LayerRangeFetchOptions options_;
  const bool in_place_;
  LayerRangeFetchStats stats_;
};

}  // namespace kvmesh
