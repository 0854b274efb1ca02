// HandoffSender's streaming side (node/handoff.h): the prefill node's streams — start, the
// engine's announcements forwarded by the notifier thread, the decode node's layer fetches and its
// answer, deadlines and cancels.
#include <sys/random.h>

#include <algorithm>

#include "common/log.h"
#include "common/strings.h"
#include "node/handoff.h"
#include "node/rpc_convert.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;

constexpr std::int32_t kMaxRangeBlocks = 1024;  // blocks per FetchBlocks (as PeerServiceOptions)
constexpr std::chrono::milliseconds kMaxFetchDeadline{30000};
// A finished stream's answer is kept this long for AwaitStream, then forgotten.
constexpr std::chrono::seconds kKeepFinished{30};

std::uint64_t NewStreamId() {
  std::uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != static_cast<ssize_t>(sizeof(id))) id = 0;
  }
  return id;
}

}  // namespace

// One stream of this node. `blocks` and `layers` are immutable after the start; the rest is
// guarded by the sender's mu_.
struct HandoffSender::Stream {
  std::uint64_t id = 0;
  std::string to;
  std::uint64_t owner = 0;
  std::vector<LayerRangeBlock> blocks;
  std::vector<std::int32_t> layers;  // per pool
  Steady::time_point deadline;
  // Guarded by mu_.
  std::shared_ptr<PinnedBlocks> pins;  // shared with serving calls while UCX reads the blocks
  std::vector<std::int32_t> ready;     // announced by the engine
  std::vector<std::int32_t> forwarded;
  bool forward_cancel = false;
  bool active = true;  // no answer, no failure yet
  Status status;       // when not active: OK (answered) or why it failed
  HandoffResult result;
  Steady::time_point finished;
};

// An announcement (or a cancel) on its way to a decode node.
struct HandoffSender::Forward {
  std::uint64_t id = 0;
  std::string to;
  std::vector<std::int32_t> ready;
  bool cancel = false;
};

HandoffSender::HandoffSender(TieredCache* cache, PeerSessions* sessions, std::string self_address,
                             LayerRangeSource* source)
    : cache_(cache), sessions_(sessions), self_address_(std::move(self_address)) {
  for (const KvPoolView& v : cache_->engine().pools()) {
    Result<LayerRangeCodec> codec = LayerRangeCodec::Create(v.layout, v.pool_scale);
    KVMESH_CHECK(codec.ok()) << codec.status().ToString();  // the pools' layouts are valid
    codecs_.push_back(std::move(codec).value());
  }
  if (source == nullptr) {
    own_source_ = std::make_unique<PoolLayerRangeSource>(&cache_->engine(), codecs_);
    source = own_source_.get();
  }
  source_ = source;
}

HandoffSender::~HandoffSender() {
  std::vector<std::shared_ptr<PinnedBlocks>> released;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [id, s] : streams_) {
      if (s->active) EndLocked(*s, Status::Cancelled("the node is stopping"), &released);
    }
  }
  cv_.notify_all();
  if (notifier_.joinable()) notifier_.join();
}

std::vector<std::int32_t> HandoffSender::PoolLayers() const {
  std::vector<std::int32_t> out;
  for (const LayerRangeCodec& c : codecs_) out.push_back(c.num_layers());
  return out;
}

void HandoffSender::EndLocked(Stream& s, Status status,
                              std::vector<std::shared_ptr<PinnedBlocks>>* released) {
  if (!s.active) return;
  s.active = false;
  s.status = std::move(status);
  s.finished = Steady::now();
  released->push_back(std::move(s.pins));
  ++(s.status.ok() ? stats_.streams_answered : stats_.streams_failed);
  cv_.notify_all();
}

