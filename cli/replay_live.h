// kvctl replay TRACE --live: the trace (or --synthetic workload) through the synthetic engine
// against a running node instead of an in-process block manager (node/synthetic_engine.h): the
// engine attaches to the node's pools, writes K/V through the append kernel, runs checked decode,
// and reports hit rates per tier, throughput and the checks. A progress bar on stderr (a terminal,
// or --progress).
//
//   kvctl replay TRACE.jsonl --live [--node ADDRESS ...] [--engines N] [--decode-tokens N]
//                [--salt S] [--check-all-layers] [--tokens-per-block N] [--limit N] [--json]
//
// The engine maps the node's shared memory, so it runs on the node's host: with --node a Unix
// socket it attaches there; with a TCP address it asks the node (Status) for its Unix socket and
// attaches to that. --tokens-per-block is the tokens per trace hash id (512 for Mooncake traces).
// Output: a summary table, or --json kvmesh.replay_live/1. Errors: an empty trace ("nothing to
// replay", exit 2); any failed request or check is exit 1 after the report.
//
// Not thread-safe (kvctl runs one command per process).
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <span>
#include <string>

#include "cli/node_connection.h"
#include "common/status.h"
#include "pool/trace.h"

namespace kvmesh::cli {

struct LiveReplayFlags {
  bool live = false;
  NodeConnectionFlags node;
  int engines = 2;
  int decode_tokens = 2;
  std::string salt;
  bool check_all_layers = false;
};

// Adds --live, the connection flags and the engine flags to the replay command.
void AddLiveReplayFlags(CLI::App* replay, LiveReplayFlags* flags);

// Runs `trace` against the node. `block_tokens`: tokens per trace hash id.
Status RunLiveReplay(const LiveReplayFlags& flags, std::span<const TraceRequest> trace,
                     int block_tokens, bool show_progress, bool json, std::ostream& out);

}  // namespace kvmesh::cli
