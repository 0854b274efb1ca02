#include "node/layer_range_fetch.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/strings.h"
#include "kernels/block_copy.h"
#include "node/arrival_decoder.h"
#include "node/layer_range_service.h"

namespace kvmesh {
namespace {

constexpr std::int64_t kMaxRunBlocks = 1024;  // PeerServiceOptions::max_fetch_blocks

bool InPlace(const LayerRangeFetchOptions& o) {
  return !o.convert && PoolsRegistered(*o.sessions, *o.engine);
}

std::chrono::milliseconds Left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               std::chrono::steady_clock::now());
}

}  // namespace

LayerRangeFetcher::LayerRangeFetcher(LayerRangeFetchOptions options)
    : options_(std::move(options)), in_place_(InPlace(options_)) {}

Status LayerRangeFetcher::Fetch(PeerLink& link, std::uint64_t handoff_id,
                                const LayerRangeTarget& target, std::span<const LayerSpan> ranges,
                                std::chrono::steady_clock::time_point deadline) {
  const std::size_t pools = options_.theirs.size();
  if (ranges.size() != pools) return Status::Internal("layer range fetch: a range per pool");
  std::vector<std::int64_t> whole(pools, 0);
  bool any = false;
  for (std::size_t p = 0; p < pools; ++p) {
    if (ranges[p].empty()) continue;
    KVMESH_RETURN_IF_ERROR(options_.theirs[p].CheckRange(ranges[p]));
    whole[p] = options_.theirs[p].Bytes(ranges[p]);
    any = true;
  }
  const std::int64_t count = target.reservation->count();
  if (!any || count == 0) return Status::Ok();
  StagingArena& staging = options_.sessions->receive_staging();
  for (std::int64_t first = 0; first < count;) {
    // Sized as if every range travelled whole, on both sides (see the header).
    const std::int64_t run = std::min(BlocksThatFit(whole, std::min(count - first, kMaxRunBlocks),
                                                    staging.slot_bytes(), staging.slots()),
                                      kMaxRunBlocks);
    if (run == 0) return Status::Internal("layer range fetch: a range larger than a slot");
    KVMESH_RETURN_IF_ERROR(FetchRun(link, handoff_id, target, ranges, first, run, deadline));
    first += run;
  }
  return Status::Ok();
}

