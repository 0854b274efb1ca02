// eviction_policy_bench: every eviction policy and the offline optimum on the Mooncake conversation
// trace and on synthetic workloads of other shapes, at 3,000, 5,860, 10,000 and 30,000 blocks of
// 512 tokens (and unlimited), as `kvctl replay` runs them. Each replay is one Google Benchmark run
// (one iteration, real time); the hit rates do not depend on the machine, the requests/s do.
//
// Workloads (pool/trace.h; the same flags give the same trace with `kvctl replay --synthetic`):
//   mooncake        conversation_trace.jsonl ($KVMESH_MOONCAKE_TRACE, else the build's path;
//                   skipped when absent): 12,031 requests, one shared first block
//   few-prompts     --conversations 3000 --turns 6 --system-prompts 8 --system-prompt-blocks 4
//   many-prompts    --conversations 6000 --turns 3 --system-prompts 6000 --system-prompt-blocks 1
//                   (the issue's example of a position rule going wrong)
//   long-convs      --conversations 400 --turns 16 --turn-blocks 2-12
//   one-offs        --conversations 6000 --turns 3 --one-off-share 0.6 --system-prompts 32
//   whole-blocks    --conversations 3000 --turns 6 --no-partial-tail
// (other flags at their defaults: 1-8 new blocks per turn, 256 conversations open at a time).
//
// RATIO lines (goals of issue 12):
//   eviction_gap_closed_mooncake_5860   (learned - lru) / (optimal - lru) at 5,860 blocks,
//   goal>=0.25 eviction_learned_minus_lru_worst    min over workloads and capacities of learned -
//   lru,
//                                       goal>=-0.005
//   eviction_optimal_minus_best_worst   min of optimal - the best online policy, goal>=0
//                                       (the optimum bounds every policy)
//   eviction_optimal_over_unlimited_max max of optimal / unlimited, goal<=1
//   eviction_<policy>_requests_per_s    the policy's requests/s over all replays / lru's,
//                                       goal>=0.8 (priority-lru, learned), goal>=1 (optimal)
// and a table of every hit rate and requests/s.
//
//   eviction_policy_bench [--benchmark_filter=mooncake]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"
#include "pool/trace.h"
#include "pool/trace_replay.h"
#include "tests/common/mooncake_trace_path.h"

