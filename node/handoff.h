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
// fingerprints equal ours but for the order: PeerSessions::OtherOrder), each bundle is decoded as
// a bundle of the sender's geometry where it landed in receive staging, in one pass: its header
// checked first, then each (layer, K/V) range checksummed and at once copied, converted, into the
// reserved (hidden) block in our order (BundleCodec::DecodeOnePassConverting); a bundle whose
// checksum fails at the end leaves that block unpublished (device pools: decoded into a staging
// block, copied to the device only when it passed, OffloadEngine::WriteBlock). Everything else
// must be equal.
//
// Streaming, layer by layer (docs/handoff.md "Streaming"): a prefill engine's forward pass writes
// all prompt tokens of layer 0, then of layer 1, ...; a streaming handoff moves each layer range
// of every block as soon as the engine announces it written, so that when prefill ends only the
// last layers are still on the wire. Still a pull:
//   sender (prefill node)                               receiver (decode node)
//   HandOffStream(to, prompt, request): pins the engine's running request's blocks
//     (PinSequenceBlocks; its block tables name them: none is in the prefix tree yet)
//     Handoff{stream_id, pool_layers} --------------->  StreamReceiver::Start: plan (had), reserve
//     <---------------- {streaming, had, moved 0}       hidden blocks for the rest, a puller
//   LayersReady(id, layers per pool)  (the engine)
//     the notifier thread forwards
//     Handoff{layers: id, layers_done} -------------->  the puller pulls exactly the new range of
//   ServeLayers <------- FetchBlocks{handoff_id}        every reserved block (node/
//     seals and sends each range ------------------>    layer_range_fetch.h), verified first
//     ...                                               last layer verified: PublishRestore, then
//   StreamAnswered <------- Handoff{answer}             the answer on its own link
//     the pins go; AwaitStream returns the answer
// Pins: the sender's stay until the answer, a failure (the link, a cancel) or the stream's
// deadline, on every path; a serving call shares them while UCX reads the blocks. On the decode
// node anything missing, late, corrupt or from a dead peer frees the reservation unpublished (a
// miss the decode engine computes, never wrong data). Device pools on the decode node take whole
// blocks only (OffloadEngine::WriteBlock): their stream pulls [0, layers) once the last layer was
// announced. Streams of an engine connection that closes before announcing every layer are
// cancelled (CancelStreams; the decode node is told).
//
// Thread safety: both thread-safe; HandOff, HandOffStream, AwaitStream and Handle block (network,
// transfers). The sender runs one notifier thread (forwards announcements, expires deadlines), the
// receiver one puller thread per stream; both are joined by the destructors.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "node/handoff_stream.h"
#include "node/layer_range_service.h"
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
  std::uint64_t handoff_id = 0;    // streaming: the stream (0: none, nothing to stream)
  bool streaming = false;          // streaming: the decode node pulls (its answer comes later)
};

struct HandoffSenderStats {
  std::int64_t streams = 0;           // streams the decode node took
  std::int64_t streams_answered = 0;  // its answer came
  std::int64_t streams_failed = 0;    // ended without an answer: start refused, deadline, link,
                                      // cancel
  std::int64_t ranges_served = 0;     // (block, pool) layer ranges sent
  std::int64_t bytes_served = 0;
};

class HandoffSender {
 public:
  // All outlive the sender. `self_address`: this node's control address (sent along, so that a
  // decode node whose peer table does not list us can reach us). `source`: where streamed layer
  // ranges come from (null: this node's pools; tests substitute one that lies).
  HandoffSender(TieredCache* cache, PeerSessions* sessions, std::string self_address,
                LayerRangeSource* source = nullptr);
  ~HandoffSender();  // fails every stream (pins released), joins the notifier
  HandoffSender(const HandoffSender&) = delete;
  HandoffSender& operator=(const HandoffSender&) = delete;

  Result<HandoffResult> HandOff(const std::string& to, std::span<const Token> prompt,
                                const SequenceOptions& options, std::chrono::milliseconds deadline);

