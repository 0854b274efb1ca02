#include "node/remote_fetch.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "common/log.h"
#include "common/strings.h"
#include "node/arrival_decoder.h"
#include "node/peer_service.h"

namespace kvmesh {
namespace {

std::string Wire(const ContentId& id) {
  return {reinterpret_cast<const char*>(id.bytes.data()), ContentId::kBytes};
}

}  // namespace

Result<std::vector<std::vector<BlockHolder>>> AskPeersLocator::Locate(
    std::span<const ContentId> ids, std::chrono::milliseconds timeout) {
  std::vector<std::vector<BlockHolder>> holders(ids.size());
  if (ids.empty()) return holders;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const PeerInfo& peer : peers_->Snapshot()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;  // a partial answer: the peers not asked hold nothing here
    Result<std::shared_ptr<PeerLink>> link = sessions_->Link(peer.node_id);
    if (!link.ok() || sessions_->OtherOrder(peer.node_id)) continue;
    rpc::Request req;
    req.set_timeout_ms(static_cast<std::uint32_t>(left.count()));
    for (const ContentId& id : ids) req.mutable_have_blocks()->add_content_ids(Wire(id));
    Result<rpc::Response> r = (*link)->Call(std::move(req));
    if (!r.ok()) {
      KVMESH_LOG_WARN("have_blocks failed peer {} error {}", peer.node_id, r.status().ToString());
      if (r.status().code() == StatusCode::kPeerUnreachable) {
        sessions_->MarkFailed(peer.node_id, /*transfer_failed=*/false);
      }
      continue;
    }
    const auto held = std::clamp<std::int64_t>(r->have_blocks().held_blocks(), 0,
                                               static_cast<std::int64_t>(ids.size()));
    const std::int64_t in_pool = std::clamp<std::int64_t>(r->have_blocks().pool_blocks(), 0, held);
    for (std::int64_t i = 0; i < held; ++i) {
      holders[static_cast<std::size_t>(i)].push_back(
          {peer.node_id, i < in_pool ? HolderTier::kPool : HolderTier::kHost});
    }
  }
  for (auto& h : holders) {
    std::stable_sort(h.begin(), h.end(),
                     [](const BlockHolder& a, const BlockHolder& b) { return a.tier < b.tier; });
  }
  return holders;
}

RemoteFetcher::RemoteFetcher(RemoteFetchOptions options, TieredCache* cache, PeerSessions* sessions,
                             PrefixLocator* locator, std::vector<KvPoolView> views,
                             std::vector<BundleCodec> codecs)
    : options_(options),
      cache_(cache),
      sessions_(sessions),
      locator_(locator),
      views_(std::move(views)),
      codecs_(std::move(codecs)),
      in_place_(InPlace(options_, *sessions_, views_)) {}

bool RemoteFetcher::InPlace(const RemoteFetchOptions& options, const PeerSessions& sessions,
                            const std::vector<KvPoolView>& views) {
  if (options.decode) return false;
  for (const KvPoolView& v : views) {
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& l = v.layout.components[c];
      if (!l.present()) continue;
      const auto bytes = static_cast<std::uint64_t>(l.BytesPerBlock() * v.num_blocks);
      if (v.base[c] == nullptr || !sessions.PoolSlice(v.base[c], bytes)) return false;
    }
  }
  return true;
}

RemoteFetcher::Choice RemoteFetcher::ChooseHolder(
    const std::vector<std::vector<BlockHolder>>& holders) {
  Choice best;
  if (holders.empty()) return best;
  for (const BlockHolder& candidate : holders.front()) {
    std::int64_t run = 0;
    for (const auto& list : holders) {
      const bool has = std::any_of(list.begin(), list.end(), [&](const BlockHolder& h) {
        return h.node_id == candidate.node_id;
      });
      if (!has) break;
      ++run;
    }
    if (run > best.run) best = {candidate.node_id, run};
  }
  return best;
}

