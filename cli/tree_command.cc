// kvctl tree: the prefix tree of a running node — a summary (nodes, domains, depth histogram,
// fan-out) and, from a content id prefix (or with --dump from the roots), a subtree
// (docs/kvctl.md). --json: kvmesh.tree/1.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

struct TreeOptions {
  NodeConnectionFlags node;
  std::string prefix;
  bool dump = false;
  int depth = 4;
  std::uint32_t max_nodes = 200;
  bool json = false;
};

// "0:64 1:64 2:60": non-zero bins of a histogram; bins beyond 24 summed as "25+".
std::string Histogram(const google::protobuf::RepeatedField<std::int64_t>& h, bool last_is_more) {
  std::string s;
  std::int64_t tail = 0;
  for (int i = 0; i < h.size(); ++i) {
    if (h[i] == 0) continue;
    if (i > 24 && !last_is_more) {
      tail += h[i];
      continue;
    }
    const std::string bin = last_is_more && i == h.size() - 1 ? StrCat(i, "+") : StrCat(i);
    s += (s.empty() ? "" : " ") + bin + ":" + StrCat(h[i]);
  }
  if (tail > 0) s += StrCat(" 25+:", tail);
  return s.empty() ? "-" : s;
}

void PrintSummary(const rpc::TreeResponse& t) {
  std::printf("tree        %lld nodes in %lld domains: %lld leaves, %lld pinned, max depth %d\n",
              static_cast<long long>(t.nodes()), static_cast<long long>(t.domains()),
              static_cast<long long>(t.leaves()), static_cast<long long>(t.pinned_nodes()),
              t.max_depth());
  std::printf("depth       %s\n", Histogram(t.depth_histogram(), false).c_str());
  std::printf("fan-out     %s (children of inner nodes)\n",
              Histogram(t.fanout_histogram(), true).c_str());
  std::string domains;
  for (int i = 0; i < std::min(t.domain_nodes_size(), 8); ++i) {
    domains += (domains.empty() ? "" : ", ") + StrCat(t.domain_nodes(i));
  }
  if (t.domain_nodes_size() > 8) domains += StrCat(", ... (", t.domain_nodes_size(), " domains)");
  std::printf("domains     %s nodes\n", domains.empty() ? "-" : domains.c_str());
}

void PrintDump(const rpc::TreeResponse& t) {
  std::printf("\n");
  Table table({"CONTENT ID", "DEPTH", "CHILDREN", "PRIO", "PINS", "BLOCKS"},
              {false, true, true, true, true, false});
  for (const rpc::TreeNodeEntry& n : t.dump()) {
    std::string blocks;
    for (const std::int32_t b : n.block_ids()) {
      blocks += (blocks.empty() ? "" : ",") + (b < 0 ? std::string("-") : StrCat(b));
    }
    table.AddRow(
        {std::string(static_cast<std::size_t>(2 * n.level()), ' ') + ShortId(n.content_id()),
         StrCat(n.depth()), StrCat(n.children()), StrCat(n.priority()), StrCat(n.pins()), blocks});
  }
  table.Print();
  std::printf("%d nodes dumped%s\n", t.dump_size(),
              t.truncated() ? " (cut at --depth or --max-nodes)" : "");
}

Status Run(const TreeOptions& o) {
  if (o.depth < 1) return Status::InvalidArgument(StrCat("--depth ", o.depth, " is below 1"));
  if (o.max_nodes < 1 || o.max_nodes > 10000) {
    return Status::InvalidArgument(StrCat("--max-nodes ", o.max_nodes, " is not within 1..10000"));
  }
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  rpc::Request req;
  rpc::TreeRequest* t = req.mutable_tree();
  t->set_prefix(o.prefix);
  if (!o.prefix.empty() || o.dump) {
    t->set_max_depth(o.depth);
    t->set_max_nodes(o.max_nodes);
  }
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, c->Call(std::move(req)));
  if (o.json) {
    PrintDocument("kvmesh.tree/1", ProtoToJson(r.tree()));
    return Status::Ok();
  }
  PrintSummary(r.tree());
  if (!o.prefix.empty() || o.dump) PrintDump(r.tree());
  return Status::Ok();
}

}  // namespace

void RegisterTreeCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<TreeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tree", "a running node's prefix tree: summary, and a subtree from a content id prefix");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("prefix", o->prefix, "content id, or a unique prefix of one: dump its subtree");
  cmd->add_flag("--dump", o->dump, "dump from the roots (without a prefix)");
  cmd->add_option("--depth", o->depth, "levels of the dump below its start")->capture_default_str();
  cmd->add_option("--max-nodes", o->max_nodes, "nodes of the dump at most (1..10000)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print kvmesh.tree/1 JSON");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