Result<HandoffResult> HandoffSender::HandOffStream(
    const std::string& to, std::span<const Token> prompt, const SequenceOptions& options,
    RequestId request, std::chrono::milliseconds deadline, std::uint64_t owner) {
  if (deadline.count() <= 0) return Status::InvalidArgument("handoff: deadline must be positive");
  const Steady::time_point until = Steady::now() + deadline;
  KVMESH_ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, sessions_->Link(to, deadline));
  BlockManager& m = cache_->manager();
  KVMESH_ASSIGN_OR_RETURN(const RestorePlan plan, m.PlanRestore(prompt, options));
  KVMESH_ASSIGN_OR_RETURN(const std::vector<BlockTable> tables, m.GetBlockTables(request));
  // Pinned until the answer or the deadline, whatever the engine does with its sequence.
  KVMESH_ASSIGN_OR_RETURN(PinnedBlocks pins, m.PinSequenceBlocks(request));
  auto s = std::make_shared<Stream>();
  s->id = NewStreamId();
  s->to = to;
  s->owner = owner;
  s->deadline = until;
  s->layers = PoolLayers();
  const std::size_t pools = codecs_.size();
  for (std::size_t i = 0; i < plan.content_ids.size() && tables.size() == pools; ++i) {
    LayerRangeBlock b;
    b.id = plan.content_ids[i];
    for (const BlockTable& t : tables) {
      if (i >= t.block_ids.size() || t.block_ids[i] < 0) break;
      b.blocks.push_back(t.block_ids[i]);
    }
    if (b.blocks.size() != pools) break;  // a window pool without it: the rest is computed
    s->blocks.push_back(std::move(b));
  }
  HandoffResult out;
  out.wanted_blocks = static_cast<std::int64_t>(plan.content_ids.size());
  out.pinned_blocks = static_cast<std::int64_t>(s->blocks.size());
  if (s->blocks.empty()) return out;  // nothing to stream: the decode node computes
  s->pins = std::make_shared<PinnedBlocks>(std::move(pins));
  s->ready.assign(pools, 0);
  s->forwarded.assign(pools, 0);
  out.handoff_id = s->id;
  {
    MutexLock lock(&mu_);
    if (stop_) return Status::Cancelled("handoff: the node is stopping");
    streams_.emplace(s->id, s);
    if (!notifier_.joinable()) notifier_ = std::thread([this] { Notify(); });
  }
  rpc::Request req;
  const std::chrono::milliseconds left = TimeLeft(until);
  req.set_timeout_ms(static_cast<std::uint32_t>(std::max<std::int64_t>(left.count(), 1)));
  rpc::HandoffRequest* h = req.mutable_handoff();
  for (Token t : prompt) h->add_tokens(t);
  ToProto(options, h->mutable_options());
  h->set_deadline_ms(static_cast<std::uint32_t>(std::max<std::int64_t>(left.count(), 1)));
  h->set_from_address(self_address_);
  h->set_stream_id(s->id);
  for (std::int32_t l : s->layers) h->add_pool_layers(l);
  Result<rpc::Response> r = link->Call(std::move(req));
  std::vector<std::shared_ptr<PinnedBlocks>> released;  // dropped after the lock
  MutexLock lock(&mu_);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kPeerUnreachable ||
        r.status().code() == StatusCode::kTimedOut) {
      sessions_->MarkFailed(to, /*transfer_failed=*/false);
    }
    EndLocked(*s, r.status(), &released);
    streams_.erase(s->id);
    KVMESH_LOG_WARN("handoff stream failed to {} error {}", to, r.status().ToString());
    return r.status().WithContext(StrCat("handoff stream to ", to));
  }
  const rpc::HandoffResponse& answer = r->handoff();
  out.had_blocks = answer.had_blocks();
  out.held_blocks = answer.held_blocks();
  out.streaming = answer.streaming();
  ++stats_.streams;
  if (!out.streaming && s->active) {
    s->result = out;  // the decode node needs nothing: this is its answer
    EndLocked(*s, Status::Ok(), &released);
  }
  KVMESH_LOG_INFO("handoff stream started to {} id {} wanted {} pinned {} had {} streaming {}", to,
                  s->id, out.wanted_blocks, out.pinned_blocks, out.had_blocks, out.streaming);
  return out;
}

