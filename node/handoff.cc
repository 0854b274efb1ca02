#include "node/handoff.h"

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"
#include "node/rpc_convert.h"
#include "pool/block_key.h"

namespace kvmesh {
namespace {

// The sender holds every block of the handoff: the one holder of each id.
class SenderLocator final : public PrefixLocator {
 public:
  explicit SenderLocator(std::string node_id) : node_id_(std::move(node_id)) {}
  Result<std::vector<std::vector<BlockHolder>>> Locate(std::span<const ContentId> ids,
                                                       std::chrono::milliseconds) override {
    std::vector<std::vector<BlockHolder>> holders(ids.size());
    for (auto& h : holders) h.push_back({node_id_, HolderTier::kPool});
    return holders;
  }

 private:
  const std::string node_id_;
};

KvLayout OtherOrderOf(KvLayout order) {
  return order == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
}

}  // namespace

std::vector<ContentId> ContentIdsIn(const ContentId& ns, std::span<const Token> prompt,
                                    const SequenceOptions& options, std::int32_t t, std::size_t n) {
  ContentIdHasher hasher;
  const ContentId domain = hasher.ForDomain(ns, options.domain);
  std::vector<ContentId> ids;
  std::vector<BlockMmRef> mm;
  ContentId parent = domain;
  for (std::size_t i = 0; i < n; ++i) {
    const auto begin = static_cast<std::int64_t>(i) * t;
    mm.clear();
    MmRefsForBlock(options.multimodal, begin, t, &mm);
    parent = hasher.ForBlock(
        parent, domain,
        prompt.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(t)), mm);
    ids.push_back(parent);
  }
  return ids;
}

HandoffReceiver::HandoffReceiver(TieredCache* cache, PeerSessions* sessions, PeerTable* peers,
                                 std::vector<KvPoolView> views, std::vector<BundleCodec> codecs)
    : cache_(cache),
      sessions_(sessions),
      peers_(peers),
      views_(std::move(views)),
      codecs_(std::move(codecs)),
      streams_(std::make_unique<StreamReceiver>(cache_, sessions_, views_)) {}

Result<HandoffResult> HandoffSender::HandOff(const std::string& to, std::span<const Token> prompt,
                                             const SequenceOptions& options,
                                             std::chrono::milliseconds deadline) {
  if (deadline.count() <= 0) return Status::InvalidArgument("handoff: deadline must be positive");
  const auto until = std::chrono::steady_clock::now() + deadline;
  // The handshake first: no block is named to a node of another namespace or geometry.
  KVMESH_ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, sessions_->Link(to, deadline));
  BlockManager& m = cache_->manager();
  KVMESH_ASSIGN_OR_RETURN(const RestorePlan plan, m.PlanRestore(prompt, options));
  HandoffResult out;
  out.wanted_blocks = static_cast<std::int64_t>(plan.content_ids.size());
  std::vector<PinnedBlocks> pins;  // released on every return: after the answer or the deadline
  pins.reserve(static_cast<std::size_t>(plan.pool_blocks));
  for (std::int64_t i = 0; i < plan.pool_blocks; ++i) {
    Result<PinnedBlocks> p = m.PinByContentId(plan.content_ids[static_cast<std::size_t>(i)]);
    if (!p.ok()) break;  // evicted since the plan: the decode node computes from here
    pins.push_back(std::move(p).value());
  }
  out.pinned_blocks = static_cast<std::int64_t>(pins.size());
  const std::chrono::milliseconds left = TimeLeft(until);
  if (left.count() <= 0) return Status::TimedOut("handoff: deadline passed before the request");
  rpc::Request req;
  req.set_timeout_ms(static_cast<std::uint32_t>(left.count()));
  rpc::HandoffRequest* h = req.mutable_handoff();
  for (Token t : prompt) h->add_tokens(t);
  ToProto(options, h->mutable_options());
  h->set_deadline_ms(static_cast<std::uint32_t>(left.count()));
  h->set_from_address(self_address_);
  Result<rpc::Response> r = link->Call(std::move(req));
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kPeerUnreachable ||
        r.status().code() == StatusCode::kTimedOut) {
      sessions_->MarkFailed(to, /*transfer_failed=*/false);
    }
    KVMESH_LOG_WARN("handoff failed to {} pinned {} error {}", to, out.pinned_blocks,
                    r.status().ToString());
    return r.status().WithContext(StrCat("handoff to ", to));
  }
  out.had_blocks = r->handoff().had_blocks();
  out.moved_blocks = r->handoff().moved_blocks();
  out.held_blocks = r->handoff().held_blocks();
  KVMESH_LOG_INFO("handoff done to {} wanted {} pinned {} had {} moved {} held {}", to,
                  out.wanted_blocks, out.pinned_blocks, out.had_blocks, out.moved_blocks,
                  out.held_blocks);
  return out;
}

Result<HandoffReceiver::Conversion> HandoffReceiver::MakeConversion() const {
  Conversion c;
  for (const KvPoolView& ours : views_) {
    KVMESH_ASSIGN_OR_RETURN(
        BundleCodec codec,
        BundleCodec::Create(WithOrder(ours.layout, OtherOrderOf(ours.layout.order())),
                            ours.pool_scale));
    c.codecs.push_back(std::move(codec));
  }
  return c;
}

