#include "node/peer_service.h"

#include <cstring>

#include "common/log.h"
#include "common/strings.h"
#include "node/handoff.h"

namespace kvmesh {

Result<std::vector<ContentId>> ContentIdsFromWire(
    const google::protobuf::RepeatedPtrField<std::string>& ids) {
  std::vector<ContentId> out(static_cast<std::size_t>(ids.size()));
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i].size() != ContentId::kBytes) {
      return Status::InvalidArgument(
          StrCat("content id ", i, " has ", ids[i].size(), " bytes, not 16"));
    }
    std::memcpy(out[static_cast<std::size_t>(i)].bytes.data(), ids[i].data(), ContentId::kBytes);
  }
  return out;
}

CacheBlockSource::CacheBlockSource(TieredCache* cache, std::vector<KvPoolView> views,
                                   std::vector<BundleCodec> codecs)
    : cache_(cache), views_(std::move(views)), codecs_(std::move(codecs)) {}

BlockSource::Held CacheBlockSource::Count(std::span<const ContentId> ids) {
  Held h;
  BlockManager& m = cache_->manager();
  std::size_t i = 0;
  for (; i < ids.size(); ++i) {
    Result<CachedBlockInfo> info = m.FindBlock(ids[i]);
    if (!info.ok()) break;
    bool all = true;
    for (std::int32_t b : info->block_ids) all = all && b >= 0;
    if (!all) break;
  }
  h.pool_blocks = static_cast<std::int32_t>(i);
  const std::int64_t tiers = cache_->engine().CountHeld(ids.subspan(i));
  h.held_blocks = static_cast<std::int32_t>(i + static_cast<std::size_t>(tiers));
  return h;
}

bool CacheBlockSource::EncodeFromTier(const ContentId& id,
                                      std::span<const std::span<std::byte>> out) {
  OffloadEngine& e = cache_->engine();
  for (std::size_t p = 0; p < codecs_.size(); ++p) {
    // One block of scratch per component: the tiers decode (and verify) into a pool view.
    KvPoolView scratch;
    scratch.layout = views_[p].layout;
    scratch.pool_scale = views_[p].pool_scale;
    scratch.num_blocks = 1;
    std::vector<std::vector<std::byte>> memory(kNumKvComponents);
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& l = scratch.layout.components[c];
      if (!l.present()) continue;
      memory[static_cast<std::size_t>(c)].resize(static_cast<std::size_t>(l.BytesPerBlock()));
      scratch.base[c] = memory[static_cast<std::size_t>(c)].data();
    }
    const TierPoolId tp{static_cast<std::int32_t>(p)};
    Status st = Status::NotFound("no tier");
    if (e.host() != nullptr && e.host()->Contains(tp, id)) st = e.host()->Get(tp, id, scratch, 0);
    if (!st.ok() && e.disk() != nullptr) st = e.disk()->Get(tp, id, scratch, 0);
    if (!st.ok()) return false;
    if (!codecs_[p].Encode(scratch, 0, id, out[p]).ok()) return false;
  }
  return true;
}

bool CacheBlockSource::Encode(std::span<const ContentId> ids, std::size_t i,
                              std::span<const std::span<std::byte>> slots, Prepared* out) {
  const std::size_t pools = codecs_.size();
  Result<PinnedBlocks> pins = cache_->manager().PinByContentId(ids[i]);
  OffloadEngine& engine = cache_->engine();
  if (pins.ok() && pins->size() == pools && engine.device_pools()) {
    // Device pools: UCX cannot read them; each block is staged into host memory and encoded whole
    // into its slot (sent from the slot). The pins hold the blocks while they are read.
    bool ok = true;
    for (const PinnedBlockRef& ref : pins->blocks()) {
      const auto p = static_cast<std::size_t>(ref.pool.value);
      if (p >= pools) {
        ok = false;
        break;
      }
      Result<HostBlock> staged = engine.ReadBlock(ref.pool.value, ref.block.value);
      ok = staged.ok() && codecs_[p].Encode(staged->view(), staged->block(), ids[i], slots[p]).ok();
      if (!ok) break;
    }
    if (ok) return true;
  } else if (pins.ok() && pins->size() == pools) {
    bool ok = true;
    for (const PinnedBlockRef& ref : pins->blocks()) {
      const auto p = static_cast<std::size_t>(ref.pool.value);
      ok = ok && p < pools &&
           codecs_[p].EncodeSeal(views_[p], ref.block.value, ids[i], slots[p]).ok();
      if (!ok) break;
      for (int c = 0; c < kNumKvComponents; ++c) {
        if (views_[p].layout.components[c].present()) {
          out->payload[p][static_cast<std::size_t>(c)] = reinterpret_cast<const std::byte*>(
              views_[p].BlockBytes(static_cast<KvComponent>(c), ref.block.value));
        }
      }
    }
    if (ok) {
      out->pins = std::move(pins).value();
      return true;
    }
    for (auto& payload : out->payload) payload.fill(nullptr);
  }
  return EncodeFromTier(ids[i], slots);
}

