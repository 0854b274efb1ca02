#include "cli/status_command.h"

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/node_connection.h"
#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

struct StatusOptions {
  NodeConnectionFlags node;
  bool json = false;
};

// The cluster lines under "hits": membership and its health, what changed, the directory shard.
void PrintClusterLines(const rpc::ClusterStatus& c) {
  std::string health;
  if (c.membership() == "etcd") {
    health = c.membership_ok()
                 ? StrCat("lease ", c.lease(), ", ")
                 : StrCat("etcd FAILING, keeping the last view (", c.membership_failures(),
                          " failed attempts): ", c.membership_error(), "; ");
    health += c.last_view_age_s() < 0
                  ? std::string("member list not read yet")
                  : StrCat("member list read ", FormatFixed(c.last_view_age_s(), 1), " s ago");
  } else {
    health = "the member list of the config";
  }
  std::printf("cluster     %s, %d members: %s; peer data path %s\n", c.membership().c_str(),
              c.members_size(), health.c_str(), c.peer_enabled() ? "on" : "off");
  std::printf("members     %lld joined, %lld left, %lld rejoined since the node started\n",
              static_cast<long long>(c.members_joined()), static_cast<long long>(c.members_left()),
              static_cast<long long>(c.members_rejoined()));
  std::printf(
      "directory   %lld ids homed here, %lld held here, %lld update failures, %lld KV events "
      "lost\n",
      static_cast<long long>(c.directory_shard_ids()),
      static_cast<long long>(c.directory_held_ids()),
      static_cast<long long>(c.directory_send_failures()),
      static_cast<long long>(c.directory_events_lost()));
}

// The members, after the tiers.
void PrintMembers(const rpc::ClusterStatus& c) {
  std::printf("\n%-16s %-24s %s\n", "MEMBER", "ADDRESS", "INCARNATION");
  for (const rpc::ClusterMember& m : c.members()) {
    const std::string id = m.self() ? m.node_id() + " (this)" : m.node_id();
    std::printf("%-16s %-24s %s\n", id.c_str(), m.control_address().c_str(),
                m.incarnation() == 0 ? "-" : std::to_string(m.incarnation()).c_str());
  }
}

void PrintTable(const rpc::StatusResponse& s) {
  std::printf("node        %s (pid %lld, version %s, up %.1f s)%s\n", s.node_id().c_str(),
              static_cast<long long>(s.pid()), s.version().c_str(), s.uptime_s(),
              s.draining() ? ", shutting down" : "");
  std::printf("model       %s, %s %s, %d tokens per block, tensor_parallel_size %d, device %s\n",
              s.model_name().c_str(), s.dtype().c_str(), s.kv_layout().c_str(),
              s.tokens_per_block(), s.tensor_parallel_size(), s.device().c_str());
  std::printf("listen      unix %s%s%s\n", s.unix_socket().c_str(),
              s.tcp_listen().empty() ? "" : ", tcp ", s.tcp_listen().c_str());
  std::printf("data_dir    %s\n", s.data_dir().c_str());
  std::printf(
      "activity    %lld connections, %lld sequences running, %lld requests (%lld failed, "
      "%lld refused by in-flight limits)\n",
      static_cast<long long>(s.connections()), static_cast<long long>(s.sequences()),
      static_cast<long long>(s.requests_total()), static_cast<long long>(s.requests_failed()),
      static_cast<long long>(s.requests_rejected()));
  const std::int64_t hits =
      s.pool_hit_blocks() + s.host_hit_blocks() + s.disk_hit_blocks() + s.remote_hit_blocks();
  std::printf(
      "hits        %lld admissions over %lld block positions: pool %lld, host %lld, disk "
      "%lld, remote %lld (hit rate %.4f)\n",
      static_cast<long long>(s.admissions()), static_cast<long long>(s.input_blocks()),
      static_cast<long long>(s.pool_hit_blocks()), static_cast<long long>(s.host_hit_blocks()),
      static_cast<long long>(s.disk_hit_blocks()), static_cast<long long>(s.remote_hit_blocks()),
      s.input_blocks() > 0 ? static_cast<double>(hits) / s.input_blocks() : 0.0);
  if (s.has_cluster()) PrintClusterLines(s.cluster());
  std::printf("\n%-5s %-24s %-5s %8s %8s %8s %8s %8s %8s %12s\n", "POOL", "KEY", "RANK", "BLOCKS",
              "FREE", "CACHED", "PRIVATE", "PINNED", "MOVING", "BYTES/BLOCK");
  for (const rpc::PoolStatus& p : s.pools()) {
    std::printf(
        "%-5d %-24s %-5d %8lld %8lld %8lld %8lld %8lld %8lld %12s\n", p.pool(), p.key().c_str(),
        p.rank(), static_cast<long long>(p.num_blocks()), static_cast<long long>(p.free_blocks()),
        static_cast<long long>(p.cached_blocks()), static_cast<long long>(p.private_blocks()),
        static_cast<long long>(p.pinned_blocks()), static_cast<long long>(p.moving_out_blocks()),
        FormatBytes(p.bytes_per_block()).c_str());
  }
  std::printf("\n%-5s %-12s %-12s %10s  %s\n", "TIER", "CAPACITY", "USED", "BLOCKS", "STATE");
  for (const rpc::TierStatus& t : s.tiers()) {
    if (!t.present()) {
      std::printf("%-5s %-12s %-12s %10s  %s\n", t.name().c_str(), "-", "-", "-", "not configured");
      continue;
    }
    const std::string state =
        t.disabled() ? "disabled" + (t.error().empty() ? "" : ": " + t.error()) : "ok";
    std::printf("%-5s %-12s %-12s %10lld  %s\n", t.name().c_str(),
                FormatBytes(t.capacity_bytes()).c_str(), FormatBytes(t.used_bytes()).c_str(),
                static_cast<long long>(t.entries()), state.c_str());
  }
  if (s.has_cluster()) PrintMembers(s.cluster());
}

Status PrintJson(const rpc::StatusResponse& s) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(s, &text, o).ok()) {
    return Status::Internal("status does not convert to JSON");
  }
  nlohmann::json j = {{"schema", "kvmesh.status/1"}, {"status", nlohmann::json::parse(text)}};
  std::cout << j.dump(2) << "\n";
  return Status::Ok();
}

Status Run(const StatusOptions& o) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  KVMESH_ASSIGN_OR_RETURN(const rpc::StatusResponse s, c->GetStatus());
  if (o.json) return PrintJson(s);
  PrintTable(s);
  return Status::Ok();
}

}  // namespace

void RegisterStatusCommand(CLI::App& app, CommandOutcome& outcome) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* cmd =
      app.add_subcommand("status", "what a running kvnode is doing: pools, tiers, hits");
  AddNodeConnectionFlags(cmd, &options->node);
  cmd->add_flag("--json", options->json, "print kvmesh.status/1 JSON");
  cmd->callback([options, &outcome] { outcome.Set(Run(*options)); });
}

}  // namespace kvmesh::cli
