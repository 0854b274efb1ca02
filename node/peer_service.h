// PeerService: what a node answers to its peers — PeerHello (node/peer_sessions.h), HaveBlocks and
// FetchBlocks (the holder's side of remote prefix fetch, node/remote_fetch.h).
//
// Handoff: to the HandoffReceiver (node/handoff.h) given by SetHandoff.
// FetchBlocks(transfer, content ids, bundle sizes, deadline), from a peer that said hello:
//   1. checks everything the peer sent: a transfer id, at most max_fetch_blocks ids of 16 bytes,
//      one bundle size per pool equal to ours (else kFailedPrecondition: another geometry), a
//      deadline of at most max_deadline; none of it is ever an address or an offset here;
//   2. takes send-staging slots (ids × pools), and for each id, in order, pins its blocks in the
//      pool and writes each pool's bundle seal (header and checksum, store/block_bundle.h:
//      bound to content id and geometry) into its slot — or, for a block only a tier holds,
//      the whole bundle — and Sends the bundle's data ranges (BundleCodec::data_ranges: header,
//      each component, checksum) into the requester's grant at once: the components straight
//      from the pool's registered memory (PeerSessions::PoolSlice; copied into the slot
//      only if the pool is not registered), the rest from the slot. One Send per block: the
//      next block is sealed while this one is on the wire and being decoded. The first block not
//      held any more and all after it are sent as zeros (the requester's verification makes
//      them misses);
//   3. waits for every send (so pins and slots are released only when UCX no longer reads
//      them); answers sent_blocks.
// The wire form of a fetch, for each block and pool in order: the data ranges of its bundle, one
// slice each, the receiver's grant naming the same ranges of its receive slots (node/
// remote_fetch.h).
// The data a peer asks for is only blocks of this node's own namespace named by content id; the
// tenant salt is inside the content id, chosen by the requester's engine.
//
// BlockSource is where blocks come from: CacheBlockSource (the node's TieredCache) in kvnode;
// tests substitute a source that lies to check the requester's verification.
//
// Thread safety: thread-safe; Handle blocks (pins, copies, a transfer) and runs on worker threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "node/peer_sessions.h"
#include "node/request_handler.h"
#include "store/block_bundle.h"
#include "store/tiered_cache.h"

namespace kvmesh {

class HandoffReceiver;

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  struct Held {
    std::int32_t pool_blocks = 0;  // ids[0, pool_blocks) cached in the pool
    std::int32_t held_blocks = 0;  // ids[0, held_blocks) in the pool or a tier
  };
  virtual Held Count(std::span<const ContentId> ids) = 0;
  // Where block ids[i] of a fetch comes from.
  struct Prepared {
    PinnedBlocks pins;  // the pool's blocks, pinned until UCX has read them (the sends completed)
    // Per pool, per component: the block's bytes in the pool, to be sent from there (the pool's
    // slot then holds only the seal: BundleCodec::EncodeSeal); null: the slot holds them too (a
    // whole bundle).
    std::vector<std::array<const std::byte*, kNumKvComponents>> payload;
  };
  // Block ids[i] of a fetch (`ids`: all it asks for, prepared in order) of every pool p: its seal
  // or its whole bundle into slots[p] (each at least the pool's bundle size), and where its bytes
  // are (*out, whose payload has one entry per pool, all null on entry). False when the block is
  // not held.
  virtual bool Encode(std::span<const ContentId> ids, std::size_t i,
                      std::span<const std::span<std::byte>> slots, Prepared* out) = 0;
};

// Blocks from a TieredCache: the pool first (pinned, sealed, sent from the pool), then the tiers
// (decoded through a one-block scratch buffer per pool, encoded whole into the slot). `cache` and
// `views` (the pools' memory) outlive it.
class CacheBlockSource final : public BlockSource {
 public:
  CacheBlockSource(TieredCache* cache, std::vector<KvPoolView> views,
                   std::vector<BundleCodec> codecs);
  Held Count(std::span<const ContentId> ids) override;
  bool Encode(std::span<const ContentId> ids, std::size_t i,
              std::span<const std::span<std::byte>> slots, Prepared* out) override;

 private:
  bool EncodeFromTier(const ContentId& id, std::span<const std::span<std::byte>> out);
  TieredCache* const cache_;
  const std::vector<KvPoolView> views_;
  const std::vector<BundleCodec> codecs_;
};

struct PeerServiceOptions {
  std::int32_t max_fetch_blocks = 1024;
  std::chrono::milliseconds max_deadline{30000};
};

struct PeerServiceStats {
  std::int64_t fetches_served = 0;
  std::int64_t fetches_failed = 0;
  std::int64_t blocks_sent = 0;
  std::int64_t blocks_missing = 0;  // asked for, not held: sent as zeros
  std::int64_t bytes_sent = 0;
};

class PeerService {
 public:
  // `sessions` and `source` outlive the service; codecs: the pools' bundle codecs, in order.
  PeerService(PeerServiceOptions options, PeerSessions* sessions, BlockSource* source,
              std::vector<BundleCodec> codecs);

  static bool Handles(rpc::Request::BodyCase body);
  // REQUIRES: Handles(request.body_case()). kPermissionDenied for a session that is no peer.
  Status Handle(const SessionInfo& session, const rpc::Request& request, rpc::Response* out);
  [[nodiscard]] PeerServiceStats stats() const;
  [[nodiscard]] const std::vector<std::int64_t>& bundle_bytes() const { return bundle_bytes_; }
  [[nodiscard]] const std::vector<BundleCodec>& codecs() const { return codecs_; }
  // Handoff requests (node/handoff.h) go to `receiver` (outlives the service; set before serving).
  // Without one they are kNotSupported.
  void SetHandoff(HandoffReceiver* receiver) { handoff_ = receiver; }

 private:
  Status HaveBlocks(const rpc::HaveBlocksRequest& in, rpc::HaveBlocksResponse* out);
  Status FetchBlocks(const SessionInfo& session, const rpc::FetchBlocksRequest& in,
                     rpc::FetchBlocksResponse* out);
  // Appends block `block`'s wire slices (every pool's data ranges) to *wire: the components from
  // where `prepared` says they are (registered pool memory, else copied into the slot), the rest
  // from the block's slots.
  void AppendWire(std::size_t block, const BlockSource::Prepared& prepared,
                  const StagingLease& lease, std::span<const std::span<std::byte>> slots,
                  std::vector<Slice>* wire) const;

  const PeerServiceOptions options_;
  PeerSessions* const sessions_;
  BlockSource* const source_;
  const std::vector<BundleCodec> codecs_;
  const std::vector<std::int64_t> bundle_bytes_;
  HandoffReceiver* handoff_ = nullptr;
  std::atomic<std::int64_t> served_{0}, failed_{0}, sent_{0}, missing_{0}, bytes_{0};
};

// Content ids from their 16-byte wire form; kInvalidArgument for another length.
Result<std::vector<ContentId>> ContentIdsFromWire(
    const google::protobuf::RepeatedPtrField<std::string>& ids);

}  // namespace kvmesh
