// `kvctl replay`: replays a Mooncake-format request trace (or a synthetic one) through an
// in-process block manager and reports the prefix-cache hit rate and evictions
// (pool/trace_replay.h has the model; docs/kvctl.md the flags and the output formats).
//
//   kvctl replay (TRACE.jsonl | --synthetic [--seed N --conversations N --turns N
//                 --one-off-share F --system-prompts N --system-prompt-blocks N
//                 --turn-blocks N|MIN-MAX --concurrency N --no-partial-tail] [--write-trace PATH])
//                [--capacity-blocks N | --capacity-bytes B [--model NAME --dtype D]]
//                [--tokens-per-block N] [--policy learned|lru|priority-lru|optimal]
//                [--priority-prefix-blocks N --priority-prefix P --priority-tail P]
//                [--sweep [CAPACITIES] [--out-dir DIR] [--plot | --no-plot]]
//                [--limit N] [--progress | --no-progress] [--json]
//                [--host-tier-blocks N] [--disk-tier-blocks N [--disk-path DIR | --keep-disk]]
//                [--tier-block-bytes B] [--offload-min-priority P] [--copy-threads N]
//
// With tier flags the pool gets a host tier and/or a RocksDB tier behind it, moving real bytes
// (cli/replay_tiers.h, store/tiered_replay.h).
//
// Errors (exit 2, nothing on stdout): a missing trace file, a malformed line (with its number),
// both capacity flags, a capacity of 0 blocks, an unknown policy, inconsistent flags. A sweep
// whose plot was asked for with --plot fails (exit 1) when gnuplot cannot draw it; without
// --plot a missing gnuplot only skips the PNG.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/replay_live.h"
#include "cli/replay_tiers.h"
#include "pool/trace.h"

namespace kvmesh::cli {

struct ReplayOptions {
  std::string trace;  // a JSONL file; empty with --synthetic
  bool synthetic = false;
  SyntheticTraceOptions generator;
  std::string turn_blocks = "1-8";  // N or MIN-MAX
  bool no_partial_tail = false;
  std::string write_trace;      // save the replayed trace here
  std::string capacity_blocks;  // a count ("10000", "10k")
  std::string capacity_bytes;   // bytes with units ("80GiB")
  std::string model;            // with --capacity-bytes; default llama-3-8b
  std::string dtype;            // with --capacity-bytes; default bf16
  int tokens_per_block = kMooncakeBlockTokens;
  std::string policy;  // empty: learned (a sweep: SweepPolicies())
  int priority_prefix_blocks = 1;
  int priority_prefix = 60;
  int priority_tail = 10;
  bool sweep = false;
  std::string sweep_capacities;  // empty: the default list
  std::string out_dir = ".";
  bool plot = false;     // --plot: a failed plot is an error
  bool no_plot = false;  // --no-plot: CSV only
  std::string limit;     // replay only the first N requests
  bool progress = false;
  bool no_progress = false;
  bool json = false;
  ReplayTierFlags tiers;
  LiveReplayFlags live;  // --live: through the synthetic engine against a node (replay_live.h)
};

// "1000,2000,5000,10000,20000,unlimited"
inline constexpr const char* kDefaultSweepCapacities = "1000,2000,5000,10000,20000,unlimited";

// What a sweep without --policy runs: every online policy, then the offline optimum.
std::vector<std::string> SweepPolicies();

void RegisterReplayCommand(CLI::App& app, CommandOutcome& outcome);

// Runs the command with parsed options: results to `out`, the progress bar (when enabled) to
// `err`. `err_is_tty` decides whether the progress bar is on by default.
Status RunReplay(const ReplayOptions& options, std::ostream& out, std::ostream& err,
                 bool err_is_tty);

}  // namespace kvmesh::cli
