// StreamReceiver (node/handoff_stream.h): the decode node's side of streaming handoffs.
#include <algorithm>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "node/handoff_stream.h"
#include "node/layer_range_fetch.h"
#include "node/rpc_convert.h"

namespace kvmesh {
namespace {

constexpr std::size_t kMaxStreams = 64;

using Steady = std::chrono::steady_clock;

double Since(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

KvLayout OtherOrderOf(KvLayout order) {
  return order == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
}

}  // namespace

struct StreamReceiver::Stream {
  std::string from;
  std::uint64_t id = 0;
  std::vector<Token> prompt;
  SequenceOptions options;
  RestoreReservation reservation;  // the puller's; freed unpublished unless every layer verified
  std::vector<ContentId> ids;      // per reserved block: the sender's content id
  std::int64_t wanted = 0;
  std::int64_t had = 0;
  bool convert = false;
  Steady::time_point start;
  Steady::time_point deadline;
  // Guarded by the receiver's mu_.
  std::vector<std::int32_t> announced;
  std::vector<std::int32_t> received;
  bool cancelled = false;
  bool done = false;
  std::thread puller;  // last
};

StreamReceiver::StreamReceiver(TieredCache* cache, PeerSessions* sessions,
                               std::vector<KvPoolView> views)
    : cache_(cache), sessions_(sessions), views_(std::move(views)) {
  for (const KvPoolView& v : views_) {
    // The pools' layouts were accepted by the codecs' bundle twins at start: cannot fail here.
    Result<LayerRangeCodec> ours = LayerRangeCodec::Create(v.layout, v.pool_scale);
    Result<LayerRangeCodec> other =
        LayerRangeCodec::Create(WithOrder(v.layout, OtherOrderOf(v.layout.order())), v.pool_scale);
    KVMESH_CHECK(ours.ok() && other.ok()) << ours.status().ToString();
    ours_.push_back(std::move(ours).value());
    other_order_.push_back(std::move(other).value());
    layers_.push_back(v.layout.data().num_layers);
  }
}

StreamReceiver::~StreamReceiver() {
  std::vector<Stream*> all;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [key, s] : streams_) all.push_back(s.get());
  }
  cv_.notify_all();
  for (Stream* s : all) {
    if (s->puller.joinable()) s->puller.join();
  }
}

void StreamReceiver::Reap() {
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (!it->second->done) {
      ++it;
      continue;
    }
    // Done: its puller has returned (or is returning from its last statement).
    if (it->second->puller.joinable()) it->second->puller.join();
    it = streams_.erase(it);
  }
}

void StreamReceiver::SetObserver(StreamObserver observer) {
  MutexLock lock(&mu_);
  observer_ = std::move(observer);
}

StreamReceiverStats StreamReceiver::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

std::int64_t StreamReceiver::active() const {
  MutexLock lock(&mu_);
  std::int64_t n = 0;
  for (const auto& [key, s] : streams_) n += s->done ? 0 : 1;
  return n;
}