RemoteFetchResult RemoteFetcher::Fetch(std::span<const Token> prompt,
                                       const SequenceOptions& options) {
  const auto deadline = std::chrono::steady_clock::now() + options_.deadline;
  Result<RestorePlan> plan = cache_->PlanRestore(prompt, options);
  if (!plan.ok() || plan->num_candidates() == 0) return {};
  const auto candidates = [&] {
    return std::span<const ContentId>(plan->content_ids)
        .subspan(static_cast<std::size_t>(plan->pool_blocks));
  };
  const std::int64_t local = cache_->engine().CountHeld(candidates());
  if (local == plan->num_candidates()) return {};  // the local tiers have them all
  if (local > 0) {
    // The local tiers first (the remote run must hang from the pool's chain).
    Result<std::int64_t> started = cache_->Prefetch(prompt, options);
    if (started.ok()) cache_->WaitForPrefetches();
    plan = cache_->PlanRestore(prompt, options);
    if (!plan.ok() || plan->num_candidates() == 0) return {};
    if (cache_->engine().CountHeld(candidates().first(1)) > 0) return {};
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  Result<std::vector<std::vector<BlockHolder>>> holders = locator_->Locate(candidates(), left);
  if (!holders.ok()) return {};
  Choice choice = ChooseHolder(*holders);
  KVMESH_LOG_DEBUG("remote fetch located candidates {} holder {} run {}", plan->num_candidates(),
                   choice.node_id, choice.run);
  if (choice.run == 0) return {};
  const auto pools = static_cast<std::int64_t>(codecs_.size());
  choice.run = std::min<std::int64_t>(
      {choice.run, options_.max_blocks,
       static_cast<std::int64_t>(sessions_->receive_staging().slots()) / pools});
  fetches_.fetch_add(1);
  Result<RemoteFetchResult> r = FetchFrom(prompt, options, *plan, choice, deadline);
  if (!r.ok()) {
    failed_.fetch_add(1);
    KVMESH_LOG_WARN("remote fetch failed peer {} blocks {} error {}", choice.node_id, choice.run,
                    r.status().ToString());
    return {};
  }
  return std::move(r).value();
}

Result<RemoteFetchResult> RemoteFetcher::FetchFrom(std::span<const Token> prompt,
                                                   const SequenceOptions& options,
                                                   const RestorePlan& plan, const Choice& choice,
                                                   std::chrono::steady_clock::time_point deadline) {
  BlockManager& m = cache_->manager();
  KVMESH_ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, sessions_->Link(choice.node_id));
  // The tree may change between the plan and the reservation (kFailedPrecondition): the first
  // missing blocks stored meanwhile, by an admission of the same prefix, or the chain evicted.
  // Plan again: the holder's run still covers the blocks after those stored here. A chain evicted,
  // or nothing left to fetch, is no failure: nothing is fetched.
  constexpr int kMaxPlans = 4;
  Result<RestoreReservation> reservation = m.ReserveRestore(prompt, options, plan, choice.run);
  for (int attempt = 2; attempt <= kMaxPlans && !reservation.ok() &&
                        reservation.status().code() == StatusCode::kFailedPrecondition;
       ++attempt) {
    KVMESH_ASSIGN_OR_RETURN(const RestorePlan again, cache_->PlanRestore(prompt, options));
    const std::int64_t run = choice.run - (again.pool_blocks - plan.pool_blocks);
    if (again.pool_blocks < plan.pool_blocks || run <= 0) return RemoteFetchResult{};
    reservation = m.ReserveRestore(prompt, options, again, run);
  }
  if (!reservation.ok() && reservation.status().code() == StatusCode::kFailedPrecondition) {
    KVMESH_LOG_DEBUG("remote fetch skipped error {}", reservation.status().ToString());
    return RemoteFetchResult{};
  }
  KVMESH_ASSIGN_OR_RETURN(RestoreReservation reserved, std::move(reservation));
  if (reserved.empty()) return RemoteFetchResult{};
  const std::size_t pools = codecs_.size();
  const std::size_t n = static_cast<std::size_t>(reserved.count()) * pools;
  // Declared after the reservation: destroyed first, but only once the grant completed (below).
  KVMESH_ASSIGN_OR_RETURN(StagingLease lease, sessions_->receive_staging().Acquire(n, deadline));
  // The wire form (node/peer_service.h): each slot is granted range by range — its bundle's data
  // ranges — and its padding zeroed here, so that once every range arrived the slot holds the
  // whole bundle the holder sealed.
  // In place (in_place_), the component ranges land straight in the reserved blocks instead, and
  // only the header and checksum in the slot.
  std::vector<Slice> slices;
  std::size_t ranges = 0;  // per block
  for (const BundleCodec& c : codecs_) ranges += c.data_ranges().size();
  slices.reserve(static_cast<std::size_t>(reserved.count()) * ranges);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t p = i % pools;
    const std::int64_t block =
        reserved.block(static_cast<std::int64_t>(i / pools), static_cast<int>(p)).value;
    const BundleCodec& codec = codecs_[p];
    if (!in_place_) codec.ZeroPadding(lease.bytes(i));
    const Slice whole = lease.slice(i, static_cast<std::uint64_t>(codec.bundle_bytes()));
    for (const BundleRange& r : codec.data_ranges()) {
      const auto length = static_cast<std::uint64_t>(r.length);
      if (in_place_ && r.component >= 0) {
        const std::optional<Slice> into = sessions_->PoolSlice(
            views_[p].BlockBytes(static_cast<KvComponent>(r.component), block), length);
        if (!into) return Status::Internal("remote fetch: a reserved block outside the pools");
        slices.push_back(*into);
        continue;
      }
      slices.push_back({whole.region, whole.offset + static_cast<std::uint64_t>(r.offset), length});
    }
  }
  // Each block is verified and decoded into its reserved block as soon as its slices are whole,
  // while the rest of the run is on the wire (the holder sends block by block as it seals them).
  // Declared after the lease and the reservation: joined before either goes.
  ArrivalDecoder decoder(reserved.count(), ranges,
                         [&](std::int64_t i) { return DecodeBlock(reserved, lease, i); });
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  GrantRequest grant;
  grant.sender = link->id();
  grant.slices = slices;
  grant.deadline = SystemClock::Default()->Now() + left;
  grant.on_slice = [&decoder](std::uint32_t slice) { decoder.OnSlice(slice); };
  Result<TransferOp> granted = sessions_->engine().Grant(grant);
  if (!granted.ok()) {
    // The engine lost its connection to the holder (it closed it, say, to abort a send): the
    // next fetch says hello again and connects anew.
    if (granted.status().code() == StatusCode::kPeerUnreachable ||
        granted.status().code() == StatusCode::kNotFound) {
      sessions_->MarkFailed(choice.node_id, /*transfer_failed=*/true);
    }
    return granted.status().WithContext("fetch grant");
  }
  TransferOp op = std::move(granted).value();
  rpc::Request req;
  req.set_timeout_ms(static_cast<std::uint32_t>(std::max<std::int64_t>(left.count(), 1)));
  rpc::FetchBlocksRequest* f = req.mutable_fetch_blocks();
  f->set_transfer_id(op.id().value);
  for (std::int64_t i = 0; i < reserved.count(); ++i)
    f->add_content_ids(Wire(RemoteId(reserved, i)));
  for (const BundleCodec& c : codecs_) f->add_bundle_bytes(c.bundle_bytes());
  f->set_deadline_ms(static_cast<std::uint32_t>(std::max<std::int64_t>(left.count(), 1)));
  Result<rpc::Response> answer = link->Call(std::move(req));
  if (!answer.ok()) {
    // The holder refused, died or is too slow: stop accepting data (CancelGrant), then wait until
    // UCX no longer writes into the slots before they go back to the arena.
    if (sessions_->engine().CancelGrant(op.id()).ok()) {
      KVMESH_LOG_DEBUG("fetch grant cancelled transfer {}", op.id().value);
    }
    Status grant_status = op.Wait();
    if (answer.status().code() == StatusCode::kPeerUnreachable ||
        answer.status().code() == StatusCode::kTimedOut ||
        grant_status.code() == StatusCode::kPeerUnreachable) {
      sessions_->MarkFailed(choice.node_id, grant_status.code() == StatusCode::kPeerUnreachable);
    }
    return answer.status();  // the reservation is freed unpublished; the lease after the wait
  }
  Status st = op.Wait();
  const ArrivalDecoder::Outcome decoded = decoder.Finish();
  if (!st.ok()) {
    sessions_->MarkFailed(choice.node_id, st.code() == StatusCode::kPeerUnreachable);
    return st.WithContext("fetch grant");
  }
  std::int64_t bytes = 0;
  for (const Slice& s : slices) bytes += static_cast<std::int64_t>(s.length);
  bytes_.fetch_add(bytes);
  // The holder encodes the blocks it still holds, from the first; the slots after those are
  // zeros (a stale directory entry or an eviction since it was asked): misses, not blocks that
  // failed verification. The first failure below `held` ends the run (that block and the rest are
  // not published).
  const std::int64_t held =
      std::clamp<std::int64_t>(answer->fetch_blocks().sent_blocks(), 0, reserved.count());
  const std::int64_t ready = std::min(decoded.decoded, held);
  if (ready < held) {
    refused_.fetch_add(1);
    KVMESH_LOG_WARN("remote block refused index {} content_id {} error {}", ready,
                    reserved.content_id(ready).ToHex(), decoded.failure.ToString());
  }
  RemoteFetchResult out;
  out.ids.reserve(static_cast<std::size_t>(ready));
  for (std::int64_t i = 0; i < ready; ++i) out.ids.push_back(reserved.content_id(i));
  KVMESH_ASSIGN_OR_RETURN(PublishedRestore published,
                          m.PublishRestore(std::move(reserved), ready, /*keep_pinned=*/true));
  fetched_.fetch_add(published.published);
  out.fetched = published.published;
  out.pins = std::move(published.pins);
  KVMESH_LOG_DEBUG("remote fetch done peer {} blocks {} sent {} ready {}", choice.node_id,
                   n / pools, answer->fetch_blocks().sent_blocks(), ready);
  return out;
}

