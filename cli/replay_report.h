// What `kvctl replay` reports, and the pieces that print it: the text summary, the JSON document
// (schemas kvmesh.replay/1 and kvmesh.replay_sweep/1, docs/kvctl.md), the progress bar, and the
// sweep's CSV and gnuplot plot. Internal to cli/. Not thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"
#include "pool/trace.h"
#include "pool/trace_replay.h"
#include "store/tiered_replay.h"

namespace kvmesh::cli {

// Where the replayed trace came from.
struct ReplaySource {
  bool synthetic = false;
  std::string path;                 // the file (empty for a synthetic trace)
  SyntheticTraceOptions generator;  // synthetic only
  std::int64_t requests = 0;        // replayed (after --limit)
  std::int64_t blocks = 0;          // hash ids over the replayed requests
  std::string written_to;           // --write-trace, or empty
};

// How the capacity was given.
struct ReplayCapacity {
  std::optional<std::int64_t> blocks;  // nullopt = unlimited
  // --capacity-bytes: the bytes, and one block's bytes for the model and dtype (every pool).
  std::optional<std::int64_t> bytes;
  std::int64_t bytes_per_block = 0;
  std::string model;
  std::string dtype;
};

struct ReplayRun {
  ReplayCapacity capacity;
  ReplayResult result;
  std::optional<TieredReplayStats> tiers;  // with --host-tier-blocks / --disk-tier-blocks
};

struct SweepOutput {
  std::string csv_path;
  std::string png_path;   // empty when no plot was drawn
  std::string plot_note;  // "written", or why the plot was skipped
};

// ---- replay_output.cc
void PrintReplayText(const ReplaySource& source, const ReplayRun& run, std::ostream& out);
void PrintReplayJson(const ReplaySource& source, const ReplayRun& run, std::ostream& out);
void PrintSweepText(const ReplaySource& source, const std::vector<ReplayRun>& runs,
                    const SweepOutput& sweep, std::ostream& out);
void PrintSweepJson(const ReplaySource& source, const std::vector<ReplayRun>& runs,
                    const SweepOutput& sweep, std::ostream& out);
// "10000" or "unlimited".
std::string CapacityString(const std::optional<std::int64_t>& blocks);

// A one-line progress bar redrawn in place ("\r") on `err`; a null stream disables it.
class ProgressBar {
 public:
  ProgressBar(std::ostream* err, std::string label) : err_(err), label_(std::move(label)) {}
  void Update(const ReplayProgress& p);
  // Ends the line (when anything was drawn).
  void Finish();

 private:
  std::ostream* err_;
  std::string label_;
  bool drawn_ = false;
};

// ---- replay_sweep.cc
// Writes DIR/replay_sweep.csv (capacity_blocks,policy,hit_rate,reused_blocks,input_blocks,
// evictions; "unlimited" for no capacity), then DIR/replay_sweep.gp and, unless `no_plot`,
// runs gnuplot ($KVMESH_GNUPLOT, default "gnuplot") to draw DIR/replay_sweep.png. A plot that
// cannot be drawn is an error only when `plot_required`; otherwise plot_note says why.
Result<SweepOutput> WriteSweep(const std::string& dir, const std::vector<ReplayRun>& runs,
                               std::int32_t tokens_per_block, bool no_plot, bool plot_required);

}  // namespace kvmesh::cli