Status LayerRangeFetcher::FetchRun(PeerLink& link, std::uint64_t handoff_id,
                                   const LayerRangeTarget& target,
                                   std::span<const LayerSpan> ranges, std::int64_t first,
                                   std::int64_t count,
                                   std::chrono::steady_clock::time_point deadline) {
  const std::size_t pools = options_.theirs.size();
  std::vector<std::int64_t> piece_bytes(pools, 0);  // in our staging
  std::vector<LayerRangeParts> parts(pools);
  std::size_t per_block = 0;  // slices
  for (std::size_t p = 0; p < pools; ++p) {
    if (ranges[p].empty()) continue;
    parts[p] = options_.theirs[p].Parts(ranges[p]);
    piece_bytes[p] = in_place_ ? kLayerRangeSealBytes : parts[p].bytes();
    per_block += static_cast<std::size_t>(parts[p].count);
  }
  StagingArena& staging = options_.sessions->receive_staging();
  std::uint32_t slots = 0;
  const std::vector<StagingPlace> places =
      PackPieces(piece_bytes, count, staging.slot_bytes(), &slots);
  // Declared after the caller's reservation: released first, but only once the grant completed.
  KVMESH_ASSIGN_OR_RETURN(StagingLease lease, staging.Acquire(slots, deadline));
  std::vector<Slice> slices;
  slices.reserve(static_cast<std::size_t>(count) * per_block);
  std::vector<std::span<std::byte>> pieces;  // per (block, pool with a range): its slot area
  pieces.reserve(places.size());
  std::size_t k = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    for (std::size_t p = 0; p < pools; ++p) {
      if (piece_bytes[p] == 0) continue;
      const StagingPlace at = places[k++];
      const std::span<std::byte> piece =
          lease.bytes(at.slot).subspan(at.offset, static_cast<std::size_t>(piece_bytes[p]));
      pieces.push_back(piece);
      const Slice slot = lease.slice(at.slot, 0);
      const auto in_slot = [&](std::int64_t offset, std::int64_t length) {
        return Slice{slot.region, slot.offset + at.offset + static_cast<std::uint64_t>(offset),
                     static_cast<std::uint64_t>(length)};
      };
      if (!in_place_) {
        options_.theirs[p].ZeroPadding(piece, ranges[p]);
        for (const BundleRange& part : parts[p].all()) {
          slices.push_back(in_slot(part.offset, part.length));
        }
        continue;
      }
      const std::int64_t block = target.reservation->block(first + i, static_cast<int>(p)).value;
      const KvPoolView range = options_.ours[p].BlockView(options_.views[p], block, ranges[p]);
      for (const BundleRange& part : parts[p].all()) {
        if (part.component < 0) {
          slices.push_back(part.offset == 0
                               ? in_slot(0, kLayerRangeHeaderBytes)
                               : in_slot(kLayerRangeHeaderBytes, kBundleChecksumBytes));
          continue;
        }
        const std::optional<Slice> into = options_.sessions->PoolSlice(
            range.base[part.component], static_cast<std::uint64_t>(part.length));
        if (!into) return Status::Internal("layer range fetch: a reserved block outside the pools");
        slices.push_back(*into);
      }
    }
  }
  std::size_t with_range = 0;
  for (std::size_t p = 0; p < pools; ++p) with_range += piece_bytes[p] > 0 ? 1 : 0;
  // Declared after the lease: joined before it goes.
  ArrivalDecoder decoder(count, per_block, [&](std::int64_t i) -> Status {
    std::size_t piece = static_cast<std::size_t>(i) * with_range;
    for (std::size_t p = 0; p < pools; ++p) {
      if (piece_bytes[p] == 0) continue;
      KVMESH_RETURN_IF_ERROR(DecodeRange(target, first + i, p, ranges[p], pieces[piece++])
                                 .WithContext(StrCat("pool ", p)));
    }
    return Status::Ok();
  });
  const std::chrono::milliseconds left = Left(deadline);
  if (left.count() <= 0) return Status::TimedOut("layer range fetch: deadline passed");
  GrantRequest grant;
  grant.sender = link.id();
  grant.slices = slices;
  grant.deadline = SystemClock::Default()->Now() + left;
  grant.on_slice = [&decoder](std::uint32_t slice) { decoder.OnSlice(slice); };
  Result<TransferOp> granted = options_.sessions->engine().Grant(grant);
  if (!granted.ok()) {
    // The engine lost its connection to the sender: the next pull connects anew.
    if (granted.status().code() == StatusCode::kPeerUnreachable ||
        granted.status().code() == StatusCode::kNotFound) {
      options_.sessions->MarkFailed(link.node_id(), /*transfer_failed=*/true);
    }
    return granted.status().WithContext("layer range grant");
  }
  TransferOp op = std::move(granted).value();
  rpc::Request req;
  req.set_timeout_ms(static_cast<std::uint32_t>(std::max<std::int64_t>(left.count(), 1)));
  rpc::FetchBlocksRequest* f = req.mutable_fetch_blocks();
  f->set_transfer_id(op.id().value);
  f->set_handoff_id(handoff_id);
  f->set_first_block(target.first_block + first);
  f->set_blocks(static_cast<std::int32_t>(count));
  for (std::size_t p = 0; p < pools; ++p) {
    f->add_layer_begin(ranges[p].begin);
    f->add_layer_end(ranges[p].end);
    f->add_bundle_bytes(ranges[p].empty() ? 0 : parts[p].bytes());
  }
  f->set_deadline_ms(static_cast<std::uint32_t>(std::max<std::int64_t>(left.count(), 1)));
  Result<rpc::Response> answer = link.Call(std::move(req));
  if (!answer.ok()) {
    // Stop accepting data, then wait until UCX no longer writes into the slots or the reserved
    // blocks (the decoder and the lease go after that).
    static_cast<void>(options_.sessions->engine().CancelGrant(op.id()));
    Status grant_status = op.Wait();
    if (answer.status().code() == StatusCode::kPeerUnreachable ||
        answer.status().code() == StatusCode::kTimedOut ||
        grant_status.code() == StatusCode::kPeerUnreachable) {
      options_.sessions->MarkFailed(link.node_id(),
                                    grant_status.code() == StatusCode::kPeerUnreachable);
    }
    return answer.status().WithContext("fetch layer ranges");
  }
  Status st = op.Wait();
  const ArrivalDecoder::Outcome decoded = decoder.Finish();
  ++stats_.runs;
  if (!st.ok()) {
    options_.sessions->MarkFailed(link.node_id(), st.code() == StatusCode::kPeerUnreachable);
    return st.WithContext("layer range grant");
  }
  for (const Slice& s : slices) stats_.bytes += static_cast<std::int64_t>(s.length);
  const std::int64_t sent =
      std::clamp<std::int64_t>(answer->fetch_blocks().sent_blocks(), 0, count);
  if (decoded.decoded < count) {
    return decoded.failure.ok() ? Status::Corruption("layer range fetch: a range did not verify")
                                : decoded.failure;
  }
  if (sent < count) {
    return Status::NotFound(
        StrCat("layer range fetch: the sender sent ", sent, " of ", count, " blocks"));
  }
  return Status::Ok();
}

Status LayerRangeFetcher::DecodeRange(const LayerRangeTarget& target, std::int64_t i,
                                      std::size_t pool, LayerSpan range,
                                      std::span<std::byte> piece) {
  const LayerRangeCodec& theirs = options_.theirs[pool];
  const LayerRangeCodec& ours = options_.ours[pool];
  const std::int64_t block = target.reservation->block(i, static_cast<int>(pool)).value;
  const ContentId& id = target.ids[static_cast<std::size_t>(i)];
  if (in_place_) {
    // The destination is a reserved block, hidden until published; a range that fails here,
    // whatever it holds, is never published.
    KVMESH_RETURN_IF_ERROR(theirs.VerifyInPlace(piece, id, range, options_.views[pool], block));
    ++stats_.ranges_verified;
    return Status::Ok();
  }
  // Verified where it landed (UCX no longer writes the slot), then one copy — converting the
  // order when the sender's is the other one — into the block's layers.
  KVMESH_RETURN_IF_ERROR(theirs.Verify(piece, id, range));
  const KvPoolView src = theirs.PayloadView(piece, range);
  const auto copy = [&](const KvPoolView& dst_pool, std::int64_t b) {
    return cpu::CopyBlock(src, 0, ours.BlockView(dst_pool, b, range), 0);
  };
  if (options_.engine->device_pools()) {
    // The range's layers through a staging block to the device (the block's other layers are
    // not written: earlier ranges are there already, later ones come).
    KVMESH_RETURN_IF_ERROR(options_.engine->WriteBlock(
        static_cast<int>(pool), block, copy,
        [&](const KvPoolView& v, std::int64_t b) { return ours.BlockView(v, b, range); }));
  } else {
    KVMESH_RETURN_IF_ERROR(copy(options_.views[pool], block));
  }
  ++stats_.ranges_verified;
  if (options_.convert) ++stats_.converted;
  return Status::Ok();
}

}  // namespace kvmesh
