#include "cli/replay_live.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <ostream>

#include "cli/live_output.h"
#include "common/strings.h"
#include "node/synthetic_engine.h"
#include "node/synthetic_stats_json.h"

namespace kvmesh::cli {
namespace {

bool IsUnixAddress(const std::string& a) {
  return a.rfind("unix:", 0) == 0 || a.find('/') != std::string::npos;
}

// The node's Unix socket: the address itself, or what the node says over TCP.
Result<std::string> EngineSocket(const NodeTarget& target) {
  if (IsUnixAddress(target.address)) return target.address;
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(target));
  KVMESH_ASSIGN_OR_RETURN(const rpc::StatusResponse s, c->GetStatus());
  if (s.unix_socket().empty()) {
    return Status::FailedPrecondition(
        StrCat("the node at ", target.address, " has no Unix socket for an engine to attach to"));
  }
  return s.unix_socket();
}

void PrintText(const SyntheticWorkloadStats& s, int engines, std::ostream& out) {
  const double secs = std::max(s.seconds, 1e-9);
  out << "replay      " << s.requests << " requests through the synthetic engine over " << engines
      << " connections in " << FormatFixed(s.seconds, 2) << " s ("
      << FormatFixed(static_cast<double>(s.requests) / secs, 1) << " requests/s, "
      << FormatFixed(static_cast<double>(s.prompt_tokens) / secs, 0) << " prompt tokens/s)\n";
  out << "tokens      " << s.prompt_tokens << " prompt tokens: reused " << s.reused_tokens
      << ", computed " << s.computed_tokens << "\n";
  out << "hit rate    " << HitRateText(s) << "\n";
  char worst[32];
  std::snprintf(worst, sizeof(worst), "%.2e", s.worst_error);
  out << "checks      " << s.checks << " decode outputs against the dense reference, "
      << s.check_failures << " failed (max error " << worst << ")\n";
  if (s.failed_requests > 0 || !s.first_error.empty()) {
    out << "failures    " << s.failed_requests << " requests; first: " << s.first_error << "\n";
  }
}

void PrintJson(const SyntheticWorkloadStats& s, int engines, std::ostream& out) {
  nlohmann::json j = WorkloadStatsJson(s);
  j["schema"] = "kvmesh.replay_live/1";
  j["engines"] = engines;
  j["seconds"] = s.seconds;
  out << j.dump(2) << "\n";
}

}  // namespace

void AddLiveReplayFlags(CLI::App* replay, LiveReplayFlags* f) {
  replay->add_flag("--live", f->live,
                   "replay through the synthetic engine against a running node (kvctl replay "
                   "--live --help: the connection and engine flags)");
  AddNodeConnectionFlags(replay, &f->node);
  replay->add_option("--engines", f->engines, "--live: engine connections (workers)")
      ->capture_default_str();
  replay
      ->add_option("--decode-tokens", f->decode_tokens, "--live: checked decode steps per request")
      ->capture_default_str();
  replay->add_option("--salt", f->salt, "--live: cache salt (tenant) of every request");
  replay->add_flag("--check-all-layers", f->check_all_layers,
                   "--live: check every layer (default: first, middle and last of each pool)");
}

Status RunLiveReplay(const LiveReplayFlags& f, std::span<const TraceRequest> trace,
                     int block_tokens, bool show_progress, bool json, std::ostream& out) {
  if (trace.empty()) return Status::InvalidArgument("the trace is empty: nothing to replay");
  if (f.engines < 1 || f.engines > 256) {
    return Status::InvalidArgument(StrCat("--engines ", f.engines, " is not within 1..256"));
  }
  KVMESH_ASSIGN_OR_RETURN(const NodeTarget target, ResolveNodeTarget(f.node));
  KVMESH_ASSIGN_OR_RETURN(const std::string socket, EngineSocket(target));
  NodeTarget engine_target = target;
  engine_target.address = socket;
  // The connection errors of every other command (unreachable, wrong secret), before the run.
  KVMESH_RETURN_IF_ERROR(ConnectToNode(engine_target).status());
  KVMESH_ASSIGN_OR_RETURN(const LoadedSecret secret, LoadSecret(target.secret));
  SyntheticEngineOptions e;
  e.client.address = socket;
  e.client.secret = secret.secret;
  e.client.client_name = "kvctl-replay";
  e.client.connect_timeout = std::chrono::milliseconds(target.timeout_ms);
  e.client.request_timeout = std::chrono::milliseconds(std::max(target.timeout_ms, 60000));
  e.concurrency = f.engines;
  e.block_tokens = block_tokens;
  e.decode_tokens = f.decode_tokens;
  e.salt = f.salt;
  e.check_all_layers = f.check_all_layers;
  ProgressLine progress(show_progress, "replay");
  std::mutex mu;
  e.progress = [&](std::int64_t done, std::int64_t total) {
    std::lock_guard<std::mutex> lock(mu);
    progress.Update(done, total, "requests");
  };
  KVMESH_ASSIGN_OR_RETURN(const SyntheticWorkloadStats s, RunSyntheticWorkload(e, trace));
  progress.Finish();
  if (json) {
    PrintJson(s, f.engines, out);
  } else {
    PrintText(s, f.engines, out);
  }
  if (s.failed_requests > 0 || s.check_failures > 0) {
    return Status::Corruption(StrCat(s.failed_requests, " requests failed and ", s.check_failures,
                                     " checks did not match: ", s.first_error));
  }
  return Status::Ok();
}

}  // namespace kvmesh::cli
