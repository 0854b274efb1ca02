// kvctl route: where in the cluster a prompt's prefix is cached — for each node, how many of the
// prompt's tokens it holds as a prefix and in which tiers, from the cluster prefix directory of
// the node asked (ClusterLookup; node/cluster_service.h), without asking every node — and which
// node a router should send the prompt to. --explain adds the reasoning per node; --json prints
// kvmesh.route/1.
//
// The prompt: cli/prompt_tokens.h.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "cli/prompt_tokens.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

struct RouteOptions {
  NodeConnectionFlags node;
  PromptFlags prompt;
  bool explain = false;
  bool json = false;
};

std::string Why(const rpc::ClusterLookupResponse& r, const rpc::NodePrefix& n, bool first) {
  const std::int64_t t = std::max<std::int64_t>(1, r.tokens_per_block());
  std::string why =
      StrCat(n.prefix_tokens() / t, " of ", r.full_blocks(), " full blocks from the start");
  if (n.host_tokens() + n.disk_tokens() > 0) {
    why += StrCat(" (", n.host_tokens() / t, " to onboard from host, ", n.disk_tokens() / t,
                  " from disk)");
  }
  if (first) why += "; longest prefix, then most in the pool: picked";
  return why;
}

Status Run(const RouteOptions& o) {
  KVMESH_ASSIGN_OR_RETURN(const std::vector<std::int32_t> tokens, PromptTokens(o.prompt));
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  rpc::Request req;
  req.mutable_cluster_lookup()->mutable_tokens()->Add(tokens.begin(), tokens.end());
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response resp, c->Call(std::move(req)));
  const rpc::ClusterLookupResponse& r = resp.cluster_lookup();
  if (o.json) {
    PrintDocument("kvmesh.route/1", ProtoToJson(r));
    return Status::Ok();
  }
  // A prompt that ends on a block boundary: its last block holds the last token, which is always
  // recomputed, so that block is not counted.
  const bool last_block_recomputed =
      r.tokens_per_block() > 0 && r.prompt_tokens() == (r.full_blocks() + 1) * r.tokens_per_block();
  std::printf(
      "prompt %lld tokens, %lld full blocks of %d%s; %d members in view\n",
      static_cast<long long>(r.prompt_tokens()), static_cast<long long>(r.full_blocks()),
      r.tokens_per_block(),
      last_block_recomputed ? " (not the last: it ends on the last token, always recomputed)" : "",
      r.members());
  std::vector<std::string> headers{"node", "prefix", "pool", "host", "disk"};
  if (o.explain) headers.emplace_back("why");
  Table table(headers, {false, true, true, true, true, false});
  for (int i = 0; i < r.nodes_size(); ++i) {
    const rpc::NodePrefix& n = r.nodes(i);
    std::vector<std::string> row{n.node_id(), StrCat(n.prefix_tokens()), StrCat(n.pool_tokens()),
                                 StrCat(n.host_tokens()), StrCat(n.disk_tokens())};
    if (o.explain) row.push_back(Why(r, n, i == 0));
    table.AddRow(std::move(row));
  }
  if (table.rows() > 0) table.Print();
  for (const std::string& h : r.unreachable_homes()) {
    std::printf("home %s did not answer: its blocks count as held nowhere\n", h.c_str());
  }
  std::printf("route to: %s\n", r.recommended().empty() ? "any node (no node holds a prefix of it)"
                                                        : r.recommended().c_str());
  return Status::Ok();
}

}  // namespace

void RegisterRouteCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<RouteOptions>();
  CLI::App* cmd = app.add_subcommand(
      "route",
      "which nodes of the cluster hold how much of a prompt's prefix, in which tier, and which "
      "node a router should pick (from the prefix directory)");
  AddNodeConnectionFlags(cmd, &o->node);
  AddPromptFlags(cmd, &o->prompt);
  cmd->add_flag("--explain", o->explain, "say per node why it ranks where it does");
  cmd->add_flag("--json", o->json, "print kvmesh.route/1 JSON");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
