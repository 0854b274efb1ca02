#include "node/layer_range_service.h"

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

constexpr std::uint64_t kPieceAlignment = 64;

std::uint64_t AlignUp(std::uint64_t x) {
  return (x + kPieceAlignment - 1) / kPieceAlignment * kPieceAlignment;
}

}  // namespace

Status PoolLayerRangeSource::EncodeSeal(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                                        std::span<std::byte> seal) {
  const LayerRangeBlock& b = q.blocks[i];
  return codecs_[pool].EncodeSeal(engine_->pools()[pool], b.blocks[pool], b.id, q.ranges[pool],
                                  seal);
}

Status PoolLayerRangeSource::Encode(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                                    std::span<std::byte> out) {
  const LayerRangeBlock& b = q.blocks[i];
  // Device pools: the whole block is read out through staging (the engine may be writing later
  // layers of it meanwhile: only the announced layers of the copy are used).
  KVMESH_ASSIGN_OR_RETURN(HostBlock staged,
                          engine_->ReadBlock(static_cast<int>(pool), b.blocks[pool]));
  return codecs_[pool].Encode(staged.view(), staged.block(), b.id, q.ranges[pool], out);
}

std::vector<StagingPlace> PackPieces(std::span<const std::int64_t> piece_bytes, std::int64_t blocks,
                                     std::uint64_t slot_bytes, std::uint32_t* slots) {
  std::vector<StagingPlace> out;
  StagingPlace at;
  bool any = false;
  for (std::int64_t i = 0; i < blocks; ++i) {
    for (const std::int64_t bytes : piece_bytes) {
      if (bytes <= 0) continue;
      const auto n = static_cast<std::uint64_t>(bytes);
      KVMESH_CHECK_LE(n, slot_bytes);
      if (at.offset + n > slot_bytes) at = {at.slot + 1, 0};
      out.push_back(at);
      at.offset = AlignUp(at.offset + n);
      any = true;
    }
  }
  *slots = any ? at.slot + 1 : 0;
  return out;
}

std::int64_t BlocksThatFit(std::span<const std::int64_t> piece_bytes, std::int64_t blocks,
                           std::uint64_t slot_bytes, std::uint32_t slots) {
  StagingPlace at;
  for (std::int64_t i = 0; i < blocks; ++i) {
    StagingPlace next = at;
    for (const std::int64_t bytes : piece_bytes) {
      if (bytes <= 0) continue;
      const auto n = static_cast<std::uint64_t>(bytes);
      if (n > slot_bytes) return 0;
      if (next.offset + n > slot_bytes) next = {next.slot + 1, 0};
      next.offset = AlignUp(next.offset + n);
    }
    if (next.slot >= slots) return i;
    at = next;
  }
  return blocks;
}

bool PoolsRegistered(const PeerSessions& sessions, const OffloadEngine& engine) {
  if (engine.device_pools()) return false;
  for (const KvPoolView& v : engine.pools()) {
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& l = v.layout.components[c];
      if (!l.present()) continue;
      const auto bytes = static_cast<std::uint64_t>(l.BytesPerBlock() * v.num_blocks);
      if (v.base[c] == nullptr || !sessions.PoolSlice(v.base[c], bytes)) return false;
    }
  }
  return true;
}