namespace kvmesh {
namespace {

constexpr std::int64_t kCapacities[] = {3000, 5860, 10000, 30000};
const char* const kPolicies[] = {"lru", "priority-lru", "learned", "optimal"};

struct Workload {
  std::string name;
  std::vector<TraceRequest> trace;
};

struct Figure {
  double hit_rate = 0;
  double wall_s = 0;
  std::int64_t requests = 0;
};
// (workload, policy, capacity or -1 for unlimited) -> figure
using Key = std::tuple<std::string, std::string, std::int64_t>;
std::map<Key, Figure>& Figures() {
  static std::map<Key, Figure> figures;
  return figures;
}

std::vector<TraceRequest> Synthetic(const SyntheticTraceOptions& o) {
  auto t = GenerateSyntheticTrace(o);
  KVMESH_CHECK(t.ok()) << t.status();
  return std::move(t).value();
}

std::vector<Workload> Workloads() {
  std::vector<Workload> w;
  const std::string path = MooncakeTracePath();
  if (std::filesystem::exists(path)) {
    auto t = ReadTrace(path);
    KVMESH_CHECK(t.ok()) << t.status();
    w.push_back({"mooncake", std::move(t).value()});
  } else {
    std::printf("SKIP mooncake: trace not found at '%s' (set KVMESH_MOONCAKE_TRACE)\n",
                path.c_str());
  }
  SyntheticTraceOptions o;
  o.conversations = 3000;
  w.push_back({"few-prompts", Synthetic(o)});
  o = {};
  o.conversations = 6000;
  o.turns = 3;
  o.system_prompts = 6000;
  o.system_prompt_blocks = 1;
  w.push_back({"many-prompts", Synthetic(o)});
  o = {};
  o.conversations = 400;
  o.turns = 16;
  o.turn_blocks_min = 2;
  o.turn_blocks_max = 12;
  w.push_back({"long-convs", Synthetic(o)});
  o = {};
  o.conversations = 6000;
  o.turns = 3;
  o.one_off_share = 0.6;
  o.system_prompts = 32;
  w.push_back({"one-offs", Synthetic(o)});
  o = {};
  o.conversations = 3000;
  o.partial_tail = false;
  w.push_back({"whole-blocks", Synthetic(o)});
  return w;
}

void Register(const Workload* w, const std::string& policy, std::optional<std::int64_t> capacity) {
  const std::string name = w->name + "/" + policy + "/" +
                           (capacity ? std::to_string(*capacity) : std::string("unlimited"));
  benchmark::RegisterBenchmark(name.c_str(),
                               [w, policy, capacity](benchmark::State& state) {
                                 ReplayConfig config;
                                 config.capacity_blocks = capacity;
                                 KVMESH_CHECK(SetReplayPolicy(policy, &config).ok());
                                 ReplayResult last;
                                 for (auto _ : state) {
                                   auto r = ReplayTrace(w->trace, config);
                                   KVMESH_CHECK(r.ok()) << r.status();
                                   last = std::move(r).value();
                                 }
                                 state.counters["hit_rate"] = last.hit_rate();
                                 state.counters["requests_per_s"] = last.requests_per_s();
                                 Figures()[{w->name, policy, capacity.value_or(-1)}] = {
                                     last.hit_rate(), last.wall_s, last.requests};
                               })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(1)
      ->UseRealTime();
}

std::optional<Figure> Find(const std::string& w, const std::string& p, std::int64_t c) {
  const auto it = Figures().find({w, p, c});
  if (it == Figures().end()) return std::nullopt;
  return it->second;
}

void PrintTable(const std::vector<Workload>& workloads) {
  std::printf("\n%-13s %-9s", "WORKLOAD", "CAPACITY");
  for (const char* p : kPolicies) std::printf(" %12s", p);
  std::printf(" %10s   requests/s: %s\n", "unlimited", "lru / priority-lru / learned / optimal");
  for (const Workload& w : workloads) {
    const std::optional<Figure> unlimited = Find(w.name, "lru", -1);
    for (std::int64_t c : kCapacities) {
      std::printf("%-13s %-9lld", w.name.c_str(), static_cast<long long>(c));
      std::string rates;
      for (const char* p : kPolicies) {
        const std::optional<Figure> f = Find(w.name, p, c);
        if (f) {
          std::printf(" %12.4f", f->hit_rate);
        } else {
          std::printf(" %12s", "-");
        }
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%s%.0f", rates.empty() ? "" : " / ",
                      f && f->wall_s > 0 ? static_cast<double>(f->requests) / f->wall_s : 0.0);
        rates += buf;
      }
      if (unlimited) {
        std::printf(" %10.4f   %s\n", unlimited->hit_rate, rates.c_str());
      } else {
        std::printf(" %10s   %s\n", "-", rates.c_str());
      }
    }
  }
}

void PrintRatios(const std::vector<Workload>& workloads) {
  std::printf("\n");
  const auto lru = Find("mooncake", "lru", 5860);
  const auto learned = Find("mooncake", "learned", 5860);
  const auto optimal = Find("mooncake", "optimal", 5860);
  if (lru && learned && optimal && optimal->hit_rate > lru->hit_rate) {
    std::printf("RATIO eviction_gap_closed_mooncake_5860 %.3f lru_to_optimal_gap goal>=0.25\n",
                (learned->hit_rate - lru->hit_rate) / (optimal->hit_rate - lru->hit_rate));
  }
  double worst_learned = std::numeric_limits<double>::infinity();
  double worst_bound = std::numeric_limits<double>::infinity();
  double max_over_unlimited = 0;
  std::string where_learned, where_bound;
  for (const Workload& w : workloads) {
    const auto unlimited = Find(w.name, "lru", -1);
    for (std::int64_t c : kCapacities) {
      const auto l = Find(w.name, "lru", c);
      const auto n = Find(w.name, "learned", c);
      const auto o = Find(w.name, "optimal", c);
      if (l && n && n->hit_rate - l->hit_rate < worst_learned) {
        worst_learned = n->hit_rate - l->hit_rate;
        where_learned = w.name + "@" + std::to_string(c);
      }
      if (!o) continue;
      for (const char* p : {"lru", "priority-lru", "learned"}) {
        const auto f = Find(w.name, p, c);
        if (f && o->hit_rate - f->hit_rate < worst_bound) {
          worst_bound = o->hit_rate - f->hit_rate;
          where_bound = w.name + "@" + std::to_string(c) + " " + p;
        }
      }
      if (unlimited && unlimited->hit_rate > 0) {
        max_over_unlimited = std::max(max_over_unlimited, o->hit_rate / unlimited->hit_rate);
      }
    }
  }
  if (!where_learned.empty()) {
    std::printf("RATIO eviction_learned_minus_lru_worst %.4f lru_hit_rate goal>=-0.005\n",
                worst_learned);
    std::printf("INFO eviction_learned_minus_lru_worst at %s\n", where_learned.c_str());
  }
  if (!where_bound.empty()) {
    std::printf("RATIO eviction_optimal_minus_best_worst %.4f best_online_hit_rate goal>=0\n",
                worst_bound);
    std::printf("INFO eviction_optimal_minus_best_worst at %s\n", where_bound.c_str());
    std::printf("RATIO eviction_optimal_over_unlimited_max %.4f unlimited_hit_rate goal<=1\n",
                max_over_unlimited);
  }
  // Throughput: requests over the summed replay time of every run of the policy, against lru's.
  std::map<std::string, std::pair<double, double>> sums;  // policy -> (requests, seconds)
  for (const auto& [key, f] : Figures()) {
    auto& [requests, seconds] = sums[std::get<1>(key)];
    requests += static_cast<double>(f.requests);
    seconds += f.wall_s;
  }
  const auto rate = [&](const std::string& p) {
    const auto it = sums.find(p);
    return it == sums.end() || it->second.second <= 0 ? 0.0 : it->second.first / it->second.second;
  };
  const double lru_rate = rate("lru");
  if (lru_rate <= 0) return;
  std::printf("INFO eviction_lru_requests_per_s %.0f\n", lru_rate);
  for (const char* p : {"priority-lru", "learned", "optimal"}) {
    if (rate(p) <= 0) continue;
    std::string name = p;
    std::replace(name.begin(), name.end(), '-', '_');
    std::printf("RATIO eviction_%s_requests_per_s %.2f lru_requests_per_s goal>=%s\n", name.c_str(),
                rate(p) / lru_rate, std::string(p) == "optimal" ? "1.0" : "0.8");
  }
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  using namespace kvmesh;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  static const std::vector<Workload> workloads = Workloads();
  for (const Workload& w : workloads) {
    for (std::int64_t c : kCapacities) {
      for (const char* p : kPolicies) Register(&w, p, c);
    }
    Register(&w, "lru", std::nullopt);
  }
  benchmark::RunSpecifiedBenchmarks();
  PrintTable(workloads);
  PrintRatios(workloads);
  benchmark::Shutdown();
  return 0;
}
