#include "node/cluster_service.h"

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "node/rpc_convert.h"

namespace kvmesh {

bool ClusterService::Handles(rpc::Request::BodyCase body) {
  return body == rpc::Request::kDirectoryUpdate || body == rpc::Request::kDirectoryLocate ||
         body == rpc::Request::kClusterLookup;
}

Status ClusterService::Handle(const SessionInfo& session, const rpc::Request& request,
                              rpc::Response* out) {
  const bool peer = session.role == rpc::CLIENT_ROLE_PEER;
  switch (request.body_case()) {
    case rpc::Request::kDirectoryUpdate: {
      if (!peer) return Status::PermissionDenied("directory updates come from peers only");
      const std::string& from = request.directory_update().node_id();
      if (peers_->Find(from) == nullptr) {
        return Status::FailedPrecondition(
            StrCat("directory update from '", from, "', which is not a member in this view"));
      }
      KVMESH_RETURN_IF_ERROR(directory_->ApplyUpdate(request.directory_update()));
      out->mutable_directory_update()->set_applied(request.directory_update().entries_size());
      return Status::Ok();
    }
    case rpc::Request::kDirectoryLocate:
      if (!peer) return Status::PermissionDenied("directory locates come from peers only");
      return directory_->AnswerLocate(request.directory_locate(), out->mutable_directory_locate());
    case rpc::Request::kClusterLookup: {
      const std::chrono::milliseconds timeout =
          request.timeout_ms() > 0 ? std::min(directory_->config().lookup_timeout,
                                              std::chrono::milliseconds(request.timeout_ms()))
                                   : directory_->config().lookup_timeout;
      return Lookup(request.cluster_lookup(), timeout, out->mutable_cluster_lookup());
    }
    default: return Status::InvalidArgument("not a cluster message");
  }
}

Status ClusterService::Lookup(const rpc::ClusterLookupRequest& in,
                              std::chrono::milliseconds timeout, rpc::ClusterLookupResponse* out) {
  KVMESH_ASSIGN_OR_RETURN(const SequenceOptions options, FromProto(in.options()));
  const std::span<const Token> tokens = TokensOf(in.tokens());
  BlockManager& m = cache_->manager();
  const std::int64_t t = m.tokens_per_block();
  out->set_prompt_tokens(static_cast<std::int64_t>(tokens.size()));
  out->set_tokens_per_block(static_cast<std::int32_t>(t));
  if (tokens.empty()) return Status::Ok();
  KVMESH_ASSIGN_OR_RETURN(const RestorePlan plan, m.PlanRestore(tokens, options));
  const std::vector<ContentId>& ids = plan.content_ids;
  out->set_full_blocks(static_cast<std::int64_t>(ids.size()));
  const LocateAllResult located = directory_->LocateAll(ids, timeout);
  out->set_members(located.members);
  for (const std::string& h : located.unreachable_homes) out->add_unreachable_homes(h);
  // Per node: its prefix run, counted by tier, until its first block missing.
  struct Run {
    std::int64_t blocks = 0;
    std::int64_t by_tier[3] = {0, 0, 0};
    bool open = true;
  };
  std::map<std::string, Run> runs;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (const BlockHolder& h : located.holders[i]) {
      if (i == 0) runs.try_emplace(h.node_id);
      auto it = runs.find(h.node_id);
      if (it == runs.end() || !it->second.open ||
          it->second.blocks != static_cast<std::int64_t>(i)) {
        continue;
      }
      ++it->second.blocks;
      ++it->second.by_tier[static_cast<int>(h.tier)];
    }
    for (auto& [node, run] : runs)
      run.open = run.open && run.blocks == static_cast<std::int64_t>(i + 1);
  }
  std::vector<std::pair<std::string, Run>> order(runs.begin(), runs.end());
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second.blocks != b.second.blocks) return a.second.blocks > b.second.blocks;
    if (a.second.by_tier[0] != b.second.by_tier[0])
      return a.second.by_tier[0] > b.second.by_tier[0];
    return a.first < b.first;
  });
  for (const auto& [node, run] : order) {
    if (run.blocks == 0) continue;
    rpc::NodePrefix* p = out->add_nodes();
    p->set_node_id(node);
    p->set_prefix_tokens(run.blocks * t);
    p->set_pool_tokens(run.by_tier[0] * t);
    p->set_host_tokens(run.by_tier[1] * t);
    p->set_disk_tokens(run.by_tier[2] * t);
  }
  if (out->nodes_size() > 0) out->set_recommended(out->nodes(0).node_id());
  return Status::Ok();
}

void ClusterService::FillStatus(rpc::ClusterStatus* out) const {
  const PeerTableStats t = peers_->stats();
  const MembershipHealth& h = t.health;
  out->set_membership(h.kind);
  out->set_membership_ok(h.ok);
  out->set_membership_error(h.error);
  out->set_lease(h.lease);
  out->set_joins(h.joins);
  out->set_membership_failures(h.failures);
  out->set_last_view_age_s(
      h.last_view.has_value()
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *h.last_view).count()
          : -1.0);
  out->set_members_joined(t.joined);
  out->set_members_left(t.left);
  out->set_members_rejoined(t.rejoined);
  std::vector<PeerInfo> members = peers_->Snapshot();
  PeerInfo self;
  self.node_id = peers_->self_id();
  self.control_address = self_address_;
  self.incarnation = static_cast<std::uint64_t>(h.lease);
  members.insert(
      std::upper_bound(members.begin(), members.end(), self,
                       [](const PeerInfo& a, const PeerInfo& b) { return a.node_id < b.node_id; }),
      self);
  for (const PeerInfo& p : members) {
    rpc::ClusterMember* m = out->add_members();
    m->set_node_id(p.node_id);
    m->set_control_address(p.control_address);
    m->set_incarnation(p.incarnation);
    m->set_self(p.node_id == self.node_id);
  }
  const DirectoryStats d = directory_->stats();
  out->set_directory_shard_ids(d.shard_ids);
  out->set_directory_held_ids(d.held_ids);
  out->set_directory_send_failures(d.send_failures);
  out->set_directory_events_lost(d.events_lost);
}

}  // namespace kvmesh