Result<std::int64_t> ServeLayerRanges(const LayerRangeServeArgs& a) {
  const std::vector<LayerRangeCodec>& codecs = *a.codecs;
  const std::size_t pools = codecs.size();
  const LayerRangeRequest& q = a.request;
  KVMESH_CHECK_EQ(q.ranges.size(), pools);
  if (a.requested_bytes.size() != pools) {
    return Status::FailedPrecondition(StrCat("fetch_blocks: range sizes of ",
                                             a.requested_bytes.size(), " pools, this node has ",
                                             pools));
  }
  const bool seal_only = a.source->seal_only() && PoolsRegistered(*a.sessions, *a.engine);
  std::vector<std::int64_t> piece_bytes(pools, 0);  // in our staging
  std::vector<LayerRangeParts> parts(pools);
  for (std::size_t p = 0; p < pools; ++p) {
    const LayerSpan r = q.ranges[p];
    const std::int64_t ours = r.empty() ? 0 : codecs[p].Bytes(r);
    if (a.requested_bytes[p] != ours) {
      return Status::FailedPrecondition(StrCat("fetch_blocks: pool ", p, " layers [", r.begin, ", ",
                                               r.end, ") of ", a.requested_bytes[p],
                                               " bytes, ours are ", ours));
    }
    if (r.empty()) continue;
    parts[p] = codecs[p].Parts(r);
    piece_bytes[p] = seal_only ? kLayerRangeSealBytes : ours;
  }
  StagingArena& staging = a.sessions->send_staging();
  std::uint32_t slots = 0;
  const std::vector<StagingPlace> places = PackPieces(
      piece_bytes, static_cast<std::int64_t>(q.blocks.size()), staging.slot_bytes(), &slots);
  if (slots > staging.slots()) {
    return Status::ResourceExhausted(
        StrCat("fetch_blocks: ", q.blocks.size(), " blocks of layer ranges need ", slots,
               " send-staging slots, this node has ", staging.slots()));
  }
  KVMESH_ASSIGN_OR_RETURN(StagingLease lease, staging.Acquire(slots, a.deadline));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      a.deadline - std::chrono::steady_clock::now());
  SendRequest send;
  send.receiver = a.peer;
  send.transfer = a.transfer;
  send.deadline = SystemClock::Default()->Now() + left;
  std::vector<Slice> wire;
  std::size_t per_block = 0;
  for (std::size_t p = 0; p < pools; ++p) per_block += piece_bytes[p] > 0 ? parts[p].count : 0;
  wire.reserve(q.blocks.size() * per_block);
  std::vector<TransferOp> ops;
  ops.reserve(q.blocks.size());
  Status st;
  std::size_t k = 0;  // piece
  for (std::size_t i = 0; i < q.blocks.size() && st.ok(); ++i) {
    const std::size_t first = wire.size();
    for (std::size_t p = 0; p < pools && st.ok(); ++p) {
      if (piece_bytes[p] == 0) continue;
      const StagingPlace at = places[k++];
      const std::span<std::byte> piece =
          lease.bytes(at.slot).subspan(at.offset, static_cast<std::size_t>(piece_bytes[p]));
      const Slice slot = lease.slice(at.slot, 0);
      const auto from_slot = [&](std::int64_t offset, std::int64_t length) {
        return Slice{slot.region, slot.offset + at.offset + static_cast<std::uint64_t>(offset),
                     static_cast<std::uint64_t>(length)};
      };
      if (!seal_only) {
        st = a.source->Encode(q, i, p, piece);
        for (const BundleRange& part : parts[p].all()) {
          wire.push_back(from_slot(part.offset, part.length));
        }
        continue;
      }
      st = a.source->EncodeSeal(q, i, p, piece);
      const KvPoolView range =
          codecs[p].BlockView(a.engine->pools()[p], q.blocks[i].blocks[p], q.ranges[p]);
      for (const BundleRange& part : parts[p].all()) {
        if (part.component < 0) {
          // The header, then the checksum: the seal's two halves.
          wire.push_back(part.offset == 0
                             ? from_slot(0, kLayerRangeHeaderBytes)
                             : from_slot(kLayerRangeHeaderBytes, kBundleChecksumBytes));
          continue;
        }
        const std::optional<Slice> direct = a.sessions->PoolSlice(
            range.base[part.component], static_cast<std::uint64_t>(part.length));
        if (!direct) {
          st = Status::Internal("fetch_blocks: a layer range outside the registered pools");
          break;
        }
        wire.push_back(*direct);
      }
    }
    if (!st.ok()) break;
    send.first_slice = static_cast<std::uint32_t>(first);
    send.slices = std::span<const Slice>(wire).subspan(first);
    Result<TransferOp> op = a.sessions->engine().Send(send);
    if (op.ok()) {
      ops.push_back(std::move(op).value());
    } else {
      st = op.status();
    }
  }
  // As FetchBlocks: a send that could not start leaves the grant incomplete, so the ones in flight
  // are cancelled; the lease outlives UCX's reads.
  if (!st.ok() && !ops.empty())
    static_cast<void>(a.sessions->engine().CancelSend(a.peer, a.transfer));
  for (TransferOp& op : ops) {
    Status done = op.Wait();
    if (st.ok()) st = std::move(done);
  }
  KVMESH_RETURN_IF_ERROR(st);
  std::int64_t bytes = 0;
  for (const Slice& s : wire) bytes += static_cast<std::int64_t>(s.length);
  return bytes;
}

}  // namespace kvmesh
