// Remote prefix fetch: the requester's side of Admit's last step — blocks of a prompt that neither
// the pool nor the local tiers hold are fetched from a peer that holds them, verified, and
// published into the pool before the sequence is admitted; anything slow, gone or wrong is a miss
// (the engine computes those blocks), never wrong data.
//
// AskPeersLocator (a PrefixLocator): asks every member of the PeerTable whose pools are in our
// layout order (PeerSessions::OtherOrder: no conversion here), over its peer link, HaveBlocks(ids)
// — a real answer from each holder, not a directory. It stands in for the cluster prefix directory
// until that exists; it costs one round trip per peer per admission.
//
// RemoteFetcher::Fetch(prompt, options), called by EngineService::Admit before TieredCache::
// AddSequence:
//   1. PlanRestore: the prompt's reusable full blocks and how many the pool holds. If the local
//      tiers hold some of the rest, they are restored first (TieredCache::Prefetch, waited for),
//      and the plan is made again;
//   2. Locate the remaining blocks; pick the holder of the longest consecutive run from the first
//      missing block (at most max_blocks and what the receive staging holds);
//   3. ReserveRestore: destination blocks in every pool, private, pinned, hidden (in no tree);
//   4. Grant receive-staging slots (blocks × pools, each exactly our bundle size) to the holder,
//      and ask it FetchBlocks(transfer id, ids, our bundle sizes, deadline) over its link; wait
//      for the grant (bounded by the deadline: the engine completes it only once UCX no longer
//      writes into the slots);
//   5. verify each bundle against its content id and our pool's geometry (BundleCodec::
//      DecodeOnePass: fingerprint, shape and content id before any byte is copied, the checksum
//      while it is copied into the reserved block) — block by block as the slots arrive
//      (GrantRequest::on_slice), on a decoder thread of the fetch, while the holder is still
//      encoding and sending the next blocks; the first failure ends the run (that block is not
//      published);
//   6. PublishRestore(ready, keep_pinned): the verified blocks enter the tree, pinned; the rest of
//      the reservation is freed. The returned pins are held by the caller across AddSequence.
// Where the bytes land: a bundle travels range by range (node/peer_service.h: header, each
// component, checksum). In place — the node's pools registered with the engine (PeerSessions::
// pool_memory) and no conversion — the component ranges are granted straight into the hidden
// reserved blocks and the header and checksum into a receive-staging slot; each block is then
// verified where it lies (BundleCodec::VerifyInPlace: the header checked completely, the checksum
// over the header, the block and zero padding), no byte copied. Otherwise every range lands in the
// slot and the one-pass decode (or options.decode) copies it into the reserved block — for device
// pools (never in place: UCX cannot write them) through a staging block (OffloadEngine::
// WriteBlock). Either way
// UCX writes only into memory granted for this transfer to this holder — reserved blocks that no
// tree, block table or engine sees — until the grant completed (the engine completes a grant only
// once UCX no longer writes into it, cancelled or not; the reservation and the lease outlive it),
// and only the blocks that verified are published; one that failed, whatever it holds, is freed
// unseen. A failed or
// timed-out transfer marks the link failed (the next fetch reconnects). The tenant salt is part of
// the content ids, computed here from the requesting engine's options.
//
// Thread safety: thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "node/peer_sessions.h"
#include "node/prefix_locator.h"
#include "store/tiered_cache.h"

namespace kvmesh {

class AskPeersLocator final : public PrefixLocator {
 public:
  // Both outlive the locator.
  AskPeersLocator(const PeerTable* peers, PeerSessions* sessions)
      : peers_(peers), sessions_(sessions) {}
  Result<std::vector<std::vector<BlockHolder>>> Locate(std::span<const ContentId> ids,
                                                       std::chrono::milliseconds timeout) override;

 private:
  const PeerTable* const peers_;
  PeerSessions* const sessions_;
};

struct RemoteFetchOptions {
  std::chrono::milliseconds deadline{2000};  // of one fetch, from the plan to the last byte
  std::int32_t max_blocks = 1024;            // per fetch
  // Verifies pool `pool`'s bundle against `id` and the holder's geometry and decodes it into
  // reserved block `block` (hidden, in no tree) before it is published; an error refuses the
  // block. Empty: the pool's codec decodes it in one pass (BundleCodec::DecodeOnePass). The
  // handoff's layout conversion sets it (node/handoff.h). Runs on the fetch's decoder thread, one
  // block at a time.
  // `bundle` is the receive slot itself (whole, no longer written by UCX): it may be read in place.
  std::function<Status(std::size_t pool, std::span<std::byte> bundle, const ContentId& id,
                       std::int64_t block)>
      decode;
  // The holder's content id of our block `local` (asked for and verified against; the block is
  // published under `local`): the handoff from a node in the other order, whose key namespace
  // differs. Empty: the same id.
  std::function<ContentId(const ContentId& local)> remote_id;
};

struct RemoteFetchResult {
  PinnedBlocks pins;           // the fetched chain, pinned until the caller admitted
  std::int64_t fetched = 0;    // blocks published from the peer
  std::vector<ContentId> ids;  // the content ids of the blocks that arrived verified
};

struct RemoteFetchStats {
  std::int64_t fetches = 0;         // fetches started (a holder was asked)
  std::int64_t fetched_blocks = 0;  // verified and published
  std::int64_t refused_blocks = 0;  // arrived but failed verification (corrupt, foreign)
  std::int64_t failed_fetches = 0;  // transfer failed: timeout, peer gone, refused
  std::int64_t fetched_bytes = 0;   // bundle bytes received
};

class RemoteFetcher {
 public:
  // All outlive the fetcher; `views` are the pools' memory, `codecs` the holder's bundle codecs
  // (the pools' own, unless options.decode converts from another layout).
  RemoteFetcher(RemoteFetchOptions options, TieredCache* cache, PeerSessions* sessions,
                PrefixLocator* locator, std::vector<KvPoolView> views,
                std::vector<BundleCodec> codecs);

  // Never fails the admission: errors are logged and counted, and the result is then empty.
  RemoteFetchResult Fetch(std::span<const Token> prompt, const SequenceOptions& options);
  [[nodiscard]] RemoteFetchStats stats() const;

 private:
  struct Choice {
    std::string node_id;
    std::int64_t run = 0;
  };
  static Choice ChooseHolder(const std::vector<std::vector<BlockHolder>>& holders);
  Result<RemoteFetchResult> FetchFrom(std::span<const Token> prompt, const SequenceOptions& options,
                                      const RestorePlan& plan, const Choice& choice,
                                      std::chrono::steady_clock::time_point deadline);
  // Verifies block i of the run in every pool's slot and decodes it into its reserved block
  // (options_.decode when set). Runs on the run's decoder thread.
  Status DecodeBlock(const RestoreReservation& r, const StagingLease& lease, std::int64_t i) const;
  [[nodiscard]] ContentId RemoteId(const RestoreReservation& r, std::int64_t i) const;

  const RemoteFetchOptions options_;
  TieredCache* const cache_;
  PeerSessions* const sessions_;
  PrefixLocator* const locator_;
  // Whether blocks are received in place: no options_.decode and every pool's memory registered
  // with the engine (PeerSessions::PoolSlice).
  static bool InPlace(const RemoteFetchOptions& options, const PeerSessions& sessions,
                      const std::vector<KvPoolView>& views);

  const std::vector<KvPoolView> views_;
  const std::vector<BundleCodec> codecs_;
  const bool in_place_;
  std::atomic<std::int64_t> fetches_{0}, fetched_{0}, refused_{0}, failed_{0}, bytes_{0};
};

}  // namespace kvmesh
