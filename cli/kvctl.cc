// kvctl: the operator's tool. One subcommand per file (cli/<name>_command.{h,cc}), registered
// below; see cli/command.h for how commands report errors and docs/kvctl.md for every command.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/command.h"
#include "cli/layout_command.h"
#include "cli/live_commands.h"
#include "cli/replay_command.h"
#include "cli/status_command.h"

int main(int argc, char** argv) {
  // Commands return Status for everything they expect; this catch is the last line for what they
  // do not (allocation failure, a library that throws): one line and exit status 1, no abort.
  try {
    // stdout is kvctl's interface (tables, --json): library logs (store/ and up) go to stderr,
    // warnings and errors only.
    spdlog::set_default_logger(spdlog::stderr_color_mt("kvctl"));
    spdlog::set_level(spdlog::level::warn);
    CLI::App app{"kvctl: inspect and control kvmesh KV-cache pools", "kvctl"};
    app.require_subcommand(1);
    kvmesh::cli::CommandOutcome outcome;

    kvmesh::cli::RegisterLayoutCommand(app, outcome);
    kvmesh::cli::RegisterReplayCommand(app, outcome);
    kvmesh::cli::RegisterStatusCommand(app, outcome);
    kvmesh::cli::RegisterPoolsCommand(app, outcome);
    kvmesh::cli::RegisterBlocksCommand(app, outcome);
    kvmesh::cli::RegisterTreeCommand(app, outcome);
    kvmesh::cli::RegisterInspectCommand(app, outcome);
    kvmesh::cli::RegisterStatsCommand(app, outcome);
    kvmesh::cli::RegisterEventsCommand(app, outcome);
    kvmesh::cli::RegisterEvictCommand(app, outcome);
    kvmesh::cli::RegisterRouteCommand(app, outcome);
    kvmesh::cli::RegisterHandoffCommand(app, outcome);
    kvmesh::cli::RegisterFlushCommand(app, outcome);
    kvmesh::cli::RegisterBenchCommand(app, outcome);

    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return kvmesh::cli::ReportParseError(app, e);
    }
    return kvmesh::cli::ReportOutcome(outcome.status());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvctl: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "kvctl: internal error: unknown exception\n");
  }
  return 1;
}
