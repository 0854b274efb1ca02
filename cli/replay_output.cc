// `kvctl replay` output: the text summary, the JSON documents (kvmesh.replay/1,
// kvmesh.replay_sweep/1; docs/kvctl.md — fields are only ever added) and the progress bar.
#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "cli/replay_report.h"
#include "cli/replay_tiers.h"
#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

using Json = nlohmann::ordered_json;

Json NullOr(const std::optional<std::int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

Json SourceJson(const ReplaySource& s) {
  Json j;
  j["source"] = s.synthetic ? "synthetic" : "file";
  j["path"] = s.synthetic ? Json(nullptr) : Json(s.path);
  if (s.synthetic) {
    const SyntheticTraceOptions& g = s.generator;
    j["synthetic"] = Json{{"seed", g.seed},
                          {"conversations", g.conversations},
                          {"turns", g.turns},
                          {"system_prompts", g.system_prompts},
                          {"system_prompt_blocks", g.system_prompt_blocks},
                          {"one_off_share", g.one_off_share},
                          {"turn_blocks_min", g.turn_blocks_min},
                          {"turn_blocks_max", g.turn_blocks_max},
                          {"partial_tail", g.partial_tail},
                          {"concurrency", g.concurrency}};
  } else {
    j["synthetic"] = nullptr;
  }
  j["requests"] = s.requests;
  j["blocks"] = s.blocks;
  j["written_to"] = s.written_to.empty() ? Json(nullptr) : Json(s.written_to);
  return j;
}

Json PrioritiesJson(const ReplayResult& r) {
  const ReplayPriorities& p = r.priorities;
  if (r.optimal || r.policy != EvictionPolicyKind::kPriorityLru) return nullptr;
  return Json{{"prefix_blocks", p.system_prompt_blocks},
              {"prefix_priority", p.system_prompt_priority},
              {"tail_priority", p.tail_priority},
              {"default_priority", kDefaultPriority}};
}

// Adds the fields of one run to `j`.
void AddRunFields(const ReplayRun& run, Json& j) {
  const ReplayResult& r = run.result;
  j["policy"] = std::string(r.policy_name());
  j["capacity_blocks"] = NullOr(r.capacity_blocks);
  j["capacity_bytes"] = NullOr(run.capacity.bytes);
  j["bytes_per_block"] = run.capacity.bytes ? Json(run.capacity.bytes_per_block) : Json(nullptr);
  j["model"] = run.capacity.bytes ? Json(run.capacity.model) : Json(nullptr);
  j["dtype"] = run.capacity.bytes ? Json(run.capacity.dtype) : Json(nullptr);
  j["tokens_per_block"] = r.tokens_per_block;
  j["priorities"] = PrioritiesJson(r);
  j["requests"] = r.requests;
  j["rejected_requests"] = r.rejected_requests;
  j["input_blocks"] = r.input_blocks;
  j["reused_blocks"] = r.reused_blocks;
  j["hit_rate"] = r.hit_rate();
  j["evicted_blocks"] = r.evicted_blocks;
  j["cached_blocks"] = r.cached_blocks;
  Json by_priority = Json::object();
  for (std::size_t p = 0; p < r.stats.pools[0].cached_by_priority.size(); ++p) {
    const std::int64_t n = r.stats.pools[0].cached_by_priority[p];
    if (n != 0) by_priority[std::to_string(p)] = n;
  }
  j["cached_by_priority"] = by_priority;
  j["wall_seconds"] = r.wall_s;
  j["requests_per_second"] = r.requests_per_s();
  j["tiers"] = run.tiers ? ReplayTiersJson(r, *run.tiers) : Json(nullptr);
}

void PrintSourceText(const ReplaySource& s, std::ostream& out) {
  if (s.synthetic) {
    const SyntheticTraceOptions& g = s.generator;
    out << "trace       synthetic: seed " << g.seed << ", " << g.conversations
        << " conversations x " << g.turns << " turns";
    if (g.one_off_share > 0) out << " (" << FormatFixed(g.one_off_share, 2) << " of them 1 turn)";
    out << ", " << g.system_prompts << " system prompts of " << g.system_prompt_blocks
        << " blocks, " << g.turn_blocks_min << "-" << g.turn_blocks_max << " new blocks per turn"
        << (g.partial_tail ? " + a partial last block" : "") << ", " << g.concurrency
        << " open at a time\n";
  } else {
    out << "trace       " << s.path << "\n";
  }
  out << "            " << s.requests << " requests, " << s.blocks << " blocks\n";
  if (!s.written_to.empty()) out << "written to  " << s.written_to << "\n";
}

}  // namespace

std::string CapacityString(const std::optional<std::int64_t>& blocks) {
  return blocks ? std::to_string(*blocks) : std::string("unlimited");
}

