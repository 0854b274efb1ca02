// StreamReceiver: the decode node's side of streaming handoffs (node/handoff.h, docs/handoff.md
// "Streaming") — a stream's plan and reservation, its puller thread, publication and answer.
//
// Start (HandoffRequest with stream_id, from the prefill node's peer session):
//   1. the sender's pools must have our layer counts (pool_layers; else kFailedPrecondition);
//   2. plan the prompt in our pool; blocks a local tier holds are restored first (as remote fetch
//      does); the pool's blocks are `had` and never moved;
//   3. ReserveRestore the rest: hidden, private, pinned blocks in no tree; the reserved blocks are
//      verified against the sender's content ids (its namespace: ours, or ours in the other order);
//   4. answer at once (streaming true, moved 0), and start the stream's puller.
// The puller, until every layer of every reserved block verified, the deadline, a cancel or an
// error: waits for an announcement beyond what it holds; pulls exactly the new range of each pool
// (LayerRangeFetcher: verified before it is used, converted HND <-> NHD when the sender's order is
// the other one) — layer 0 alone first, then everything announced since the last pull (device
// pools too: each range goes through a staging block into the same layers of the device block).
// Then: all verified → PublishRestore (the blocks enter the tree); anything else → the
// reservation is freed unpublished. Either way it answers the sender (HandoffStreamAnswer on its
// own link: wanted, had, moved, held, and why nothing moved) — best effort: the sender's pins go
// at its deadline anyway.
//
// Announce (HandoffStreamLayers): layers_done per pool, never below what was announced;
// cancel ends the stream.
//
// State of a stream, guarded by the receiver's lock:
//   | state     | reservation     | leaves when                                         |
//   | pulling   | held (hidden)   | every layer verified → published; deadline, cancel, |
//   |           |                 | refused range, peer gone → freed unpublished        |
//   | done      | none            | reaped by the next Start, or the destructor          |
//
// Thread safety: thread-safe. Start and Announce return without waiting for data. The destructor
// cancels every stream and joins its puller (bounded by the link's request timeout).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "node/peer_sessions.h"
#include "node/peer_table.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "store/layer_range_codec.h"
#include "store/tiered_cache.h"

namespace kvmesh {

struct StreamReceiverStats {
  std::int64_t streams = 0;    // started (a puller ran)
  std::int64_t completed = 0;  // every range verified, blocks published
  std::int64_t failed = 0;     // freed unpublished: deadline, refused range, cancel, peer gone
  std::int64_t ranges = 0;     // layer ranges pulled (each: every reserved block, every pool)
  std::int64_t refused = 0;    // streams ended by a range that failed verification
  std::int64_t moved_blocks = 0;
  std::int64_t converted = 0;      // (block, pool) ranges converted HND <-> NHD
  double first_layer_seconds = 0;  // summed: start until layer 0 of every block verified
  double seconds = 0;              // summed: start until the answer
};

// Whole milliseconds from now until `deadline` (negative once it passed): a handoff's time left.
inline std::chrono::milliseconds TimeLeft(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               std::chrono::steady_clock::now());
}

// (handoff id, layers verified per pool) after each range of every block verified.
using StreamObserver =
    std::function<void(std::uint64_t handoff_id, std::span<const std::int32_t> layers)>;

// The content ids of the prompt's first `n` blocks in the key namespace `ns` (a sender's whose
// layout order is the other one).
std::vector<ContentId> ContentIdsIn(const ContentId& ns, std::span<const Token> prompt,
                                    const SequenceOptions& options, std::int32_t tokens_per_block,
                                    std::size_t n);

class StreamReceiver {
 public:
  // All outlive the receiver; `views`: the pools.
  StreamReceiver(TieredCache* cache, PeerSessions* sessions, std::vector<KvPoolView> views);
  ~StreamReceiver();
  StreamReceiver(const StreamReceiver&) = delete;
  StreamReceiver& operator=(const StreamReceiver&) = delete;

  // A stream's start from peer `from` (its session's client name), after HandoffReceiver checked
  // the common fields. kInvalidArgument: a stream id in use; kResourceExhausted: too many streams.
  Status Start(const std::string& from, std::span<const Token> prompt,
               const SequenceOptions& options, std::chrono::steady_clock::time_point deadline,
               const rpc::HandoffRequest& in, rpc::HandoffResponse* out) KVMESH_EXCLUDES(mu_);
  // kNotFound: no such stream of `from` (it ended: its answer is on the way).
  Status Announce(const std::string& from, const rpc::HandoffStreamLayers& in) KVMESH_EXCLUDES(mu_);
  void SetObserver(StreamObserver observer) KVMESH_EXCLUDES(mu_);
  [[nodiscard]] StreamReceiverStats stats() const KVMESH_EXCLUDES(mu_);
  // Streams whose puller has not ended.
  [[nodiscard]] std::int64_t active() const KVMESH_EXCLUDES(mu_);

 private:
  struct Stream;
  void Run(Stream* s);
  Status Pull(Stream& s);
  void Answer(Stream& s, std::int64_t moved, const Status& why);
  void Reap() KVMESH_REQUIRES(mu_);

  TieredCache* const cache_;
  PeerSessions* const sessions_;
  const std::vector<KvPoolView> views_;
  std::vector<LayerRangeCodec> ours_, other_order_;  // per pool
  std::vector<std::int32_t> layers_;                 // per pool

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<std::string, std::uint64_t>, std::unique_ptr<Stream>> streams_
      KVMESH_GUARDED_BY(mu_);
  bool stop_ KVMESH_GUARDED_BY(mu_) = false;
  StreamObserver observer_ KVMESH_GUARDED_BY(mu_);
  StreamReceiverStats stats_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