Status HandoffSender::LayersReady(std::uint64_t handoff_id,
                                  std::span<const std::int32_t> layers_done, std::uint64_t owner) {
  MutexLock lock(&mu_);
  auto it = streams_.find(handoff_id);
  if (it == streams_.end() || (owner != 0 && it->second->owner != owner)) {
    return Status::NotFound(StrCat("handoff stream ", handoff_id, " is not running here"));
  }
  Stream& s = *it->second;
  if (!s.active) return s.status;  // answered (nothing more to send) or failed
  if (layers_done.size() != s.layers.size()) {
    return Status::InvalidArgument(StrCat("handoff stream: ", layers_done.size(),
                                          " layer counts for ", s.layers.size(), " pools"));
  }
  for (std::size_t p = 0; p < s.layers.size(); ++p) {
    if (layers_done[p] < s.ready[p] || layers_done[p] > s.layers[p]) {
      return Status::InvalidArgument(StrCat("handoff stream: pool ", p, " layers done ",
                                            layers_done[p], ", announced ", s.ready[p], " of ",
                                            s.layers[p]));
    }
  }
  s.ready.assign(layers_done.begin(), layers_done.end());
  cv_.notify_all();
  return Status::Ok();
}

Result<HandoffResult> HandoffSender::AwaitStream(std::uint64_t handoff_id, std::uint64_t owner) {
  std::vector<std::shared_ptr<PinnedBlocks>> released;  // dropped after the lock
  MutexLock lock(&mu_);
  auto it = streams_.find(handoff_id);
  if (it == streams_.end() || (owner != 0 && it->second->owner != owner)) {
    return Status::NotFound(StrCat("handoff stream ", handoff_id, " is not running here"));
  }
  const std::shared_ptr<Stream> s = it->second;
  const bool ended =
      AwaitConditionFor(cv_, mu_, std::max(s->deadline - Steady::now(), Steady::duration::zero()),
                        [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return !s->active || stop_; });
  if (!ended) {
    EndLocked(*s, Status::TimedOut("handoff stream: no answer before the deadline"), &released);
  }
  streams_.erase(handoff_id);
  if (!s->status.ok()) return s->status.WithContext(StrCat("handoff stream to ", s->to));
  return s->result;
}

void HandoffSender::CancelStreams(std::uint64_t owner) {
  std::vector<std::shared_ptr<PinnedBlocks>> released;
  MutexLock lock(&mu_);
  for (auto& [id, s] : streams_) {
    if (s->owner != owner || !s->active || s->ready == s->layers) continue;
    s->forward_cancel = true;
    EndLocked(*s, Status::Cancelled("handoff stream: its engine went away"), &released);
  }
}

