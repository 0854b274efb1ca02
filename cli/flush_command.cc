// kvctl flush: a running node writes its cached pool blocks and host-tier blocks (at or above the
// offload priority) into its disk tier now, what it does at shutdown (docs/kvctl.md).
// --json: kvmesh.flush/1.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

struct FlushOptions {
  NodeConnectionFlags node;
  bool json = false;
  bool progress = false;
  bool no_progress = false;
};

Status Run(const FlushOptions& o) {
  KVMESH_ASSIGN_OR_RETURN(NodeTarget target, ResolveNodeTarget(o.node));
  target.timeout_ms = std::max(target.timeout_ms, 600000);  // a large flush takes a while
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(target));
  rpc::Request req;
  req.mutable_flush();
  // The call in a thread, the elapsed time on the progress line meanwhile.
  auto call = std::async(std::launch::async, [&c, &req] { return c->Call(std::move(req)); });
  ProgressLine progress(ProgressEnabled(o.progress, o.no_progress), "flushing to the disk tier");
  const auto start = std::chrono::steady_clock::now();
  while (call.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
    progress.Update(
        0, 0,
        FormatSeconds(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  }
  progress.Finish();
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, call.get());
  const rpc::FlushResponse& f = r.flush();
  if (!f.has_disk()) return Status::FailedPrecondition("the node has no disk tier to flush to");
  if (o.json) {
    PrintDocument("kvmesh.flush/1", ProtoToJson(f));
  } else {
    std::printf(
        "flushed %lld blocks to the disk tier in %s (%lld failures); %lld were there already",
        static_cast<long long>(f.written()), FormatSeconds(f.seconds()).c_str(),
        static_cast<long long>(f.failures()), static_cast<long long>(f.already_on_disk()));
    if (f.not_fitting() > 0) {
      std::printf("; %lld did not fit in the disk tier's capacity (the most valuable were written)",
                  static_cast<long long>(f.not_fitting()));
    }
    std::printf("\n");
  }
  if (f.failures() > 0) {
    return Status::IoError(
        StrCat(f.failures(), " blocks could not be written (the node's log says why)"));
  }
  return Status::Ok();
}

}  // namespace

void RegisterFlushCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<FlushOptions>();
  CLI::App* cmd = app.add_subcommand(
      "flush", "a running node writes its cached and host-tier blocks to its disk tier now");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_flag("--json", o->json, "print kvmesh.flush/1 JSON");
  cmd->add_flag("--progress", o->progress, "elapsed time on stderr even when not a terminal");
  cmd->add_flag("--no-progress", o->no_progress, "no progress line");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