Status StreamReceiver::Start(const std::string& from, std::span<const Token> prompt,
                             const SequenceOptions& options, Steady::time_point deadline,
                             const rpc::HandoffRequest& in, rpc::HandoffResponse* out) {
  if (in.pool_layers_size() != static_cast<int>(layers_.size())) {
    return Status::FailedPrecondition(StrCat("handoff stream: ", in.pool_layers_size(),
                                             " pools, this node has ", layers_.size()));
  }
  for (std::size_t p = 0; p < layers_.size(); ++p) {
    if (in.pool_layers(static_cast<int>(p)) != layers_[p]) {
      return Status::FailedPrecondition(StrCat("handoff stream: pool ", p, " has ",
                                               in.pool_layers(static_cast<int>(p)),
                                               " layers, ours ", layers_[p]));
    }
  }
  const std::pair<std::string, std::uint64_t> key{from, in.stream_id()};
  {
    MutexLock lock(&mu_);
    Reap();
    if (streams_.contains(key)) {
      return Status::InvalidArgument(StrCat("handoff stream ", in.stream_id(), " is in use"));
    }
    if (streams_.size() >= kMaxStreams) {
      return Status::ResourceExhausted(
          StrCat("handoff stream: ", streams_.size(), " streams are running already"));
    }
  }
  // The hello says whether the sender's pools are in the other order.
  const std::chrono::milliseconds left = TimeLeft(deadline);
  if (left.count() <= 0) return Status::TimedOut("handoff stream: deadline passed");
  KVMESH_RETURN_IF_ERROR(sessions_->Link(from, left).status());
  auto s = std::make_unique<Stream>();
  s->from = from;
  s->id = in.stream_id();
  s->prompt.assign(prompt.begin(), prompt.end());
  s->options = options;
  s->convert = sessions_->OtherOrder(from);
  s->start = Steady::now();
  s->deadline = deadline;
  BlockManager& m = cache_->manager();
  KVMESH_ASSIGN_OR_RETURN(RestorePlan plan, cache_->PlanRestore(prompt, options));
  const auto candidates = [&] {
    return std::span<const ContentId>(plan.content_ids)
        .subspan(static_cast<std::size_t>(plan.pool_blocks));
  };
  if (cache_->engine().CountHeld(candidates()) > 0) {
    // The local tiers first: what they hold is not moved (as remote fetch does).
    if (cache_->Prefetch(prompt, options).ok()) cache_->WaitForPrefetches();
    KVMESH_ASSIGN_OR_RETURN(plan, cache_->PlanRestore(prompt, options));
  }
  // The tree may change between the plan and the reservation (a block evicted, or stored by an
  // admission meanwhile: kFailedPrecondition): plan again, a few times.
  constexpr int kMaxPlans = 4;
  for (int attempt = 1;; ++attempt) {
    Result<RestoreReservation> reserved =
        m.ReserveRestore(prompt, options, plan, plan.num_candidates());
    if (reserved.ok()) {
      s->reservation = std::move(*reserved);
      break;
    }
    if (reserved.status().code() != StatusCode::kFailedPrecondition || attempt == kMaxPlans) {
      return reserved.status();
    }
    KVMESH_ASSIGN_OR_RETURN(plan, cache_->PlanRestore(prompt, options));
  }
  s->wanted = static_cast<std::int64_t>(plan.content_ids.size());
  s->had = plan.pool_blocks;
  out->set_wanted_blocks(s->wanted);
  out->set_had_blocks(s->had);
  out->set_moved_blocks(0);
  out->set_held_blocks(s->had);
  out->set_handoff_id(s->id);
  if (s->reservation.empty()) {
    out->set_streaming(false);  // nothing to pull
    return Status::Ok();
  }
  const std::int64_t count = s->reservation.count();
  const std::int64_t first = s->reservation.first_block();
  std::vector<ContentId> sender_ids;
  if (s->convert) {
    sender_ids = ContentIdsIn(sessions_->options().other_order_namespace_digest, prompt, options,
                              m.tokens_per_block(), static_cast<std::size_t>(first + count));
  }
  for (std::int64_t i = 0; i < count; ++i) {
    s->ids.push_back(s->convert ? sender_ids[static_cast<std::size_t>(first + i)]
                                : s->reservation.content_id(i));
  }
  s->announced.assign(layers_.size(), 0);
  s->received.assign(layers_.size(), 0);
  out->set_streaming(true);
  MutexLock lock(&mu_);
  if (stop_) return Status::Cancelled("handoff stream: the node is stopping");
  Stream* raw = s.get();
  ++stats_.streams;
  auto [it, inserted] = streams_.emplace(key, std::move(s));
  if (!inserted)
    return Status::InvalidArgument(StrCat("handoff stream ", key.second, " is in use"));
  raw->puller = std::thread([this, raw] { Run(raw); });
  KVMESH_LOG_INFO("handoff stream started from {} id {} wanted {} had {} reserved {} convert {}",
                  from, key.second, raw->wanted, raw->had, count, raw->convert);
  return Status::Ok();
}

Status StreamReceiver::Announce(const std::string& from, const rpc::HandoffStreamLayers& in) {
  MutexLock lock(&mu_);
  auto it = streams_.find({from, in.handoff_id()});
  if (it == streams_.end() || it->second->done) {
    return Status::NotFound(
        StrCat("handoff stream ", in.handoff_id(), " of ", from, " is not running here"));
  }
  Stream& s = *it->second;
  if (in.cancel()) {
    s.cancelled = true;
    cv_.notify_all();
    return Status::Ok();
  }
  if (in.layers_done_size() != static_cast<int>(layers_.size())) {
    return Status::InvalidArgument(StrCat("handoff stream: ", in.layers_done_size(),
                                          " layer counts, this node has ", layers_.size(),
                                          " pools"));
  }
  for (std::size_t p = 0; p < layers_.size(); ++p) {
    const std::int32_t n = in.layers_done(static_cast<int>(p));
    if (n < s.announced[p] || n > layers_[p]) {
      return Status::InvalidArgument(StrCat("handoff stream: pool ", p, " layers done ", n,
                                            ", announced ", s.announced[p], " of ", layers_[p]));
    }
  }
  for (std::size_t p = 0; p < layers_.size(); ++p) {
    s.announced[p] = in.layers_done(static_cast<int>(p));
  }
  cv_.notify_all();
  return Status::Ok();
}

