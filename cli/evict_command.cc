// kvctl evict: drops unpinned cached blocks of a running node from its pool on request — a block
// and every block below it (by content id or a unique prefix), or every block of a priority below
// --below-priority — as eviction would drop them (docs/kvctl.md has the exact rule).
// --json: kvmesh.evict/1.
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

struct EvictOptions {
  NodeConnectionFlags node;
  std::string block;
  std::optional<int> below_priority;
  bool dry_run = false;
  bool json = false;
};

Status Run(const EvictOptions& o) {
  if (o.block.empty() == !o.below_priority.has_value()) {
    return Status::InvalidArgument("give a block (content id or prefix) or --below-priority P");
  }
  if (o.below_priority && (*o.below_priority < 0 || *o.below_priority > 101)) {
    return Status::InvalidArgument(
        StrCat("--below-priority ", *o.below_priority, " is not within 0..101"));
  }
  KVMESH_ASSIGN_OR_RETURN(NodeTarget target, ResolveNodeTarget(o.node));
  target.timeout_ms = std::max(target.timeout_ms, 600000);  // offloads of many blocks take a while
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(target));
  rpc::Request req;
  rpc::EvictRequest* e = req.mutable_evict();
  e->set_content_id(o.block);
  if (o.below_priority) e->set_below_priority(*o.below_priority);
  e->set_dry_run(o.dry_run);
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, c->Call(std::move(req)));
  const rpc::EvictResponse& v = r.evict();
  if (o.json) {
    PrintDocument("kvmesh.evict/1", ProtoToJson(v));
    return Status::Ok();
  }
  std::printf(
      "%s %lld blocks%s; kept %lld pinned, %lld holding kept blocks below them, %lld "
      "missing a window-pool block\n",
      v.dry_run() ? "would evict" : "evicted", static_cast<long long>(v.evicted()),
      v.dry_run() ? ""
                  : StrCat(" (", v.offloaded(), " pool blocks copied into a tier first)").c_str(),
      static_cast<long long>(v.kept_pinned()), static_cast<long long>(v.kept_for_descendants()),
      static_cast<long long>(v.kept_partial()));
  return Status::Ok();
}

}  // namespace

void RegisterEvictCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<EvictOptions>();
  CLI::App* cmd = app.add_subcommand(
      "evict",
      "drop unpinned cached blocks from a running node's pool: a block and its subtree, "
      "or every block below a priority");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("block", o->block,
                  "content id or unique prefix: this block and every block below it");
  cmd->add_option("--below-priority", o->below_priority,
                  "every block whose priority is below P (0..101; 101: every priority)");
  cmd->add_flag("--dry-run", o->dry_run, "count what would go, change nothing");
  cmd->add_flag("--json", o->json, "print kvmesh.evict/1 JSON");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
