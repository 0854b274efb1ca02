// kvctl's live commands against a running kvnode (docs/kvctl.md has every flag, table and JSON
// document). Each is in its own file, cli/<name>_command.cc, and registered by kvctl.cc; all take
// the connection flags of cli/node_connection.h and print a table, or with --json a document of
// schema kvmesh.<name>/1:
//
//   pools     the pool plan, occupancy by state and by priority, the tiers      kvmesh.pools/1
//   blocks    cached blocks, paged and filtered                                  kvmesh.blocks/1
//   tree      the prefix tree's summary, a subtree dump from a content id        kvmesh.tree/1
//   inspect   every component of one block and its tier copies                   kvmesh.inspect/1
//   stats     hit rates, evictions, copy traffic and latency percentiles        kvmesh.stats/1
//   events    KV events, now or followed                                         kvmesh.event/1
//   evict     drop unpinned cached blocks on request                             kvmesh.evict/1
//   flush     write cached and host-tier blocks to the disk tier now             kvmesh.flush/1
//   bench     a short control-plane load run                                     kvmesh.bench/1
//   route     which nodes hold how much of a prompt's prefix (the directory)     kvmesh.route/1
//   handoff   hand a prompt's blocks from a prefill node to a decode node        kvmesh.handoff/1
// and `kvctl replay TRACE --live` (cli/replay_live.h). Errors follow cli/command.h.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace kvmesh::cli {

void RegisterPoolsCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterBlocksCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterTreeCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterInspectCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterStatsCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterEventsCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterEvictCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterFlushCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterBenchCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterRouteCommand(CLI::App& app, CommandOutcome& outcome);
void RegisterHandoffCommand(CLI::App& app, CommandOutcome& outcome);

}  // namespace kvmesh::cli
