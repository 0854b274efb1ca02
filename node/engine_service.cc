#include "node/engine_service.h"

#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "common/log.h"
#include "common/strings.h"
#include "node/cluster_service.h"
#include "node/handoff.h"
#include "node/node_metrics.h"
#include "node/operator_service.h"
#include "node/peer_service.h"
#include "node/remote_fetch.h"
#include "node/rpc_convert.h"

namespace kvmesh {

// A connection's running requests: the engine's ids → the node's. Touched only by Handle and
// CloseSession, which the server serialises per session.
class EngineService::EngineSession final : public SessionState {
 public:
  using SessionState::SessionState;
  std::unordered_map<std::uint64_t, RequestId> running;
};

void FillPoolStatus(const PoolStats& p, const RankPool& rp, rpc::PoolStatus* ps) {
  ps->set_pool(p.pool.value);
  ps->set_key(p.name);
  ps->set_rank(rp.rank);
  ps->set_window(p.window_tokens);
  ps->set_num_blocks(p.num_blocks);
  ps->set_bytes_per_block(rp.layout.BytesPerBlock());
  ps->set_free_blocks(p.free_blocks);
  ps->set_cached_blocks(p.cached_blocks);
  ps->set_private_blocks(p.private_blocks);
  ps->set_pinned_blocks(p.pinned_blocks);
  ps->set_evictable_blocks(p.evictable_blocks);
  ps->set_moving_out_blocks(p.moving_out_blocks);
}

EngineService::EngineService(NodeDescription description, TieredCache* cache,
                             const NodePools* pools)
    : description_(std::move(description)),
      cache_(cache),
      pools_(pools),
      started_(std::chrono::steady_clock::now()) {}

EngineService::~EngineService() = default;

std::shared_ptr<SessionState> EngineService::OpenSession(const SessionInfo& info) {
  open_sessions_.fetch_add(1);
  KVMESH_LOG_INFO("session opened id {} client {} role {} peer {}", info.session_id,
                  info.client_name, rpc::ClientRole_Name(info.role), info.peer);
  return std::make_shared<EngineSession>(info);
}

void EngineService::CloseSession(SessionState& session) {
  auto& s = static_cast<EngineSession&>(session);
  // Its streaming handoffs that still wait for layers will get none.
  if (handoff_ != nullptr) handoff_->CancelStreams(s.info().session_id);
  std::int64_t released = 0;
  for (const auto& [engine_id, id] : s.running) {
    Status st = cache_->manager().RemoveSequence(id);
    if (st.ok()) {
      ++released;
    } else {
      KVMESH_LOG_WARN("release on close failed session {} request {} error {}", s.info().session_id,
                      engine_id, st.ToString());
    }
  }
  s.running.clear();
  released_on_close_.fetch_add(released);
  open_sessions_.fetch_sub(1);
  if (released > 0) {
    KVMESH_LOG_WARN("session closed with running requests id {} client {} released {}",
                    s.info().session_id, s.info().client_name, released);
  } else {
    KVMESH_LOG_INFO("session closed id {} client {}", s.info().session_id, s.info().client_name);
  }
}

KvEventBatch EngineService::PollEvents(std::uint64_t from_seq, std::size_t max_events) {
  return cache_->manager().PollEvents(from_seq, max_events);
}

HandlerResult EngineService::Handle(SessionState& session, const rpc::Request& request) {
  const auto start = std::chrono::steady_clock::now();
  auto& s = static_cast<EngineSession&>(session);
  HandlerResult result;
  rpc::Response& r = result.response;
  Status st;
  switch (request.body_case()) {
    case rpc::Request::kAttach: st = Attach(s, r.mutable_attach(), &result.fds); break;
    case rpc::Request::kAdmit: st = Admit(s, request.admit(), r.mutable_admit()); break;
    case rpc::Request::kStoreFullBlocks:
      st = StoreFullBlocks(s, request.store_full_blocks(), r.mutable_store_full_blocks());
      break;
    case rpc::Request::kAppendTokens:
      st = AppendTokens(s, request.append_tokens(), r.mutable_append_tokens());
      break;
    case rpc::Request::kRelease:
      st = Release(s, request.release());
      r.mutable_release();
      break;
    case rpc::Request::kPrefetch: st = Prefetch(request.prefetch(), r.mutable_prefetch()); break;
    case rpc::Request::kLookup: st = Lookup(request.lookup(), r.mutable_lookup()); break;
    case rpc::Request::kPollEvents: {
      const rpc::PollEventsRequest& p = request.poll_events();
      const std::size_t max =
          p.max_events() == 0 ? 4096 : std::min<std::size_t>(p.max_events(), 65536);
      ToProto(PollEvents(p.from_seq(), max), r.mutable_events());
      break;
    }
    case rpc::Request::kStatus: FillStatus(r.mutable_status()); break;
    case rpc::Request::kHandOffTo:
      st = HandOffTo(s, request.hand_off_to(), r.mutable_hand_off_to());
      break;
    case rpc::Request::kHandOffLayers:
      st = handoff_ == nullptr
               ? Status::NotSupported("this node has no peer data path")
               : HandOffLayers(s, request.hand_off_layers(), r.mutable_hand_off_layers());
      break;
    default:
      if (handoff_ != nullptr && HandoffSender::Serves(request)) {
        // A decode node's layer fetch or answer of a stream this node sends (node/handoff.h).
        st = handoff_->HandlePeer(s.info(), request, &r);
      } else if (PeerService::Handles(request.body_case())) {
        st = peer_ == nullptr ? Status::NotSupported("this node has no peer data path")
                              : peer_->Handle(s.info(), request, &r);
      } else if (ClusterService::Handles(request.body_case())) {
        st = cluster_ == nullptr
                 ? Status::NotSupported("this node is not in a cluster (cluster.membership: none)")
                 : cluster_->Handle(s.info(), request, &r);
      } else if (!OperatorService::Handles(request.body_case())) {
        st = Status::InvalidArgument("unknown message type");
      } else if (operator_ == nullptr) {
        st = Status::NotSupported("this node does not answer operator requests");
      } else {
        st = operator_->Handle(request, &r);
      }
      break;
  }
  if (!st.ok()) {
    r.clear_body();
    result.fds.clear();
    SetError(r.mutable_error(), st);
  }
  if (metrics_ != nullptr) {
    metrics_->ObserveRequest(
        request.body_case(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), st.code());
  }
  return result;
}

Result<RequestId> EngineService::Running(EngineSession& s, std::uint64_t engine_id) const {
  auto it = s.running.find(engine_id);
  if (it == s.running.end()) {
    return Status::NotFound(StrCat("request ", engine_id, " is not running on this connection"));
  }
  return it->second;
}

Status EngineService::Attach(EngineSession& s, rpc::AttachResponse* out,
                             std::vector<int>* fds) const {
  if (!s.info().local) {
    return Status::FailedPrecondition(
        "Attach needs the node's Unix socket: the pools are shared memory of the node's host");
  }
  out->set_node_id(description_.node_id);
  out->set_model_name(description_.model_name);
  out->set_model_revision(description_.model_revision);
  out->set_tokens_per_block(cache_->manager().tokens_per_block());
  out->set_tensor_parallel_size(pools_->tensor_parallel_size());
  out->set_num_layers(description_.num_layers);
  out->set_num_attention_heads(description_.num_attention_heads);
  const ContentId ns = NamespaceDigest(cache_->manager().config().key_namespace);
  out->set_namespace_digest(std::string(reinterpret_cast<const char*>(ns.bytes.data()), ns.kBytes));
  KeyNamespace hnd = cache_->manager().config().key_namespace;
  hnd.layout = KvLayout::kHND;
  const ContentId of = NamespaceDigest(hnd);
  out->set_order_free_namespace_digest(
      std::string(reinterpret_cast<const char*>(of.bytes.data()), of.kBytes));
  pools_->DescribeForAttach(out, fds);
  return Status::Ok();
}

Status EngineService::HandOffTo(EngineSession& s, const rpc::HandOffToRequest& in,
                                rpc::HandoffResponse* out) {
  if (handoff_ == nullptr) return Status::NotSupported("this node has no peer data path");
  const std::string& to = in.to_node_id();
  if (to.empty()) return Status::InvalidArgument("hand_off_to: no node id");
  if (to == description_.node_id) {
    return Status::InvalidArgument(
        StrCat("hand_off_to: ", to, " is this node itself; name the decode node"));
  }
  KVMESH_ASSIGN_OR_RETURN(const SequenceOptions options, FromProto(in.options()));
  // A member is reached where membership says; an address for it must agree (it never moves a
  // member). A node outside the membership is a contact at the address given (peer_table.h).
  if (const std::shared_ptr<const PeerInfo> member = handoff_peers_->Find(to); member != nullptr) {
    if (!in.to_address().empty() && in.to_address() != member->control_address) {
      return Status::InvalidArgument(StrCat(
          "hand_off_to: ", to, " is a member of this node's cluster at ", member->control_address,
          ", not ", in.to_address(), " (leave the address out, or give that one)"));
    }
  } else if (!in.to_address().empty()) {
    handoff_peers_->SetContact(to, in.to_address());
  } else if (handoff_peers_->Resolve(to) == nullptr) {
    return Status::NotFound(
        StrCat("hand_off_to: ", to, " is not a member of this node's cluster; give its address"));
  }
  const std::shared_ptr<const PeerInfo> target = handoff_peers_->Resolve(to);
  const std::string where = StrCat("node ", description_.node_id, " handing off to ", to, " at ",
                                   target != nullptr ? target->control_address : in.to_address());
  const std::chrono::milliseconds deadline(in.deadline_ms() == 0 ? 5000 : in.deadline_ms());
  Result<HandoffResult> done = HandoffResult{};
  if (in.stream()) {
    KVMESH_ASSIGN_OR_RETURN(const RequestId id, Running(s, in.request_id()));
    done = handoff_->HandOffStream(to, TokensOf(in.tokens()), options, id, deadline,
                                   s.info().session_id);
  } else {
    done = handoff_->HandOff(to, TokensOf(in.tokens()), options, deadline);
  }
  if (!done.ok()) return done.status().WithContext(where);
  const HandoffResult& r = *done;
  out->set_wanted_blocks(r.wanted_blocks);
  out->set_had_blocks(r.had_blocks);
  out->set_moved_blocks(r.moved_blocks);
  out->set_held_blocks(r.held_blocks);
  out->set_handoff_id(r.handoff_id);
  out->set_streaming(r.streaming);
  return Status::Ok();
}

Status EngineService::HandOffLayers(EngineSession& s, const rpc::HandoffLayersDone& in,
                                    rpc::HandoffResponse* out) {
  if (in.layers_done() < 0 || in.layers_done() > description_.num_layers) {
    return Status::InvalidArgument(StrCat("hand_off_layers: layers_done ", in.layers_done(),
                                          " of a model of ", description_.num_layers, " layers"));
  }
  // Model layers [0, layers_done) → each pool's local layers written: the leading ones whose
  // global ids are below it (prefill writes the layers in order).
  std::vector<std::int32_t> per_pool;
  for (const RankPool& p : pools_->pools()) {
    std::int32_t n = 0;
    while (n < static_cast<std::int32_t>(p.layers.size()) &&
           p.layers[static_cast<std::size_t>(n)] < in.layers_done()) {
      ++n;
    }
    per_pool.push_back(n);
  }
  // Only this connection's streams.
  const std::uint64_t owner = s.info().session_id;
  KVMESH_RETURN_IF_ERROR(handoff_->LayersReady(in.handoff_id(), per_pool, owner));
  out->set_handoff_id(in.handoff_id());
  out->set_streaming(true);
  if (!in.wait()) return Status::Ok();
  KVMESH_ASSIGN_OR_RETURN(const HandoffResult r, handoff_->AwaitStream(in.handoff_id(), owner));
  out->set_wanted_blocks(r.wanted_blocks);
  out->set_had_blocks(r.had_blocks);
  out->set_moved_blocks(r.moved_blocks);
  out->set_held_blocks(r.held_blocks);
  return Status::Ok();
}

Status EngineService::Admit(EngineSession& s, const rpc::AdmitRequest& in,
                            rpc::AdmitResponse* out) {
  if (s.running.contains(in.request_id())) {
    return Status::InvalidArgument(
        StrCat("request ", in.request_id(), " is already running on this connection"));
  }
  KVMESH_ASSIGN_OR_RETURN(const SequenceOptions options, FromProto(in.options()));
  const RequestId id{next_request_.fetch_add(1)};
  AdmissionHits hits;
  RemoteFetchResult fetched;  // pins the fetched chain until the sequence holds it
  if (fetcher_ != nullptr) fetched = fetcher_->Fetch(TokensOf(in.tokens()), options);
  // The fetched blocks are in the pool now: the admission counts them as remote hits.
  if (!fetched.ids.empty()) cache_->MarkRemote(fetched.ids);
  KVMESH_ASSIGN_OR_RETURN(const AddSequenceResult added,
                          cache_->AddSequence(id, TokensOf(in.tokens()), options, &hits));
  fetched.pins.Release();
  s.running.emplace(in.request_id(), id);
  out->set_remote_hit_blocks(hits.remote_blocks);
  out->set_reused_tokens(added.reused_tokens);
  out->set_reused_blocks(added.reused_blocks);
  out->set_partial_tokens(added.partial_tokens);
  out->set_partial(static_cast<std::uint32_t>(added.partial));
  for (const BlockTable& t : added.tables) ToProto(t, out->add_tables());
  out->set_pool_hit_blocks(hits.pool_blocks);
  out->set_host_hit_blocks(hits.host_blocks);
  out->set_disk_hit_blocks(hits.disk_blocks);
  return Status::Ok();
}

Status EngineService::StoreFullBlocks(EngineSession& s, const rpc::StoreFullBlocksRequest& in,
                                      rpc::StoreFullBlocksResponse* out) {
  KVMESH_ASSIGN_OR_RETURN(const RequestId id, Running(s, in.request_id()));
  if (!description_.enable_block_reuse) {
    out->set_stored_blocks(0);
    return Status::Ok();
  }
  std::optional<std::int64_t> computed;
  if (in.has_num_computed_tokens()) computed = in.num_computed_tokens();
  KVMESH_ASSIGN_OR_RETURN(const std::int64_t stored,
                          cache_->manager().StoreFullBlocks(id, computed));
  out->set_stored_blocks(stored);
  return Status::Ok();
}

Status EngineService::AppendTokens(EngineSession& s, const rpc::AppendTokensRequest& in,
                                   rpc::AppendTokensResponse* out) {
  KVMESH_ASSIGN_OR_RETURN(const RequestId id, Running(s, in.request_id()));
  KVMESH_ASSIGN_OR_RETURN(const AppendResult appended,
                          cache_->manager().AppendTokens(id, TokensOf(in.tokens())));
  out->set_num_tokens(appended.num_tokens);
  for (const auto& blocks : appended.new_blocks) {
    out->add_new_blocks()->mutable_values()->Add(blocks.begin(), blocks.end());
  }
  for (const auto& positions : appended.released_positions) {
    out->add_released_positions()->mutable_values()->Add(positions.begin(), positions.end());
  }
  return Status::Ok();
}

Status EngineService::Release(EngineSession& s, const rpc::ReleaseRequest& in) {
  KVMESH_ASSIGN_OR_RETURN(const RequestId id, Running(s, in.request_id()));
  KVMESH_RETURN_IF_ERROR(cache_->manager().RemoveSequence(id));
  s.running.erase(in.request_id());
  return Status::Ok();
}

Status EngineService::Prefetch(const rpc::PrefetchRequest& in, rpc::PrefetchResponse* out) {
  KVMESH_ASSIGN_OR_RETURN(const SequenceOptions options, FromProto(in.options()));
  KVMESH_ASSIGN_OR_RETURN(const std::int64_t n, cache_->Prefetch(TokensOf(in.tokens()), options));
  out->set_blocks(n);
  return Status::Ok();
}

Status EngineService::Lookup(const rpc::LookupRequest& in, rpc::LookupResponse* out) {
  KVMESH_ASSIGN_OR_RETURN(const SequenceOptions options, FromProto(in.options()));
  const std::span<const Token> tokens = TokensOf(in.tokens());
  BlockManager& m = cache_->manager();
  KVMESH_ASSIGN_OR_RETURN(const PrefixLookup pool, m.LookupPrefix(tokens, options));
  out->set_prompt_tokens(static_cast<std::int64_t>(tokens.size()));
  out->set_pool_tokens(pool.cached_tokens);
  if (tokens.empty()) return Status::Ok();
  // Past the pool's full blocks: each candidate block, in order, while some tier holds every
  // pool's block of it — counted as host when the host tier holds it, else as disk.
  KVMESH_ASSIGN_OR_RETURN(const RestorePlan plan, m.PlanRestore(tokens, options));
  // What Admit's restore would find (OffloadEngine::CountHeld, also a block on its way from the
  // host tier to RocksDB), and where each block would be read from.
  std::vector<KvTier> tiers;
  cache_->engine().CountHeld(std::span<const ContentId>(plan.content_ids)
                                 .subspan(static_cast<std::size_t>(plan.pool_blocks)),
                             &tiers);
  const auto host =
      static_cast<std::int64_t>(std::count(tiers.begin(), tiers.end(), KvTier::kHost));
  const auto disk = static_cast<std::int64_t>(tiers.size()) - host;
  if (host + disk > 0) {
    // A restore supersedes a partly matching block the pool may hold after its full blocks.
    const std::int64_t t = m.tokens_per_block();
    out->set_pool_tokens(plan.pool_blocks * t);
    out->set_host_tokens(host * t);
    out->set_disk_tokens(disk * t);
  }
  return Status::Ok();
}

void EngineService::FillStatus(rpc::StatusResponse* out) const {
  const NodeDescription& d = description_;
  out->set_node_id(d.node_id);
  out->set_version(d.version);
  out->set_pid(::getpid());
  out->set_uptime_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  out->set_device(d.device);
  out->set_model_name(d.model_name);
  out->set_tokens_per_block(cache_->manager().tokens_per_block());
  out->set_dtype(d.dtype);
  out->set_kv_layout(d.kv_layout);
  out->set_tensor_parallel_size(pools_->tensor_parallel_size());
  out->set_unix_socket(d.unix_socket);
  out->set_tcp_listen(d.tcp_listen);
  out->set_data_dir(d.data_dir);
  out->set_metrics_listen(d.metrics_listen);
  const BlockManagerStats ms = cache_->manager().GetStats();
  for (const PoolStats& p : ms.pools) {
    FillPoolStatus(p, pools_->pools()[static_cast<std::size_t>(p.pool.value)], out->add_pools());
  }
  out->set_sequences(ms.running_sequences);
  const TieredCacheStats ts = cache_->stats();
  const auto tier = [out](std::string name, bool present, const TierStats& t) {
    rpc::TierStatus* s = out->add_tiers();
    s->set_name(std::move(name));
    s->set_present(present);
    s->set_capacity_bytes(t.capacity_bytes);
    s->set_used_bytes(t.used_bytes);
    s->set_entries(t.entries);
    s->set_disabled(t.disabled);
  };
  tier("host", ts.offload.has_host, ts.offload.host);
  tier("disk", ts.offload.has_disk, ts.offload.disk);
  out->set_admissions(ts.admissions);
  out->set_input_blocks(ts.input_blocks);
  out->set_pool_hit_blocks(ts.pool_hit_blocks);
  out->set_host_hit_blocks(ts.host_hit_blocks);
  out->set_disk_hit_blocks(ts.disk_hit_blocks);
  out->set_remote_hit_blocks(ts.remote_hit_blocks);
  if (cluster_ != nullptr) {
    cluster_->FillStatus(out->mutable_cluster());
    out->mutable_cluster()->set_peer_enabled(peer_ != nullptr);
  }
  if (const ControlServer* server = server_.load(); server != nullptr) {
    const ControlServerStats ss = server->stats();
    out->set_connections(ss.connections);
    out->set_requests_total(ss.requests_total);
    out->set_requests_failed(ss.requests_failed);
    out->set_requests_rejected(ss.requests_rejected);
    out->set_draining(server->draining());
  }
}

}  // namespace kvmesh
