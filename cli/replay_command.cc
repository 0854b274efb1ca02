#include "cli/replay_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <utility>

#include "cli/replay_report.h"
#include "common/strings.h"
#include "common/units.h"
#include "pool/cache_config.h"
#include "pool/model_presets.h"
#include "pool/pool_plan.h"

namespace kvmesh::cli {
namespace {

constexpr const char* kDefaultModel = "llama-3-8b";
constexpr const char* kDefaultDtype = "bf16";

Result<std::int64_t> ParseCountFlag(std::string_view flag, const std::string& text) {
  auto n = ParseCount(text);
  if (!n.ok()) return n.status().WithContext(flag);
  return *n;
}

// "N" or "MIN-MAX".
Status ParseTurnBlocks(const std::string& text, SyntheticTraceOptions* g) {
  const std::vector<std::string> parts = StrSplit(text, '-');
  if (parts.empty() || parts.size() > 2) {
    return Status::InvalidArgument(StrCat("--turn-blocks '", text, "' is not N or MIN-MAX"));
  }
  KVMESH_ASSIGN_OR_RETURN(const std::int64_t lo, ParseCountFlag("--turn-blocks", parts[0]));
  std::int64_t hi = lo;
  if (parts.size() == 2) {
    KVMESH_ASSIGN_OR_RETURN(hi, ParseCountFlag("--turn-blocks", parts[1]));
  }
  if (lo < 1 || hi < lo || hi > (std::int64_t{1} << 20)) {
    return Status::InvalidArgument(
        StrCat("--turn-blocks '", text, "': need 1 <= MIN <= MAX <= 1048576"));
  }
  g->turn_blocks_min = static_cast<std::int32_t>(lo);
  g->turn_blocks_max = static_cast<std::int32_t>(hi);
  return Status::Ok();
}

Result<std::int64_t> ParseCapacityBlocks(std::string_view flag, const std::string& text) {
  KVMESH_ASSIGN_OR_RETURN(const std::int64_t n, ParseCountFlag(flag, text));
  if (n < 1) {
    return Status::InvalidArgument(StrCat(flag, " ", text,
                                          ": the capacity must be at least 1 block "
                                          "(omit the flag for unlimited)"));
  }
  return n;
}

// Ascending, without duplicates, unlimited (nullopt) last.
Result<std::vector<std::optional<std::int64_t>>> ParseSweep(const std::string& text) {
  std::vector<std::int64_t> limited;
  bool unlimited = false;
  for (const std::string& piece : StrSplit(text, ',')) {
    if (AsciiLower(piece) == "unlimited") {
      unlimited = true;
      continue;
    }
    auto n = ParseCountFlag("--sweep", piece);
    if (n.ok() && *n < 1)
      n = Status::InvalidArgument(StrCat("--sweep: capacity ", piece, " is not at least 1 block"));
    if (!n.ok()) {
      return Status::InvalidArgument(StrCat(n.status().message(), " (a sweep is a list like ",
                                            kDefaultSweepCapacities,
                                            "; give TRACE.jsonl before --sweep, or --sweep=LIST)"));
    }
    limited.push_back(*n);
  }
  std::sort(limited.begin(), limited.end());
  limited.erase(std::unique(limited.begin(), limited.end()), limited.end());
  std::vector<std::optional<std::int64_t>> out(limited.begin(), limited.end());
  if (unlimited) out.push_back(std::nullopt);
  return out;
}

// One block of every pool of the model, at the dtype and tokens per block.
Result<std::int64_t> BytesPerBlock(const std::string& model, const std::string& dtype,
                                   std::int32_t tokens_per_block) {
  auto spec = ModelPreset(model);
  if (!spec.ok()) return spec.status().WithContext("--model");
  CacheConfig cache;
  auto kv = ParseKvDtype(dtype);
  if (!kv.ok()) return kv.status().WithContext("--dtype");
  cache.dtype = *kv;
  cache.tokens_per_block = tokens_per_block;
  KVMESH_RETURN_IF_ERROR(cache.Validate());
  // Enough memory for every pool to get blocks; only the per-block sizes are used.
  KVMESH_ASSIGN_OR_RETURN(const PoolPlan plan, BuildPoolPlan(*spec, cache, std::int64_t{1} << 50));
  std::int64_t bytes = 0;
  for (const PoolSpec& p : plan.pools) bytes += p.bytes_per_block();
  return bytes;
}

Result<ReplayCapacity> ResolveCapacity(const ReplayOptions& o) {
  ReplayCapacity c;
  if (!o.capacity_blocks.empty() && !o.capacity_bytes.empty()) {
    return Status::InvalidArgument("give at most one of --capacity-blocks and --capacity-bytes");
  }
  if ((!o.model.empty() || !o.dtype.empty()) && o.capacity_bytes.empty()) {
    return Status::InvalidArgument("--model and --dtype only apply with --capacity-bytes");
  }
  if (o.sweep && (!o.capacity_blocks.empty() || !o.capacity_bytes.empty())) {
    return Status::InvalidArgument("--sweep gives the capacities: drop --capacity-blocks/bytes");
  }
  if (!o.capacity_blocks.empty()) {
    KVMESH_ASSIGN_OR_RETURN(c.blocks, ParseCapacityBlocks("--capacity-blocks", o.capacity_blocks));
  }
  if (!o.capacity_bytes.empty()) {
    auto bytes = ParseBytes(o.capacity_bytes);
    if (!bytes.ok()) return bytes.status().WithContext("--capacity-bytes");
    c.bytes = *bytes;
    c.model = o.model.empty() ? kDefaultModel : AsciiLower(o.model);
    c.dtype = o.dtype.empty() ? kDefaultDtype : AsciiLower(o.dtype);
    KVMESH_ASSIGN_OR_RETURN(c.bytes_per_block, BytesPerBlock(c.model, c.dtype, o.tokens_per_block));
    const std::int64_t blocks = *c.bytes / c.bytes_per_block;
    if (blocks < 1) {
      return Status::InvalidArgument(StrCat("--capacity-bytes ", o.capacity_bytes,
                                            " holds no block: one block of ", o.tokens_per_block,
                                            " tokens of ", c.model, " ", c.dtype, " is ",
                                            FormatBytes(c.bytes_per_block)));
    }
    c.blocks = blocks;
  }
  return c;
}

Result<std::vector<TraceRequest>> LoadTrace(const ReplayOptions& o, ReplaySource* source) {
  if (o.synthetic == !o.trace.empty()) {
    return Status::InvalidArgument("give exactly one of TRACE.jsonl and --synthetic");
  }
  std::optional<std::int64_t> limit;
  if (!o.limit.empty()) {
    KVMESH_ASSIGN_OR_RETURN(limit, ParseCountFlag("--limit", o.limit));
  }
  std::vector<TraceRequest> trace;
  if (o.synthetic) {
    source->synthetic = true;
    source->generator = o.generator;
    KVMESH_RETURN_IF_ERROR(ParseTurnBlocks(o.turn_blocks, &source->generator));
    source->generator.partial_tail = !o.no_partial_tail;
    KVMESH_ASSIGN_OR_RETURN(trace, GenerateSyntheticTrace(source->generator));
    if (limit && std::ssize(trace) > *limit) trace.resize(static_cast<std::size_t>(*limit));
  } else {
    source->path = o.trace;
    KVMESH_ASSIGN_OR_RETURN(trace, ReadTrace(o.trace, limit));
  }
  if (trace.empty()) {  // a hit rate of 0 over nothing is no result
    return Status::InvalidArgument(StrCat(limit && *limit == 0
                                              ? std::string("--limit 0 leaves no request")
                                              : StrCat("trace ", o.trace, " has no requests"),
                                          ": nothing to replay"));
  }
  if (!o.write_trace.empty()) {
    KVMESH_RETURN_IF_ERROR(WriteTrace(o.write_trace, trace));
    source->written_to = o.write_trace;
  }
  source->requests = std::ssize(trace);
  for (const TraceRequest& r : trace) source->blocks += std::ssize(r.hash_ids);
  return trace;
}

Result<ReplayRun> RunOnce(std::span<const TraceRequest> trace, ReplayConfig config,
                          const ReplayCapacity& capacity, std::ostream* progress_stream,
                          const std::string& label,
                          const std::optional<TieredReplayOptions>& tiers = std::nullopt) {
  ProgressBar bar(progress_stream, label);
  if (progress_stream != nullptr) {
    config.progress = [&bar](const ReplayProgress& p) { bar.Update(p); };
  }
  ReplayRun run;
  run.capacity = capacity;
  if (tiers) {
    // SIGTERM and SIGINT flush the RocksDB tier, then end kvctl (docs/kvctl.md).
    KVMESH_ASSIGN_OR_RETURN(
        const std::unique_ptr<SignalFlush> flush,
        SignalFlush::Start([](std::string_view sig, const std::vector<std::string>& lines) {
          for (const auto& l : lines) {
            std::fprintf(stderr, "kvctl: %.*s: %s\n", static_cast<int>(sig.size()), sig.data(),
                         l.c_str());
          }
          std::fprintf(stderr, "kvctl: %.*s: exiting\n", static_cast<int>(sig.size()), sig.data());
        }));
    Result<TieredReplayResult> result = ReplayTraceWithTiers(trace, config, *tiers, flush.get());
    bar.Finish();
    if (!result.ok()) return result.status();
    run.result = std::move(result->replay);
    run.tiers = std::move(result->tiers);
    return run;
  }
  Result<ReplayResult> result = ReplayTrace(trace, config);
  bar.Finish();
  if (!result.ok()) return result.status();
  run.result = std::move(result).value();
  return run;
}

Status RunSweep(const ReplayOptions& o, std::span<const TraceRequest> trace,
                const ReplaySource& source, const ReplayConfig& base, std::ostream* progress_stream,
                std::ostream& out) {
  KVMESH_ASSIGN_OR_RETURN(
      const auto capacities,
      ParseSweep(o.sweep_capacities.empty() ? kDefaultSweepCapacities : o.sweep_capacities));
  const std::vector<std::string> policies =
      o.policy.empty() ? SweepPolicies() : std::vector<std::string>{o.policy};
  std::vector<ReplayRun> runs;
  for (const auto& capacity : capacities) {
    for (const std::string& policy : policies) {
      ReplayConfig config = base;
      config.capacity_blocks = capacity;
      KVMESH_RETURN_IF_ERROR(SetReplayPolicy(policy, &config));
      ReplayCapacity c;
      c.blocks = capacity;
      const std::string label = StrCat(policy, " @ ", CapacityString(capacity));
      KVMESH_ASSIGN_OR_RETURN(ReplayRun run, RunOnce(trace, config, c, progress_stream, label));
      runs.push_back(std::move(run));
    }
  }
  KVMESH_ASSIGN_OR_RETURN(const SweepOutput sweep,
                          WriteSweep(o.out_dir, runs, base.tokens_per_block, o.no_plot, o.plot));
  if (o.json) {
    PrintSweepJson(source, runs, sweep, out);
  } else {
    PrintSweepText(source, runs, sweep, out);
  }
  return Status::Ok();
}

Result<ReplayConfig> MakeConfig(const ReplayOptions& o) {
  ReplayConfig config;
  config.tokens_per_block = o.tokens_per_block;
  if (!o.policy.empty()) {
    KVMESH_RETURN_IF_ERROR(SetReplayPolicy(o.policy, &config).WithContext("--policy"));
  }
  config.priorities.system_prompt_blocks = o.priority_prefix_blocks;
  config.priorities.system_prompt_priority = o.priority_prefix;
  config.priorities.tail_priority = o.priority_tail;
  // The flags' own names (Validate names the config's fields).
  for (const auto& [flag, value] :
       {std::pair{"--priority-prefix", o.priority_prefix}, {"--priority-tail", o.priority_tail}}) {
    if (value < kMinPriority || value > kMaxPriority) {
      return Status::InvalidArgument(
          StrCat(flag, " ", value, " is outside ", kMinPriority, "..", kMaxPriority));
    }
  }
  KVMESH_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace

Status RunReplay(const ReplayOptions& options, std::ostream& out, std::ostream& err,
                 bool err_is_tty) {
  if (options.progress && options.no_progress) {
    return Status::InvalidArgument("give at most one of --progress and --no-progress");
  }
  if (options.plot && options.no_plot) {
    return Status::InvalidArgument("give at most one of --plot and --no-plot");
  }
  if (!options.sweep && (options.plot || options.no_plot || !options.sweep_capacities.empty())) {
    return Status::InvalidArgument("--plot and --no-plot apply to --sweep only");
  }
  ReplayOptions o = options;
  // `kvctl replay --sweep TRACE.jsonl`: CLI11 gives the file to --sweep; it is the trace.
  std::error_code ec;
  if (o.sweep && o.trace.empty() && !o.synthetic && !o.sweep_capacities.empty() &&
      std::filesystem::is_regular_file(o.sweep_capacities, ec)) {
    o.trace = std::exchange(o.sweep_capacities, std::string());
  }
  KVMESH_ASSIGN_OR_RETURN(ReplayConfig config, MakeConfig(o));
  KVMESH_ASSIGN_OR_RETURN(const ReplayCapacity capacity, ResolveCapacity(o));
  config.capacity_blocks = capacity.blocks;
  KVMESH_ASSIGN_OR_RETURN(std::optional<TieredReplayOptions> tiers,
                          ResolveReplayTiers(o.tiers, capacity.blocks.has_value(), o.sweep));
  if (tiers && config.optimal) {
    return Status::InvalidArgument(
        "--policy optimal replays the pool alone: leave out --host-tier-blocks and "
        "--disk-tier-blocks");
  }
  // --policy orders the host tier's victims too (docs/kvctl.md, "Tiers").
  if (tiers) tiers->host_eviction_policy = config.policy;
  ReplaySource source;
  KVMESH_ASSIGN_OR_RETURN(const std::vector<TraceRequest> trace, LoadTrace(o, &source));
  const bool show_progress = !o.no_progress && (o.progress || err_is_tty);
  if (o.live.live)
    return RunLiveReplay(o.live, trace, o.tokens_per_block, show_progress, o.json, out);
  std::ostream* progress_stream = show_progress ? &err : nullptr;
  if (o.sweep) {
    return RunSweep(o, trace, source, config, progress_stream, out);
  }
  KVMESH_ASSIGN_OR_RETURN(const ReplayRun run,
                          RunOnce(trace, config, capacity, progress_stream, "", tiers));
  if (o.json) {
    PrintReplayJson(source, run, out);
  } else {
    PrintReplayText(source, run, out);
  }
  return Status::Ok();
}

void RegisterReplayCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<ReplayOptions>();
  CLI::App* sub = app.add_subcommand(
      "replay",
      "Replay a Mooncake-format request trace (or a synthetic one) through an in-process block "
      "manager: prefix-cache hit rate and evictions");
  sub->add_option("trace", o->trace,
                  "Trace file (JSON Lines: timestamp, input_length, "
                  "output_length, hash_ids of 512-token blocks)");
  sub->add_flag("--synthetic", o->synthetic, "Replay a generated trace instead of a file");
  sub->add_option("--seed", o->generator.seed, "Synthetic: seed")->capture_default_str();
  sub->add_option("--conversations", o->generator.conversations, "Synthetic: conversations")
      ->capture_default_str();
  sub->add_option("--turns", o->generator.turns, "Synthetic: turns per conversation")
      ->capture_default_str();
  sub->add_option("--system-prompts", o->generator.system_prompts,
                  "Synthetic: distinct system prompts shared by the conversations")
      ->capture_default_str();
  sub->add_option("--system-prompt-blocks", o->generator.system_prompt_blocks,
                  "Synthetic: blocks of each system prompt")
      ->capture_default_str();
  sub->add_option("--turn-blocks", o->turn_blocks, "Synthetic: new blocks per turn, N or MIN-MAX")
      ->capture_default_str();
  sub->add_option("--one-off-share", o->generator.one_off_share,
                  "Synthetic: share of conversations with a single turn, in [0, 1]")
      ->capture_default_str();
  sub->add_flag("--no-partial-tail", o->no_partial_tail,
                "Synthetic: whole blocks only (default: each prompt ends in a partial block, as in "
                "the Mooncake traces)");
  sub->add_option("--concurrency", o->generator.concurrency,
                  "Synthetic: conversations open at a time (their turns interleave)")
      ->capture_default_str();
  sub->add_option("--write-trace", o->write_trace, "Also save the replayed trace (JSONL) here");
  sub->add_option("--capacity-blocks", o->capacity_blocks,
                  "Pool capacity in blocks, e.g. 10000 or 10k (default: unlimited)");
  sub->add_option("--capacity-bytes", o->capacity_bytes,
                  "Pool capacity in bytes, e.g. 80GiB, converted at one block of --model/--dtype");
  sub->add_option("--model", o->model, "With --capacity-bytes: model preset (default llama-3-8b)");
  sub->add_option("--dtype", o->dtype, "With --capacity-bytes: cache dtype (default bf16)");
  sub->add_option("--tokens-per-block", o->tokens_per_block,
                  "Tokens synthesised per hash id, a power of two > 1")
      ->capture_default_str();
  sub->add_option("--policy", o->policy,
                  "Eviction policy: learned, lru, priority-lru or optimal (the offline optimum); "
                  "default learned; a sweep runs all four");
  sub->add_option("--priority-prefix-blocks", o->priority_prefix_blocks,
                  "priority-lru: first blocks of each request kept at --priority-prefix")
      ->capture_default_str();
  sub->add_option("--priority-prefix", o->priority_prefix,
                  "priority-lru: priority of those blocks (0-100)")
      ->capture_default_str();
  sub->add_option("--priority-tail", o->priority_tail,
                  "priority-lru: priority of a request's partial last block (0-100)")
      ->capture_default_str();
  sub->add_option("--sweep", o->sweep_capacities,
                  std::string("Run several capacities (blocks, or 'unlimited'), default ") +
                      kDefaultSweepCapacities + "; writes replay_sweep.csv and .png")
      ->expected(0, 1);
  sub->add_option("--out-dir", o->out_dir, "Sweep: directory for the CSV and the plot")
      ->capture_default_str();
  sub->add_flag("--plot", o->plot, "Sweep: fail when the PNG cannot be drawn");
  sub->add_flag("--no-plot", o->no_plot, "Sweep: write the CSV only");
  sub->add_option("--limit", o->limit, "Replay only the first N requests");
  sub->add_flag("--progress", o->progress, "Progress bar on stderr even when it is not a terminal");
  sub->add_flag("--no-progress", o->no_progress, "No progress bar");
  sub->add_flag("--json", o->json, "Print the stable JSON format (docs/kvctl.md)");
  AddReplayTierFlags(sub, &o->tiers);
  AddLiveReplayFlags(sub, &o->live);
  sub->callback([o, sub, &outcome] {
    ReplayOptions options = *o;
    options.sweep = sub->count("--sweep") > 0;
    outcome.Set(RunReplay(options, std::cout, std::cerr, isatty(STDERR_FILENO) != 0));
  });
}

}  // namespace kvmesh::cli