void HandoffSender::Notify() {
  for (;;) {
    std::vector<Forward> work;
    std::vector<std::shared_ptr<PinnedBlocks>> released;  // dropped after the lock
    {
      MutexLock lock(&mu_);
      // Wakes for an announcement, a cancel or stop, and at least once a second for deadlines.
      AwaitConditionFor(cv_, mu_, std::chrono::seconds(1), [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
        if (stop_) return true;
        for (const auto& [id, s] : streams_) {
          if (s->forward_cancel || (s->active && s->ready != s->forwarded)) return true;
          if (s->active && Steady::now() >= s->deadline) return true;
        }
        return false;
      });
      if (stop_) return;
      const Steady::time_point now = Steady::now();
      for (auto it = streams_.begin(); it != streams_.end();) {
        Stream& s = *it->second;
        if (s.forward_cancel) {
          work.push_back({s.id, s.to, {}, true});
          s.forward_cancel = false;
        } else if (s.active && now >= s.deadline) {
          EndLocked(s, Status::TimedOut("handoff stream: no answer before the deadline"),
                    &released);
        } else if (s.active && s.ready != s.forwarded) {
          work.push_back({s.id, s.to, s.ready, false});
          s.forwarded = s.ready;
        }
        if (!s.active && now - s.finished > kKeepFinished) {
          it = streams_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const Forward& f : work) Send(f);
  }
}

void HandoffSender::Send(const Forward& f) {
  Status st;
  Result<std::shared_ptr<PeerLink>> link = sessions_->Link(f.to);
  if (link.ok()) {
    rpc::Request req;
    rpc::HandoffStreamLayers* l = req.mutable_handoff()->mutable_layers();
    l->set_handoff_id(f.id);
    for (std::int32_t n : f.ready) l->add_layers_done(n);
    l->set_cancel(f.cancel);
    st = (*link)->Call(std::move(req)).status();
    if (st.code() == StatusCode::kPeerUnreachable || st.code() == StatusCode::kTimedOut) {
      sessions_->MarkFailed(f.to, /*transfer_failed=*/false);
    }
  } else {
    st = link.status();
  }
  // NotFound: the decode node's stream ended (its answer is on the way or came already).
  if (st.ok() || st.IsNotFound() || f.cancel) return;
  KVMESH_LOG_WARN("handoff stream announcement failed to {} id {} error {}", f.to, f.id,
                  st.ToString());
  std::vector<std::shared_ptr<PinnedBlocks>> released;
  MutexLock lock(&mu_);
  auto it = streams_.find(f.id);
  if (it != streams_.end()) EndLocked(*it->second, st.WithContext("announce layers"), &released);
}

bool HandoffSender::Serves(const rpc::Request& request) {
  return (request.body_case() == rpc::Request::kFetchBlocks &&
          request.fetch_blocks().handoff_id() != 0) ||
         (request.body_case() == rpc::Request::kHandoff && request.handoff().has_answer());
}

Status HandoffSender::HandlePeer(const SessionInfo& session, const rpc::Request& request,
                                 rpc::Response* out) {
  if (session.role != rpc::CLIENT_ROLE_PEER) {
    return Status::PermissionDenied("peer requests need a session of role peer");
  }
  if (request.body_case() == rpc::Request::kFetchBlocks) {
    return ServeLayers(session, request.fetch_blocks(), out->mutable_fetch_blocks());
  }
  out->mutable_handoff();
  return StreamAnswered(session, request.handoff().answer());
}

Status HandoffSender::ServeLayers(const SessionInfo& session, const rpc::FetchBlocksRequest& in,
                                  rpc::FetchBlocksResponse* out) {
  const Steady::time_point start = Steady::now();
  std::shared_ptr<Stream> s;
  std::shared_ptr<PinnedBlocks> pins;  // held while UCX reads the blocks
  std::vector<std::int32_t> ready;
  {
    MutexLock lock(&mu_);
    auto it = streams_.find(in.handoff_id());
    // Only the stream's decode node may read it; anyone else learns nothing.
    if (it == streams_.end() || it->second->to != session.client_name) {
      return Status::NotFound(StrCat("fetch_blocks: no handoff stream ", in.handoff_id()));
    }
    s = it->second;
    if (!s->active) return Status::FailedPrecondition("fetch_blocks: the handoff stream ended");
    pins = s->pins;
    ready = s->ready;
  }
  const TransferId transfer{in.transfer_id()};
  if (!transfer.valid()) return Status::InvalidArgument("fetch_blocks: no transfer id");
  const auto total = static_cast<std::int64_t>(s->blocks.size());
  if (in.blocks() < 1 || in.blocks() > kMaxRangeBlocks || in.first_block() < 0 ||
      in.first_block() > total - in.blocks()) {
    return Status::InvalidArgument(StrCat("fetch_blocks: blocks [", in.first_block(), ", +",
                                          in.blocks(), ") of a stream of ", total));
  }
  const std::size_t pools = codecs_.size();
  if (in.layer_begin_size() != static_cast<int>(pools) ||
      in.layer_end_size() != static_cast<int>(pools)) {
    return Status::InvalidArgument(StrCat("fetch_blocks: layer ranges for ", in.layer_begin_size(),
                                          " pools, this node has ", pools));
  }
  std::vector<LayerSpan> ranges(pools);
  bool any = false;
  for (std::size_t p = 0; p < pools; ++p) {
    const LayerSpan r{in.layer_begin(static_cast<int>(p)), in.layer_end(static_cast<int>(p))};
    if (r.begin < 0 || r.end < r.begin || r.end > ready[p]) {
      return Status::InvalidArgument(StrCat("fetch_blocks: pool ", p, " layers [", r.begin, ", ",
                                            r.end, ") beyond the ", ready[p], " announced"));
    }
    ranges[p] = r;
    any = any || !r.empty();
  }
  if (!any) return Status::InvalidArgument("fetch_blocks: no layers asked for");
  KVMESH_ASSIGN_OR_RETURN(const PeerId peer, sessions_->ConnectedPeer(session.client_name));
  const std::vector<std::int64_t> requested(in.bundle_bytes().begin(), in.bundle_bytes().end());
  LayerRangeServeArgs a;
  a.sessions = sessions_;
  a.engine = &cache_->engine();
  a.source = source_;
  a.codecs = &codecs_;
  a.peer = peer;
  a.transfer = transfer;
  a.request.blocks = std::span<const LayerRangeBlock>(s->blocks).subspan(
      static_cast<std::size_t>(in.first_block()), static_cast<std::size_t>(in.blocks()));
  a.request.ranges = ranges;
  a.requested_bytes = requested;
  a.deadline = std::min(s->deadline, start + std::min(std::chrono::milliseconds(in.deadline_ms()),
                                                      kMaxFetchDeadline));
  Result<std::int64_t> sent = ServeLayerRanges(a);
  if (!sent.ok()) {
    if (sent.status().code() == StatusCode::kPeerUnreachable ||
        sent.status().code() == StatusCode::kTimedOut) {
      sessions_->MarkFailed(session.client_name,
                            sent.status().code() == StatusCode::kPeerUnreachable);
    }
    return sent.status().WithContext(StrCat("fetch_blocks layers to ", session.client_name));
  }
  out->set_sent_blocks(in.blocks());
  MutexLock lock(&mu_);
  std::int64_t pieces = 0;
  for (const LayerSpan& r : ranges) pieces += r.empty() ? 0 : in.blocks();
  stats_.ranges_served += pieces;
  stats_.bytes_served += *sent;
  return Status::Ok();
}

Status HandoffSender::StreamAnswered(const SessionInfo& session,
                                     const rpc::HandoffStreamAnswer& in) {
  std::vector<std::shared_ptr<PinnedBlocks>> released;  // dropped after the lock
  MutexLock lock(&mu_);
  auto it = streams_.find(in.handoff_id());
  if (it == streams_.end() || it->second->to != session.client_name) {
    return Status::NotFound(StrCat("handoff: no stream ", in.handoff_id()));
  }
  Stream& s = *it->second;
  if (!s.active) return Status::Ok();  // expired or cancelled meanwhile: its pins went already
  HandoffResult& r = s.result;
  r.handoff_id = s.id;
  r.streaming = true;
  r.wanted_blocks = in.result().wanted_blocks();
  r.pinned_blocks = static_cast<std::int64_t>(s.blocks.size());
  r.had_blocks = in.result().had_blocks();
  r.moved_blocks = in.result().moved_blocks();
  r.held_blocks = in.result().held_blocks();
  if (in.code() != 0) {
    KVMESH_LOG_WARN("handoff stream to {} id {} moved nothing: {}", s.to, s.id, in.message());
  }
  KVMESH_LOG_INFO("handoff stream done to {} id {} wanted {} had {} moved {} held {}", s.to, s.id,
                  r.wanted_blocks, r.had_blocks, r.moved_blocks, r.held_blocks);
  EndLocked(s, Status::Ok(), &released);
  return Status::Ok();
}

HandoffSenderStats HandoffSender::stream_stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kvmesh
