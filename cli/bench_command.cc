// kvctl bench: a short control-plane load run against a running node — N connections sending
// Lookups (a cached prompt and a missing one) and Status calls, optionally admissions, for a fixed
// time — with requests per second, latency percentiles per request kind and errors
// (node/control_load.h; docs/kvctl.md). It writes: the looked-up cached prompt is admitted and
// stored once before the run, at priority 0. A node that closes the connections (stops, dies) ends
// the run early: the rate is over the time it answered. --json: kvmesh.bench/1. Exit 1 when a
// request failed.
#include <cstdio>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"
#include "node/control_load.h"

namespace kvmesh::cli {
namespace {

using Json = nlohmann::json;

struct BenchOptions {
  NodeConnectionFlags node;
  int clients = 16;
  double duration_s = 3;
  std::int64_t prompt_tokens = 16384;
  bool admit = false;
  bool json = false;
  bool progress = false;
  bool no_progress = false;
};

Status Run(const BenchOptions& o) {
  if (o.clients < 1 || o.clients > 1024) {
    return Status::InvalidArgument(StrCat("--clients ", o.clients, " is not within 1..1024"));
  }
  if (o.duration_s <= 0 || o.duration_s > 600) {
    return Status::InvalidArgument(StrCat("--duration ", o.duration_s, " is not within 0..600 s"));
  }
  if (o.prompt_tokens < 2) return Status::InvalidArgument("--prompt-tokens must be at least 2");
  KVMESH_ASSIGN_OR_RETURN(const NodeTarget target, ResolveNodeTarget(o.node));
  // The same connection checks and messages as every other command.
  KVMESH_RETURN_IF_ERROR(ConnectToNode(target).status());
  KVMESH_ASSIGN_OR_RETURN(const LoadedSecret secret, LoadSecret(target.secret));
  ControlLoadOptions lo;
  lo.client.address = target.address;
  lo.client.secret = secret.secret;
  lo.client.role = rpc::CLIENT_ROLE_OPERATOR;
  lo.client.connect_timeout = std::chrono::milliseconds(target.timeout_ms);
  lo.client.request_timeout = std::chrono::milliseconds(target.timeout_ms);
  lo.clients = o.clients;
  lo.duration = std::chrono::milliseconds(static_cast<std::int64_t>(o.duration_s * 1000));
  lo.prompt_tokens = o.prompt_tokens;
  lo.admit_release = o.admit;
  ProgressLine progress(ProgressEnabled(o.progress, o.no_progress), "bench");
  const std::int64_t total_ms = lo.duration.count();
  lo.progress = [&](std::chrono::milliseconds elapsed, std::int64_t requests) {
    progress.Update(elapsed.count(), total_ms, StrCat(requests, " requests"));
  };
  KVMESH_ASSIGN_OR_RETURN(const ControlLoadResult r, RunControlLoad(lo));
  progress.Finish();
  if (o.json) {
    Json ops = Json::array();
    for (const ControlLoadOp& op : r.ops) {
      ops.push_back({{"op", op.name},
                     {"requests", static_cast<std::int64_t>(op.latencies_us.size()) + op.errors},
                     {"errors", op.errors},
                     {"p50_us", LatencyQuantile(op.latencies_us, 0.5)},
                     {"p90_us", LatencyQuantile(op.latencies_us, 0.9)},
                     {"p99_us", LatencyQuantile(op.latencies_us, 0.99)}});
    }
    PrintDocument("kvmesh.bench/1", {{"clients", o.clients},
                                     {"seconds", r.seconds},
                                     {"prompt_tokens", o.prompt_tokens},
                                     {"cached_tokens", r.cached_tokens},
                                     {"requests", r.requests},
                                     {"requests_per_s", r.ops_per_s()},
                                     {"errors", r.errors},
                                     {"errors_by_code", r.errors_by_code},
                                     {"first_error", r.first_error},
                                     {"clients_lost", r.clients_lost},
                                     {"ops", ops}});
  } else {
    std::printf("bench       %d clients for %.2f s: %lld requests (%.0f per second), %lld errors\n",
                o.clients, r.seconds, static_cast<long long>(r.requests), r.ops_per_s(),
                static_cast<long long>(r.errors));
    if (r.clients_lost > 0) {
      std::printf(
          "lost        the node closed %d of the %d connections; the run stopped after %.2f s of "
          "the %.2f s asked for, and the rate counts only those\n",
          r.clients_lost, o.clients, r.seconds, o.duration_s);
    }
    std::printf("prompt      %lld tokens, %lld of them cached on the node\n\n",
                static_cast<long long>(o.prompt_tokens), static_cast<long long>(r.cached_tokens));
    Table t({"REQUEST", "COUNT", "ERRORS", "P50", "P90", "P99"},
            {false, true, true, true, true, true});
    for (const ControlLoadOp& op : r.ops) {
      t.AddRow({op.name, StrCat(op.latencies_us.size() + static_cast<std::size_t>(op.errors)),
                StrCat(op.errors), FormatSeconds(LatencyQuantile(op.latencies_us, 0.5) * 1e-6),
                FormatSeconds(LatencyQuantile(op.latencies_us, 0.9) * 1e-6),
                FormatSeconds(LatencyQuantile(op.latencies_us, 0.99) * 1e-6)});
    }
    t.Print();
    for (const auto& [code, n] : r.errors_by_code) {
      std::printf("errors      %s: %lld\n", code.c_str(), static_cast<long long>(n));
    }
  }
  if (r.errors > 0)
    return Status::ResourceExhausted(StrCat(r.errors, " requests failed; first: ", r.first_error));
  return Status::Ok();
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "a short control-plane load run against a running node: requests/s, latency, errors");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("--clients", o->clients, "connections, one thread each")->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "seconds")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens,
                  "tokens of the looked-up prompts; the cached one is written to the node once "
                  "before the run, at priority 0 (the first to be evicted)")
      ->capture_default_str();
  cmd->add_flag("--admit", o->admit,
                "also admit and release a short prompt per client (more writes, during the run)");
  cmd->add_flag("--json", o->json, "print kvmesh.bench/1 JSON");
  cmd->add_flag("--progress", o->progress, "progress on stderr even when not a terminal");
  cmd->add_flag("--no-progress", o->no_progress, "no progress line");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