Status RemoteFetcher::DecodeBlock(const RestoreReservation& r, const StagingLease& lease,
                                  std::int64_t i) const {
  const std::size_t pools = codecs_.size();
  for (std::size_t p = 0; p < pools; ++p) {
    const std::size_t slot = static_cast<std::size_t>(i) * pools + p;
    const std::span<std::byte> bundle =
        lease.bytes(slot).first(static_cast<std::size_t>(codecs_[p].bundle_bytes()));
    const std::int64_t block = r.block(i, static_cast<int>(p)).value;
    // In place, or one pass (copied while checksummed, as the host tier restores): the
    // destination is a reserved block, hidden until PublishRestore, which publishes only the
    // verified prefix — a block whose check fails here, whatever it holds, is freed unseen.
    // Device pools (never in place: UCX cannot write them) are written through a staging block.
    const ContentId id = RemoteId(r, i);
    Status st = in_place_ ? codecs_[p].VerifyInPlace(bundle, id, views_[p], block)
                : options_.decode
                    ? options_.decode(p, bundle, id, block)
                    : cache_->engine().WriteBlock(
                          static_cast<int>(p), block, [&](const KvPoolView& view, std::int64_t b) {
                            return codecs_[p].DecodeOnePass(bundle, id, view, b);
                          });
    KVMESH_RETURN_IF_ERROR(st.WithContext(StrCat("pool ", p)));
  }
  return Status::Ok();
}

ContentId RemoteFetcher::RemoteId(const RestoreReservation& r, std::int64_t i) const {
  return options_.remote_id ? options_.remote_id(r.content_id(i)) : r.content_id(i);
}

RemoteFetchStats RemoteFetcher::stats() const {
  return {fetches_.load(), fetched_.load(), refused_.load(), failed_.load(), bytes_.load()};
}

}  // namespace kvmesh
