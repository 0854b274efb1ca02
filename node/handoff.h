// Disaggregated prefill -> decode handoff: a prefill node hands a request's blocks (its prompt and
// the requesting engine's sequence options, so its content ids and tenant salt) to a chosen decode
// node, so that the decode engine's Admit of the same prompt finds them all in its pool.
//
// Direction: the decode node pulls. HandoffSender (the prefill node) asks, over its peer link,
// Handoff(prompt, options, deadline); HandoffReceiver (the decode node) then fetches from the
// sender with the remote-fetch machinery (node/remote_fetch.h: FetchBlocks into its registered
// receive staging, every bundle verified against content id and geometry before it is published).
//
// HandoffSender::HandOff(to, prompt, options, deadline):
//   1. the compatibility handshake: PeerSessions::Link(to) says PeerHello both ways (namespace
//      digest and every pool's geometry fingerprint must be equal, else kFailedPrecondition) before
//      any block is named;
//   2. pins the prompt's full blocks that this node's pool holds (PlanRestore, PinByContentId), so
//      that the decode node's FetchBlocks finds them however the pool is pressed meanwhile;
//   3. sends Handoff (with the deadline left: the decode node stops fetching at it) and waits for
//      the answer, at most the peer request timeout (peer.fetch_deadline) of the link;
//   4. releases the pins on return: after the decode node's answer (its acknowledgement) or when
//      the wait ended (deadline, the peer gone) — never later, on every path (RAII).
// HandoffReceiver::Handle (on a session of role peer whose client name is the sender's node id):
//   1. plans the prompt in this node's pool: blocks it has already (pool or tiers) are not moved;
//   2. fetches the rest from the sender, in runs of at most what the receive staging holds, until
//      every block is held or a run brings none; each run's blocks are verified and published;
//   3. answers wanted / had / moved / held. Anything not moved is a miss the decode engine
//      computes, never wrong data.
// Layout conversion: when the sender's pools are in the other order (HND vs NHD; the hello's
// fingerprints equal ours but for the order: PeerSessions::OtherOrder), each bundle is verified as
// a bundle of the sender's geometry where it landed in receive staging, then copied from there
// into the reserved (hidden) block in our order (kernels/block_copy.h converts) before it is
// published (device pools: converted into a staging block, then copied to the device,
// OffloadEngine::WriteBlock). Everything else must be equal.
//
// Thread safety: both thread-safe; HandOff and Handle block (network, transfers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "node/peer_sessions.h"
#include "node/peer_table.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/remote_fetch.h"
#include "store/tiered_cache.h"

namespace kvmesh {

struct HandoffResult {
  std::int64_t wanted_blocks = 0;  // the prompt's reusable full blocks
  std::int64_t pinned_blocks = 0;  // of those, held (and pinned) by the sender
  std::int64_t had_blocks = 0;     // the decode node had them already
  std::int64_t moved_blocks = 0;   // moved, verified and published on the decode node
  std::int64_t held_blocks = 0;    // in the decode node's pool after the handoff
};

class HandoffSender {
 public:
  // All outlive the sender. `self_address`: this node's control address (sent along, so that a
  // decode node whose peer table does not list us can reach us).
  HandoffSender(TieredCache* cache, PeerSessions* sessions, std::string self_address)
      : cache_(cache), sessions_(sessions), self_address_(std::move(self_address)) {}

  Result<HandoffResult> HandOff(const std::string& to, std::span<const Token> prompt,
                                const SequenceOptions& options, std::chrono::milliseconds deadline);

 private:
  TieredCache* const cache_;
  PeerSessions* const sessions_;
  const std::string self_address_;
};

struct HandoffReceiverStats {
  std::int64_t handoffs = 0;
  std::int64_t moved_blocks = 0;
  std::int64_t had_blocks = 0;
  std::int64_t converted_blocks = 0;  // pool blocks converted HND <-> NHD
};

class HandoffReceiver {
 public:
  // All outlive the receiver; `views` and `codecs` as for RemoteFetcher.
  HandoffReceiver(TieredCache* cache, PeerSessions* sessions, PeerTable* peers,
                  std::vector<KvPoolView> views, std::vector<BundleCodec> codecs)
      : cache_(cache),
        sessions_(sessions),
        peers_(peers),
        views_(std::move(views)),
        codecs_(std::move(codecs)) {}

  // REQUIRES: a session of role peer (PeerService checks it).
  Status Handle(const SessionInfo& session, const rpc::HandoffRequest& in,
                rpc::HandoffResponse* out);
  [[nodiscard]] HandoffReceiverStats stats() const {
    return {handoffs_.load(), moved_.load(), had_.load(), converted_.load()};
  }

 private:
  // The sender's bundles (our geometry in the other order), and per pool a one-block view in that
  // order whose component bases DecodeConverted points into a received bundle.
  struct Conversion {
    std::vector<BundleCodec> codecs;
    std::vector<KvPoolView> in_bundle;
  };
  Result<Conversion> MakeConversion() const;
  // RemoteFetchOptions::decode of a converting handoff: verify the bundle where it landed, then
  // one converting copy of its payload into reserved block `block`.
  Status DecodeConverted(const Conversion& c, std::size_t pool, std::span<std::byte> bundle,
                         const ContentId& id, std::int64_t block) const;

  TieredCache* const cache_;
  PeerSessions* const sessions_;
  PeerTable* const peers_;
  const std::vector<KvPoolView> views_;
  const std::vector<BundleCodec> codecs_;
  std::atomic<std::int64_t> handoffs_{0}, moved_{0}, had_{0};
  mutable std::atomic<std::int64_t> converted_{0};
};

}  // namespace kvmesh