namespace {

std::vector<std::int64_t> BundleBytesOf(const std::vector<BundleCodec>& codecs) {
  std::vector<std::int64_t> out;
  for (const BundleCodec& c : codecs) out.push_back(c.bundle_bytes());
  return out;
}

}  // namespace

PeerService::PeerService(PeerServiceOptions options, PeerSessions* sessions, BlockSource* source,
                         std::vector<BundleCodec> codecs)
    : options_(options),
      sessions_(sessions),
      source_(source),
      codecs_(std::move(codecs)),
      bundle_bytes_(BundleBytesOf(codecs_)) {}

bool PeerService::Handles(rpc::Request::BodyCase body) {
  switch (body) {
    case rpc::Request::kPeerHello:
    case rpc::Request::kHaveBlocks:
    case rpc::Request::kFetchBlocks:
    case rpc::Request::kHandoff: return true;
    default: return false;
  }
}

Status PeerService::Handle(const SessionInfo& session, const rpc::Request& request,
                           rpc::Response* out) {
  if (session.role != rpc::CLIENT_ROLE_PEER) {
    return Status::PermissionDenied("peer requests need a session of role peer");
  }
  switch (request.body_case()) {
    case rpc::Request::kPeerHello: {
      KVMESH_ASSIGN_OR_RETURN(*out->mutable_peer_hello(),
                              sessions_->AcceptHello(session, request.peer_hello()));
      return Status::Ok();
    }
    case rpc::Request::kHaveBlocks:
      return HaveBlocks(request.have_blocks(), out->mutable_have_blocks());
    case rpc::Request::kFetchBlocks: {
      Status st = FetchBlocks(session, request.fetch_blocks(), out->mutable_fetch_blocks());
      (st.ok() ? served_ : failed_).fetch_add(1);
      return st;
    }
    case rpc::Request::kHandoff:
      if (handoff_ == nullptr) return Status::NotSupported("this node takes no handoffs");
      return handoff_->Handle(session, request.handoff(), out->mutable_handoff());
    default: return Status::InvalidArgument("not a peer request");
  }
}

Status PeerService::HaveBlocks(const rpc::HaveBlocksRequest& in, rpc::HaveBlocksResponse* out) {
  if (in.content_ids_size() > options_.max_fetch_blocks * 16) {
    return Status::InvalidArgument(StrCat("have_blocks: ", in.content_ids_size(), " ids"));
  }
  KVMESH_ASSIGN_OR_RETURN(const std::vector<ContentId> ids, ContentIdsFromWire(in.content_ids()));
  const BlockSource::Held h = source_->Count(ids);
  out->set_pool_blocks(h.pool_blocks);
  out->set_held_blocks(h.held_blocks);
  return Status::Ok();
}