Status StreamReceiver::Pull(Stream& s) {
  LayerRangeFetchOptions o;
  o.sessions = sessions_;
  o.engine = &cache_->engine();
  o.views = views_;
  o.theirs = s.convert ? other_order_ : ours_;
  o.ours = ours_;
  o.convert = s.convert;
  LayerRangeFetcher fetcher(std::move(o));
  const LayerRangeTarget target{&s.reservation, s.reservation.first_block(), s.ids};
  const std::size_t pools = layers_.size();
  std::vector<LayerSpan> ranges(pools);
  bool first_layer = false;
  for (;;) {
    {
      MutexLock lock(&mu_);
      const auto ready = [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
        if (stop_ || s.cancelled) return true;
        bool some = false;
        for (std::size_t p = 0; p < pools; ++p) some = some || s.announced[p] > s.received[p];
        return some;
      };
      const auto left = s.deadline - Steady::now();
      if (!AwaitConditionFor(cv_, mu_, std::max(left, Steady::duration::zero()), ready)) {
        return Status::TimedOut("handoff stream: deadline passed before every layer arrived");
      }
      if (stop_ || s.cancelled) return Status::Cancelled("handoff stream cancelled");
      for (std::size_t p = 0; p < pools; ++p) {
        ranges[p] = {s.received[p], s.announced[p]};
        // Layer 0 alone first, however much was announced: the first decodable layer as early
        // as it can be; later ranges take all that was announced (one pull for many layers).
        if (s.received[p] == 0) ranges[p].end = std::min(ranges[p].end, 1);
      }
    }
    KVMESH_ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, sessions_->Link(s.from));
    const std::int64_t converted_before = fetcher.stats().converted;
    const Status st = fetcher.Fetch(*link, s.id, target, ranges, s.deadline);
    StreamObserver observer;
    std::vector<std::int32_t> received;
    bool all = true;
    {
      MutexLock lock(&mu_);
      stats_.converted += fetcher.stats().converted - converted_before;
      if (!st.ok()) {
        if (st.IsCorruption()) ++stats_.refused;
        return st;
      }
      ++stats_.ranges;
      bool zero = true;  // layer 0 of every pool
      for (std::size_t p = 0; p < pools; ++p) {
        s.received[p] = ranges[p].end;
        all = all && s.received[p] == layers_[p];
        zero = zero && s.received[p] >= 1;
      }
      if (zero && !first_layer) {
        first_layer = true;
        stats_.first_layer_seconds += Since(s.start);
      }
      observer = observer_;
      received = s.received;
    }
    if (observer) observer(s.id, received);  // outside the lock: it may take its own
    if (all) return Status::Ok();
  }
}

void StreamReceiver::Run(Stream* s) {
  Status st = Pull(*s);
  std::int64_t moved = 0;
  if (st.ok()) {
    // Every layer of every reserved block verified: they enter the tree.
    const std::int64_t count = s->reservation.count();
    Result<PublishedRestore> published =
        cache_->manager().PublishRestore(std::move(s->reservation), count, /*keep_pinned=*/false);
    if (published.ok()) {
      moved = published->published;
    } else {
      st = published.status();
    }
  } else {
    s->reservation = RestoreReservation();  // freed unpublished: nobody saw a byte of it
    KVMESH_LOG_WARN("handoff stream failed from {} id {} error {}", s->from, s->id, st.ToString());
  }
  {
    MutexLock lock(&mu_);  // counted before the answer: the sender may look at once
    (st.ok() ? stats_.completed : stats_.failed) += 1;
    stats_.moved_blocks += moved;
    stats_.seconds += Since(s->start);
  }
  Answer(*s, moved, st);
  MutexLock lock(&mu_);
  s->done = true;
  cv_.notify_all();
}

void StreamReceiver::Answer(Stream& s, std::int64_t moved, const Status& why) {
  std::int64_t held = s.had;
  if (Result<RestorePlan> plan = cache_->manager().PlanRestore(s.prompt, s.options); plan.ok()) {
    held = plan->pool_blocks;
  }
  KVMESH_LOG_INFO("handoff stream received from {} id {} wanted {} had {} moved {} held {}", s.from,
                  s.id, s.wanted, s.had, moved, held);
  Result<std::shared_ptr<PeerLink>> link = sessions_->Link(s.from);
  if (!link.ok()) return;  // the sender's pins go at its deadline
  rpc::Request req;
  rpc::HandoffStreamAnswer* a = req.mutable_handoff()->mutable_answer();
  a->set_handoff_id(s.id);
  rpc::HandoffResponse* r = a->mutable_result();
  r->set_wanted_blocks(s.wanted);
  r->set_had_blocks(s.had);
  r->set_moved_blocks(moved);
  r->set_held_blocks(held);
  r->set_handoff_id(s.id);
  r->set_streaming(true);
  a->set_code(static_cast<std::uint32_t>(why.code()));
  a->set_message(why.message());
  Result<rpc::Response> answered = (*link)->Call(std::move(req));
  if (!answered.ok()) {
    KVMESH_LOG_DEBUG("handoff stream answer not taken by {} id {} error {}", s.from, s.id,
                     answered.status().ToString());
  }
}

}  // namespace kvmesh