  // ---- streaming (node/handoff_stream_sender.cc)
  // Starts streaming the blocks of running sequence `request` (this node's block manager; its
  // prompt is `prompt`, planned with `options`) to `to`: pins them, asks the decode node to take
  // them, returns its first answer (handoff_id; moved 0; streaming false when it needs nothing).
  // `deadline` covers the whole stream, up to the answer. `owner`: who may cancel it
  // (CancelStreams; the engine connection's session id). kFailedPrecondition: another geometry;
  // the link's errors; kNotFound: no such sequence.
  Result<HandoffResult> HandOffStream(const std::string& to, std::span<const Token> prompt,
                                      const SequenceOptions& options, RequestId request,
                                      std::chrono::milliseconds deadline, std::uint64_t owner = 0);
  // Layers [0, layers_done[p]) of pool p of every block of stream `handoff_id` hold their final
  // K/V: forwarded to the decode node (asynchronously: returns at once). kNotFound: no such
  // stream (finished and collected, or expired); kInvalidArgument: a count per pool is needed,
  // within the pool's layers and not below one announced before; a failed stream's error.
  // `owner` (nonzero): only a stream started with that owner (another's is kNotFound).
  Status LayersReady(std::uint64_t handoff_id, std::span<const std::int32_t> layers_done,
                     std::uint64_t owner = 0);
  // Waits for the decode node's answer of a stream (at most until its deadline) and forgets the
  // stream. kTimedOut / the failure when no answer came; `owner` as for LayersReady.
  Result<HandoffResult> AwaitStream(std::uint64_t handoff_id, std::uint64_t owner = 0);
  // Fails the streams of `owner` that have not announced every layer (the decode node is told).
  void CancelStreams(std::uint64_t owner);
  // Per pool, the layers of its blocks (what LayersReady counts in).
  [[nodiscard]] std::vector<std::int32_t> PoolLayers() const;

  // The decode node's requests about a stream, on its peer session (EngineService routes them
  // here; Serves says which): FetchBlocks with a handoff id (ServeLayerRanges) and Handoff with
  // an answer. kPermissionDenied for a session that is no peer; kNotFound for a stream that is
  // not this peer's.
  static bool Serves(const rpc::Request& request);
  Status HandlePeer(const SessionInfo& session, const rpc::Request& request, rpc::Response* out);
  [[nodiscard]] HandoffSenderStats stream_stats() const;

 private:
  struct Stream;
  struct Forward;
  Status ServeLayers(const SessionInfo& session, const rpc::FetchBlocksRequest& in,
                     rpc::FetchBlocksResponse* out);
  Status StreamAnswered(const SessionInfo& session, const rpc::HandoffStreamAnswer& in);
  // Ends an active stream: `status` (OK: answered); its pins move to *released (dropped by the
  // caller outside the lock).
  void EndLocked(Stream& s, Status status, std::vector<std::shared_ptr<PinnedBlocks>>* released)
      KVMESH_REQUIRES(mu_);
  void Notify();  // the notifier thread's loop
  void Send(const Forward& f);

  TieredCache* const cache_;
  PeerSessions* const sessions_;
  const std::string self_address_;
  std::vector<LayerRangeCodec> codecs_;  // per pool
  std::unique_ptr<LayerRangeSource> own_source_;
  LayerRangeSource* source_;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Stream>> streams_ KVMESH_GUARDED_BY(mu_);
  bool stop_ KVMESH_GUARDED_BY(mu_) = false;
  HandoffSenderStats stats_ KVMESH_GUARDED_BY(mu_);
  std::thread notifier_;  // started with the first stream
};

struct HandoffReceiverStats {
  std::int64_t handoffs = 0;
  std::int64_t moved_blocks = 0;
  std::int64_t had_blocks = 0;
  std::int64_t converted_blocks = 0;  // pool blocks converted HND <-> NHD
  StreamReceiverStats streams;        // streaming handoffs
};

class HandoffReceiver {
 public:
  // All outlive the receiver; `views` and `codecs` as for RemoteFetcher.
  HandoffReceiver(TieredCache* cache, PeerSessions* sessions, PeerTable* peers,
                  std::vector<KvPoolView> views, std::vector<BundleCodec> codecs);

  // REQUIRES: a session of role peer (PeerService checks it). A stream's start and its
  // announcements go to the StreamReceiver.
  Status Handle(const SessionInfo& session, const rpc::HandoffRequest& in,
                rpc::HandoffResponse* out);
  [[nodiscard]] HandoffReceiverStats stats() const {
    return {handoffs_.load(), moved_.load(), had_.load(), converted_.load(), streams_->stats()};
  }
  // Called on a stream's puller thread after each layer range of every block verified, with the
  // layers verified so far per pool (benchmarks and tests: when layer 0 became usable).
  void SetStreamObserver(StreamObserver observer) { streams_->SetObserver(std::move(observer)); }

 private:
  // The codecs of the sender's bundles (our geometry in the other order), per pool.
  struct Conversion {
    std::vector<BundleCodec> codecs;
  };
  Result<Conversion> MakeConversion() const;
  // RemoteFetchOptions::decode of a converting handoff: the bundle where it landed decoded in one
  // pass, converted, into reserved block `block`.
  Status DecodeConverted(const Conversion& c, std::size_t pool, std::span<std::byte> bundle,
                         const ContentId& id, std::int64_t block) const;

  TieredCache* const cache_;
  PeerSessions* const sessions_;
  PeerTable* const peers_;
  const std::vector<KvPoolView> views_;
  const std::vector<BundleCodec> codecs_;
  std::atomic<std::int64_t> handoffs_{0}, moved_{0}, had_{0};
  mutable std::atomic<std::int64_t> converted_{0};
  std::unique_ptr<StreamReceiver> streams_;  // last: its pullers use the members above
};

}  // namespace kvmesh