Status PeerService::FetchBlocks(const SessionInfo& session, const rpc::FetchBlocksRequest& in,
                                rpc::FetchBlocksResponse* out) {
  const auto start = std::chrono::steady_clock::now();
  if (in.handoff_id() != 0) {
    // A streaming handoff's layer ranges: its sender serves them (HandoffSender::HandlePeer).
    return Status::NotSupported("fetch_blocks: this service serves no handoff streams");
  }
  KVMESH_ASSIGN_OR_RETURN(const PeerId peer, sessions_->ConnectedPeer(session.client_name));
  const TransferId transfer{in.transfer_id()};
  if (!transfer.valid()) return Status::InvalidArgument("fetch_blocks: no transfer id");
  if (in.content_ids_size() == 0 || in.content_ids_size() > options_.max_fetch_blocks) {
    return Status::InvalidArgument(StrCat("fetch_blocks: ", in.content_ids_size(), " blocks (1..",
                                          options_.max_fetch_blocks, ")"));
  }
  if (in.bundle_bytes_size() != static_cast<int>(bundle_bytes_.size())) {
    return Status::FailedPrecondition(StrCat("fetch_blocks: ", in.bundle_bytes_size(),
                                             " pools asked, this node has ", bundle_bytes_.size()));
  }
  for (int p = 0; p < in.bundle_bytes_size(); ++p) {
    if (in.bundle_bytes(p) != bundle_bytes_[static_cast<std::size_t>(p)]) {
      return Status::FailedPrecondition(StrCat("fetch_blocks: pool ", p, " bundles of ",
                                               in.bundle_bytes(p), " bytes, ours are ",
                                               bundle_bytes_[static_cast<std::size_t>(p)]));
    }
  }
  const std::chrono::milliseconds deadline_ms(
      std::min<std::int64_t>(in.deadline_ms(), options_.max_deadline.count()));
  const auto deadline = start + deadline_ms;
  KVMESH_ASSIGN_OR_RETURN(const std::vector<ContentId> ids, ContentIdsFromWire(in.content_ids()));
  const std::size_t pools = bundle_bytes_.size();
  const std::size_t n = ids.size() * pools;
  StagingArena& staging = sessions_->send_staging();
  for (std::int64_t b : bundle_bytes_) {
    if (static_cast<std::uint64_t>(b) > staging.slot_bytes()) {
      return Status::Internal("fetch_blocks: bundles larger than the staging slots");
    }
  }
  KVMESH_ASSIGN_OR_RETURN(StagingLease lease, staging.Acquire(n, deadline));
  std::vector<std::span<std::byte>> spans(n);
  for (std::size_t i = 0; i < n; ++i) {
    spans[i] = lease.bytes(i).first(static_cast<std::uint64_t>(bundle_bytes_[i % pools]));
  }
  std::size_t ranges = 0;  // wire slices per block: every pool's data ranges
  for (const BundleCodec& c : codecs_) ranges += c.data_ranges().size();
  // Block by block: each block's slices go on the wire as soon as it is sealed, so that UCX sends
  // block i (and the requester decodes it) while block i + 1 is prepared. Every send of part of
  // the grant completes when the whole grant has (transfer_engine.h); all are waited for before
  // the pins and the lease go, on every path.
  std::vector<Slice> wire;
  wire.reserve(ids.size() * ranges);
  std::vector<PinnedBlocks> pins;
  pins.reserve(ids.size());
  SendRequest send;
  send.receiver = peer;
  send.transfer = transfer;
  send.deadline = SystemClock::Default()->Now() + deadline_ms;
  std::vector<TransferOp> ops;
  ops.reserve(ids.size());
  Status st;
  std::size_t encoded = 0;
  while (encoded < ids.size() && st.ok()) {
    const std::size_t first = wire.size();
    bool rest_missing = false;
    BlockSource::Prepared prepared;
    prepared.payload.assign(pools, {});
    if (source_->Encode(ids, encoded, std::span(spans).subspan(encoded * pools, pools),
                        &prepared)) {
      AppendWire(encoded, prepared, lease, spans, &wire);
      pins.push_back(std::move(prepared.pins));
      ++encoded;
    } else {
      // Not held any more: this block and the rest go as zeros (a miss for the requester), in
      // one last Send.
      rest_missing = true;
      prepared.payload.assign(pools, {});
      for (std::size_t b = encoded; b < ids.size(); ++b) {
        for (std::size_t p = 0; p < pools; ++p) {
          std::memset(spans[b * pools + p].data(), 0, spans[b * pools + p].size());
        }
        AppendWire(b, prepared, lease, spans, &wire);
      }
    }
    send.first_slice = static_cast<std::uint32_t>(first);
    send.slices = std::span<const Slice>(wire).subspan(first);
    Result<TransferOp> op = sessions_->engine().Send(send);
    if (op.ok()) {
      ops.push_back(std::move(op).value());
    } else {
      st = op.status();
    }
    if (rest_missing) break;
  }
  // A send that could not start leaves the grant incomplete: the ones in flight would wait for
  // it until the deadline, so they are cancelled. The lease and the pins outlive UCX's reads.
  if (!st.ok() && !ops.empty()) static_cast<void>(sessions_->engine().CancelSend(peer, transfer));
  for (TransferOp& op : ops) {
    Status done = op.Wait();
    if (st.ok()) st = std::move(done);
  }
  if (!st.ok()) {
    if (st.code() == StatusCode::kPeerUnreachable || st.code() == StatusCode::kTimedOut) {
      sessions_->MarkFailed(session.client_name, st.code() == StatusCode::kPeerUnreachable);
    }
    return st.WithContext(StrCat("fetch_blocks send to ", session.client_name));
  }
  sent_.fetch_add(static_cast<std::int64_t>(encoded));
  missing_.fetch_add(static_cast<std::int64_t>(ids.size() - encoded));
  std::int64_t bytes = 0;
  for (const Slice& s : wire) bytes += static_cast<std::int64_t>(s.length);
  bytes_.fetch_add(bytes);
  out->set_sent_blocks(static_cast<std::int32_t>(encoded));
  return Status::Ok();
}

void PeerService::AppendWire(std::size_t block, const BlockSource::Prepared& prepared,
                             const StagingLease& lease, std::span<const std::span<std::byte>> slots,
                             std::vector<Slice>* wire) const {
  const std::size_t pools = codecs_.size();
  for (std::size_t p = 0; p < pools; ++p) {
    const std::size_t slot = block * pools + p;
    const Slice whole = lease.slice(slot, static_cast<std::uint64_t>(bundle_bytes_[p]));
    for (const BundleRange& r : codecs_[p].data_ranges()) {
      const auto length = static_cast<std::uint64_t>(r.length);
      const std::byte* from =
          r.component >= 0 ? prepared.payload[p][static_cast<std::size_t>(r.component)] : nullptr;
      if (from != nullptr) {
        if (const std::optional<Slice> direct = sessions_->PoolSlice(from, length)) {
          wire->push_back(*direct);
          continue;
        }
        std::memcpy(slots[slot].data() + r.offset, from, length);  // not registered memory
      }
      wire->push_back({whole.region, whole.offset + static_cast<std::uint64_t>(r.offset), length});
    }
  }
}

PeerServiceStats PeerService::stats() const {
  return {served_.load(), failed_.load(), sent_.load(), missing_.load(), bytes_.load()};
}

}  // namespace kvmesh
