// The prefill node's side of a streaming handoff's data (node/handoff.h, docs/handoff.md
// "Streaming"): FetchBlocks with a handoff id — the decode node asks for layers [begin, end) of
// each pool of a run of the stream's blocks, and this node sends each (block, pool) range in the
// layer-range wire form (store/layer_range_codec.h: header bound to content id, geometry
// fingerprint and layers; the components' bytes of those layers; checksum) into the decode node's
// grant.
//
// ServeLayerRanges(args):
//   1. the caller (HandoffSender) has checked the request against its stream: the peer is the
//      stream's decode node, the blocks lie in the stream, every range lies in the layers the
//      prefill engine announced; here the requester's range sizes must equal ours (else
//      kFailedPrecondition: another geometry) — nothing the peer sent is ever an address or an
//      offset;
//   2. takes send-staging slots and, block by block, writes each range's seal (header and
//      checksum over the pool block's layers, no copy) — or, for device pools or a source that
//      asks for it, the whole range (device pools: read out through staging, OffloadEngine::
//      ReadBlock) — and Sends its parts: the header and checksum from the slot, the components
//      straight from the registered pool (or from the slot). One Send per block: the next block is
//      sealed while this one is on the wire;
//   3. waits for every send, so that the slots are released only when UCX no longer reads them.
//      The pool blocks stay pinned by the caller (the stream's pins, shared for the call).
// The engine writes later layers of the same blocks meanwhile: it writes only layers it has not
// announced, which no range here touches (a device pool's staged copy of a whole block may hold
// half-written later layers; only the announced ones are used).
//
// Packing (both sides): a run's pieces — for each block, one per pool whose range is not empty,
// in pool order — are laid out in staging slots in order, each 64-byte aligned, never across two
// slots (PackPieces). Seals take kLayerRangeSealBytes, whole ranges LayerRangeCodec::Bytes.
//
// LayerRangeSource is where a range's bytes come from: PoolLayerRangeSource (the node's pools) in
// kvnode; tests substitute a source that lies, to check the decode node's verification.
//
// Thread safety: ServeLayerRanges is reentrant (it blocks: seals, copies, a transfer). A source
// is called from any thread, one call at a time per request.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "node/peer_sessions.h"
#include "store/block_bundle.h"
#include "store/layer_range_codec.h"
#include "store/offload_engine.h"

namespace kvmesh {

// One block of a stream, as its sender knows it.
struct LayerRangeBlock {
  ContentId id;                      // in the sender's key namespace
  std::vector<std::int64_t> blocks;  // per pool: the pool block holding it
};

// What one FetchBlocks with a handoff id asks for, once checked: a run of the stream's blocks and
// per pool a range (empty: none of that pool).
struct LayerRangeRequest {
  std::span<const LayerRangeBlock> blocks;
  std::span<const LayerSpan> ranges;
};

class LayerRangeSource {
 public:
  virtual ~LayerRangeSource() = default;
  // Whether seals alone may be written, the payload then going from the pool itself (when the
  // pools are registered host memory). False: every range is written whole into its slot.
  [[nodiscard]] virtual bool seal_only() const { return true; }
  // Block i of the request, pool `pool`: its range's seal into seal[0, kLayerRangeSealBytes).
  virtual Status EncodeSeal(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                            std::span<std::byte> seal) = 0;
  // The same range whole (LayerRangeCodec::Bytes long) into `out`.
  virtual Status Encode(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                        std::span<std::byte> out) = 0;
};

// Ranges of the node's own pool blocks; device pools read through staging. `engine` outlives it.
class PoolLayerRangeSource final : public LayerRangeSource {
 public:
  PoolLayerRangeSource(OffloadEngine* engine, std::vector<LayerRangeCodec> codecs)
      : engine_(engine), codecs_(std::move(codecs)) {}
  Status EncodeSeal(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                    std::span<std::byte> seal) override;
  Status Encode(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                std::span<std::byte> out) override;

 private:
  OffloadEngine* const engine_;
  const std::vector<LayerRangeCodec> codecs_;
};

// Where piece k of a run lies in staging.
struct StagingPlace {
  std::uint32_t slot = 0;
  std::uint64_t offset = 0;
};

// Packs the pieces of `blocks` blocks — per block, one of piece_bytes[p] bytes for every pool p
// with piece_bytes[p] > 0, in pool order — into slots of `slot_bytes`. *slots: the slots used.
// REQUIRES: every piece fits in a slot.
std::vector<StagingPlace> PackPieces(std::span<const std::int64_t> piece_bytes, std::int64_t blocks,
                                     std::uint64_t slot_bytes, std::uint32_t* slots);
// The most blocks, at most `blocks`, whose pieces PackPieces fits in `slots` slots (0 when not
// even one block's do).
std::int64_t BlocksThatFit(std::span<const std::int64_t> piece_bytes, std::int64_t blocks,
                           std::uint64_t slot_bytes, std::uint32_t slots);

// Whether the pools are host memory whose every component is registered with the engine
// (PeerSessions::PoolSlice): ranges can then go from and into the pools themselves.
bool PoolsRegistered(const PeerSessions& sessions, const OffloadEngine& engine);

struct LayerRangeServeArgs {
  PeerSessions* sessions = nullptr;
  OffloadEngine* engine = nullptr;  // the pools (views; device_pools)
  LayerRangeSource* source = nullptr;
  const std::vector<LayerRangeCodec>* codecs = nullptr;  // ours, per pool
  PeerId peer;
  TransferId transfer;
  LayerRangeRequest request;
  // Per pool, the requester's size of its range (0 for an empty range).
  std::span<const std::int64_t> requested_bytes;
  std::chrono::steady_clock::time_point deadline;
};

// Sends the request's ranges into the requester's grant. OK: every send completed (the grant is
// complete); the bytes sent. Errors: kFailedPrecondition (another geometry), the staging's and the
// transfer's (kTimedOut, kPeerUnreachable, kCancelled).
Result<std::int64_t> ServeLayerRanges(const LayerRangeServeArgs& args);

}  // namespace kvmesh