Status HandoffReceiver::DecodeConverted(const Conversion& c, std::size_t pool,
                                        std::span<std::byte> bundle, const ContentId& id,
                                        std::int64_t block) const {
  // One pass over the bundle where it landed: its header and table checked before a byte is
  // written, then each (layer, K/V) range checksummed and at once copied, converted HND <-> NHD,
  // from the cache into `block` (a reserved, hidden block: if the checksum fails at the end, it
  // is freed unpublished). UCX no longer writes the slot, so what is checked is what is copied.
  // Device pools: decoded into a staging block, then copied to the device only if it passed.
  KVMESH_RETURN_IF_ERROR(cache_->engine().WriteBlock(
      static_cast<int>(pool), block, [&](const KvPoolView& dst, std::int64_t b) {
        return c.codecs[pool].DecodeOnePassConverting(bundle, id, dst, b);
      }));
  converted_.fetch_add(1);
  return Status::Ok();
}

Status HandoffReceiver::Handle(const SessionInfo& session, const rpc::HandoffRequest& in,
                               rpc::HandoffResponse* out) {
  const std::string& from = session.client_name;
  if (in.has_answer()) {
    return Status::InvalidArgument("handoff: a stream's answer goes to its sender");
  }
  if (in.has_layers()) return streams_->Announce(from, in.layers());
  KVMESH_ASSIGN_OR_RETURN(const SequenceOptions options, FromProto(in.options()));
  const std::span<const Token> prompt = TokensOf(in.tokens());
  if (in.deadline_ms() == 0) return Status::InvalidArgument("handoff: no deadline");
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(in.deadline_ms());
  // A sender outside the membership is a contact (node/peer_table.h): its address serves the
  // peer session back to it, and the member list stays as membership made it.
  if (peers_->Find(from) == nullptr) {
    if (!in.from_address().empty()) {
      peers_->SetContact(from, in.from_address());
    } else if (peers_->Resolve(from) == nullptr) {
      return Status::FailedPrecondition(StrCat("handoff: peer ", from, " has no known address"));
    }
  }
  if (in.stream_id() != 0) return streams_->Start(from, prompt, options, until, in, out);
  BlockManager& m = cache_->manager();
  KVMESH_ASSIGN_OR_RETURN(RestorePlan plan, m.PlanRestore(prompt, options));
  const auto wanted = static_cast<std::int64_t>(plan.content_ids.size());
  const std::span<const ContentId> rest = std::span<const ContentId>(plan.content_ids)
                                              .subspan(static_cast<std::size_t>(plan.pool_blocks));
  const std::int64_t had = plan.pool_blocks + cache_->engine().CountHeld(rest);
  SenderLocator locator(from);
  // Link first: the hello says whether the sender's pools are in the other order.
  const std::chrono::milliseconds link_within = TimeLeft(until);
  if (link_within.count() <= 0) return Status::TimedOut("handoff: deadline passed");
  KVMESH_RETURN_IF_ERROR(sessions_->Link(from, link_within).status());
  const bool convert = sessions_->OtherOrder(from);
  Conversion conversion;
  std::vector<ContentId> sender_ids;
  if (convert) {
    KVMESH_ASSIGN_OR_RETURN(conversion, MakeConversion());
    sender_ids = ContentIdsIn(sessions_->options().other_order_namespace_digest, prompt, options,
                              m.tokens_per_block(), plan.content_ids.size());
  }
  std::int64_t moved = 0;
  while (true) {
    const std::chrono::milliseconds left = TimeLeft(until);
    if (left.count() <= 0) break;
    RemoteFetchOptions o;
    o.deadline = left;
    if (convert) {
      o.decode = [&](std::size_t pool, std::span<std::byte> bundle, const ContentId& id,
                     std::int64_t block) {
        return DecodeConverted(conversion, pool, bundle, id, block);
      };
      o.remote_id = [&](const ContentId& local) {
        const auto it = std::find(plan.content_ids.begin(), plan.content_ids.end(), local);
        return it == plan.content_ids.end()
                   ? local  // not of this prompt: the holder has none, a miss
                   : sender_ids[static_cast<std::size_t>(it - plan.content_ids.begin())];
      };
    }
    RemoteFetcher fetcher(o, cache_, sessions_, &locator, views_,
                          convert ? conversion.codecs : codecs_);
    RemoteFetchResult r = fetcher.Fetch(prompt, options);  // published; pins released at the end
    moved += r.fetched;
    if (r.fetched == 0) break;
  }
  KVMESH_ASSIGN_OR_RETURN(plan, m.PlanRestore(prompt, options));
  handoffs_.fetch_add(1);
  moved_.fetch_add(moved);
  had_.fetch_add(had);
  out->set_wanted_blocks(wanted);
  out->set_had_blocks(had);
  out->set_moved_blocks(moved);
  out->set_held_blocks(plan.pool_blocks);
  KVMESH_LOG_INFO("handoff received from {} wanted {} had {} moved {} held {}", from, wanted, had,
                  moved, plan.pool_blocks);
  return Status::Ok();
}

}  // namespace kvmesh