void PrintReplayText(const ReplaySource& source, const ReplayRun& run, std::ostream& out) {
  const ReplayResult& r = run.result;
  PrintSourceText(source, out);
  out << "policy      " << r.policy_name() << (r.optimal ? " (the offline optimum)" : "") << "\n";
  if (!r.optimal && r.policy == EvictionPolicyKind::kPriorityLru) {
    const ReplayPriorities& p = r.priorities;
    out << "priorities  first " << p.system_prompt_blocks << " block(s) of a request at "
        << p.system_prompt_priority << ", a partial last block at " << p.tail_priority
        << ", others " << kDefaultPriority << "\n";
  }
  out << "capacity    ";
  if (r.capacity_blocks) {
    out << *r.capacity_blocks << " blocks of " << r.tokens_per_block << " tokens";
  } else {
    out << "unlimited (blocks of " << r.tokens_per_block << " tokens)";
  }
  out << "\n";
  if (run.capacity.bytes) {
    out << "            from --capacity-bytes " << FormatBytes(*run.capacity.bytes) << " at "
        << FormatBytes(run.capacity.bytes_per_block) << " per block (" << run.capacity.model << " "
        << run.capacity.dtype << ", " << r.tokens_per_block << " tokens)\n";
  }
  out << "requests    " << r.requests;
  if (r.rejected_requests > 0) {
    out << " (" << r.rejected_requests << " rejected: more blocks than the capacity)";
  }
  out << "\n";
  out << "blocks      " << r.input_blocks << " input, " << r.reused_blocks << " reused\n";
  out << "hit rate    " << FormatFixed(r.hit_rate(), 4) << "\n";
  out << "evictions   " << r.evicted_blocks << "\n";
  out << "cached      " << r.cached_blocks << " blocks at the end\n";
  out << "time        " << FormatFixed(r.wall_s, 2) << " s (" << FormatFixed(r.requests_per_s(), 0)
      << " requests/s)\n";
  if (run.tiers) PrintReplayTiersText(r, *run.tiers, out);
}

void PrintReplayJson(const ReplaySource& source, const ReplayRun& run, std::ostream& out) {
  Json j;
  j["schema"] = "kvmesh.replay/1";
  j["trace"] = SourceJson(source);
  AddRunFields(run, j);
  out << j.dump(2) << "\n";
}

void PrintSweepText(const ReplaySource& source, const std::vector<ReplayRun>& runs,
                    const SweepOutput& sweep, std::ostream& out) {
  PrintSourceText(source, out);
  out << "\n"
      << std::left << std::setw(12) << "CAPACITY" << std::setw(14) << "POLICY" << std::setw(10)
      << "HIT_RATE" << std::setw(10) << "REUSED" << std::setw(10) << "INPUT" << std::setw(11)
      << "EVICTIONS" << std::setw(10) << "REJECTED"
      << "REQ/S\n";
  for (const ReplayRun& run : runs) {
    const ReplayResult& r = run.result;
    out << std::setw(12) << CapacityString(r.capacity_blocks) << std::setw(14) << r.policy_name()
        << std::setw(10) << FormatFixed(r.hit_rate(), 4) << std::setw(10) << r.reused_blocks
        << std::setw(10) << r.input_blocks << std::setw(11) << r.evicted_blocks << std::setw(10)
        << r.rejected_requests << FormatFixed(r.requests_per_s(), 0) << "\n";
  }
  out << "\ncsv         " << sweep.csv_path << "\n";
  out << "plot        " << (sweep.png_path.empty() ? sweep.plot_note : sweep.png_path) << "\n";
}

void PrintSweepJson(const ReplaySource& source, const std::vector<ReplayRun>& runs,
                    const SweepOutput& sweep, std::ostream& out) {
  Json j;
  j["schema"] = "kvmesh.replay_sweep/1";
  j["trace"] = SourceJson(source);
  Json list = Json::array();
  for (const ReplayRun& run : runs) {
    Json one;
    AddRunFields(run, one);
    list.push_back(std::move(one));
  }
  j["runs"] = list;
  j["csv"] = sweep.csv_path;
  j["png"] = sweep.png_path.empty() ? Json(nullptr) : Json(sweep.png_path);
  j["plot"] = sweep.plot_note;
  out << j.dump(2) << "\n";
}

void ProgressBar::Update(const ReplayProgress& p) {
  if (err_ == nullptr || p.requests_total <= 0) return;
  constexpr int kWidth = 30;
  const double frac = static_cast<double>(p.requests_done) / static_cast<double>(p.requests_total);
  const int filled = std::clamp(static_cast<int>(frac * kWidth), 0, kWidth);
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.requests_done) / p.elapsed_s : 0;
  const double hit = p.input_blocks > 0 ? static_cast<double>(p.reused_blocks) /
                                              static_cast<double>(p.input_blocks)
                                        : 0.0;
  *err_ << "\r" << label_ << (label_.empty() ? "" : " ") << "[" << std::string(filled, '#')
        << std::string(kWidth - filled, '.') << "] " << p.requests_done << "/" << p.requests_total
        << " requests  " << FormatFixed(rate, 0) << " req/s  hit rate " << FormatFixed(hit, 4)
        << "   " << std::flush;
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (err_ != nullptr && drawn_) *err_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace kvmesh::cli
