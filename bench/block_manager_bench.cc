// block_manager_bench: the block manager's admission path, block allocation, and trace replay,
// each beside the baseline it is judged against (Google Benchmark; times are CPU time per
// iteration, the minimum over repetitions, so the load of a shared machine counts as little as it
// can).
//
//   sha256_16k_tokens     Sha256::Digest (common/content_id.h) of 16,384 int32 tokens (64 KiB):
//                         the baseline — what hashing the prompt alone costs.
//   admission_cold        AddSequence + StoreFullBlocks + RemoveSequence of those 16,384 tokens at
//                         64 tokens per block (256 blocks: match misses, 256 allocated, 256 content
//                         ids computed and stored) into a fresh metadata-only manager. The manager
//                         is rebuilt outside the timed region after every iteration, so each
//                         admission is cold.
//   admission_cold_full   the same into a full pool of 256 blocks with a new cache salt per
//                         iteration: every block of the previous admission is evicted (for
//                         information: eviction included).
//   admission_cached      the same prompt again into the manager that holds it (engine options:
//                         the last prompt token is recomputed, so 255 blocks are matched and
//                         pinned, 1 allocated).
//   alloc_release         one block allocated and released through the public API:
//                         AddSequence of a 1-token prompt (no full block: nothing to hash or
//                         match, one block allocated) + RemoveSequence (the private block freed).
//                         The manager's per-request overhead — lock, sequence record, block table,
//                         statistics — is part of it, as it is of every allocation.
//   alloc_release_learned the same with the learned eviction policy (the default of kvctl and of
//                         the coming kvnode config); admission_cold_full_learned likewise, where
//                         every admission evicts through it.
//   allocator_pair        BlockAllocator::Allocate + Free alone (for information).
//   replay/*              kvctl replay of the Mooncake conversation trace (12,031 requests, 512
//                         tokens per id) at LRU, priority-LRU and learned with 10,000 blocks and
//                         unlimited; skipped when the trace is absent ($KVMESH_MOONCAKE_TRACE, else
//                         the path configured into the build). Every policy at every capacity:
//                         eviction_policy_bench.
//
// RATIO lines:
//   RATIO bm_cached_admission_vs_sha256 <cached / sha256> sha256_16k_tokens goal<=1.5
//   RATIO bm_alloc_release_per_s <pairs per second / 1e6> 1e6_pairs_per_s goal>=1.0
//   RATIO bm_alloc_release_learned_per_s <the same, learned policy> 1e6_pairs_per_s goal>=1.0
//   RATIO bm_cold_full_learned_vs_priority_lru <cold full-pool admission, priority-lru / learned>
//         admission_cold_full goal>=0.8 (evicting through the learned policy costs at most 25%)
// and INFO lines for the cold admission ratios, the raw allocator and the replay figures.
//
//   block_manager_bench [Google Benchmark flags, e.g. --benchmark_filter=admission]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/content_id.h"
#include "common/strings.h"
#include "pool/block_allocator.h"
#include "pool/block_manager.h"
#include "pool/trace.h"
#include "pool/trace_replay.h"
#include "tests/common/mooncake_trace_path.h"

namespace kvmesh {
namespace {

constexpr std::int32_t kTokensPerBlock = 64;
constexpr std::int64_t kPromptTokens = 16 * 1024;
constexpr std::int64_t kPromptBlocks = kPromptTokens / kTokensPerBlock;  // 256

const std::vector<Token>& Prompt() {
  static const std::vector<Token> prompt = [] {
    std::mt19937 rng(42);
    std::uniform_int_distribution<Token> token(0, 150000);
    std::vector<Token> p(kPromptTokens);
    for (Token& t : p) t = token(rng);
    return p;
  }();
  return prompt;
}

std::unique_ptr<BlockManager> MakeManager(
    std::int64_t num_blocks, EvictionPolicyKind policy = EvictionPolicyKind::kPriorityLru) {
  BlockManagerConfig c;
  c.tokens_per_block = kTokensPerBlock;
  c.pools.push_back({.name = "full", .num_blocks = num_blocks, .window_tokens = 0});
  c.key_namespace.model_id = "bench";
  c.eviction_policy = policy;
  BlockManagerEnv env;
  env.hash_seed = 7;
  auto m = BlockManager::Create(c, env);
  KVMESH_CHECK(m.ok()) << m.status();
  return std::move(m).value();
}

void Admit(BlockManager& m, RequestId id, const SequenceOptions& options = {}) {
  auto added = m.AddSequence(id, Prompt(), options);
  KVMESH_CHECK(added.ok()) << added.status();
  benchmark::DoNotOptimize(added->reused_blocks);
  auto stored = m.StoreFullBlocks(id);
  KVMESH_CHECK(stored.ok()) << stored.status();
  KVMESH_CHECK(m.RemoveSequence(id).ok());
}

void Sha256Tokens(benchmark::State& state) {
  const std::vector<Token>& p = Prompt();
  for (auto _ : state) {
    auto digest = Sha256::Digest(p.data(), p.size() * sizeof(Token));
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(state.iterations() * kPromptTokens * sizeof(Token));
}

void AdmissionCold(benchmark::State& state) {
  auto m = MakeManager(kUnlimitedBlocks);
  for (auto _ : state) {
    Admit(*m, RequestId{1});
    state.PauseTiming();
    m = MakeManager(kUnlimitedBlocks);  // cold again; destruction and creation are not timed
    state.ResumeTiming();
  }
  state.counters["blocks"] = kPromptBlocks;
}

void AdmissionColdFullPool(benchmark::State& state, EvictionPolicyKind policy) {
  auto m = MakeManager(kPromptBlocks, policy);
  SequenceOptions options;
  std::uint64_t salt = 0;
  for (auto _ : state) {
    options.domain.salt = std::to_string(++salt);
    Admit(*m, RequestId{1}, options);
  }
  KVMESH_CHECK(m->GetStats().pools[0].evicted_blocks >= (salt - 1) * kPromptBlocks);
}

void AdmissionCached(benchmark::State& state) {
  auto m = MakeManager(kUnlimitedBlocks);
  Admit(*m, RequestId{1});
  for (auto _ : state) Admit(*m, RequestId{2});
  const PoolStats s = m->GetStats().pools[0];
  KVMESH_CHECK(s.reused_blocks >=
               static_cast<std::uint64_t>(state.iterations()) * (kPromptBlocks - 1));
}

void AllocRelease(benchmark::State& state, EvictionPolicyKind policy) {
  auto m = MakeManager(1024, policy);
  const Token one[1] = {17};
  for (auto _ : state) {
    auto added = m->AddSequence(RequestId{1}, one);
    benchmark::DoNotOptimize(added);
    KVMESH_CHECK(m->RemoveSequence(RequestId{1}).ok());
  }
  KVMESH_CHECK(m->GetStats().pools[0].free_blocks == 1024);
  state.SetItemsProcessed(state.iterations());
}

void AllocatorPair(benchmark::State& state) {
  BlockAllocator a(1024);
  for (auto _ : state) {
    auto b = a.Allocate();
    benchmark::DoNotOptimize(b);
    a.Free(*b);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(Sha256Tokens)->Name("sha256_16k_tokens")->Unit(benchmark::kMicrosecond);
BENCHMARK(AdmissionCold)->Name("admission_cold")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(AdmissionColdFullPool, priority_lru, EvictionPolicyKind::kPriorityLru)
    ->Name("admission_cold_full")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(AdmissionColdFullPool, learned, EvictionPolicyKind::kLearned)
    ->Name("admission_cold_full_learned")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(AdmissionCached)->Name("admission_cached")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(AllocRelease, priority_lru, EvictionPolicyKind::kPriorityLru)
    ->Name("alloc_release");
BENCHMARK_CAPTURE(AllocRelease, learned, EvictionPolicyKind::kLearned)
    ->Name("alloc_release_learned");
BENCHMARK(AllocatorPair)->Name("allocator_pair");

// ---- replay of the Mooncake trace

struct ReplayFigure {
  double hit_rate = 0;
  double requests_per_s = 0;
};
std::map<std::string, ReplayFigure>& ReplayFigures() {
  static std::map<std::string, ReplayFigure> figures;
  return figures;
}

void RegisterReplay(const std::vector<TraceRequest>* trace, const std::string& name,
                    EvictionPolicyKind policy, std::optional<std::int64_t> capacity) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [trace, name, policy, capacity](benchmark::State& state) {
                                 ReplayConfig config;
                                 config.policy = policy;
                                 config.capacity_blocks = capacity;
                                 ReplayResult last;
                                 for (auto _ : state) {
                                   auto r = ReplayTrace(*trace, config);
                                   KVMESH_CHECK(r.ok()) << r.status();
                                   last = *r;
                                 }
                                 state.counters["requests_per_s"] = benchmark::Counter(
                                     static_cast<double>(last.requests) * state.iterations(),
                                     benchmark::Counter::kIsRate);
                                 state.counters["hit_rate"] = last.hit_rate();
                                 ReplayFigures()[name] = {last.hit_rate(), last.requests_per_s()};
                               })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(1)
      ->UseRealTime();
}

// Records each benchmark's smallest CPU time per iteration (seconds) while printing as usual.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const double s = run.GetAdjustedCPUTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
      auto [it, inserted] = cpu_s_.emplace(run.benchmark_name(), s);
      if (!inserted) it->second = std::min(it->second, s);
    }
  }
  [[nodiscard]] std::optional<double> CpuSeconds(const std::string& name) const {
    const auto it = cpu_s_.find(name);
    if (it == cpu_s_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, double> cpu_s_;
};

void PrintRatios(const RecordingReporter& r) {
  const auto sha = r.CpuSeconds("sha256_16k_tokens");
  const auto cached = r.CpuSeconds("admission_cached");
  const auto cold = r.CpuSeconds("admission_cold");
  const auto cold_full = r.CpuSeconds("admission_cold_full");
  const auto pair = r.CpuSeconds("alloc_release");
  const auto pair_learned = r.CpuSeconds("alloc_release_learned");
  const auto cold_full_learned = r.CpuSeconds("admission_cold_full_learned");
  const auto raw = r.CpuSeconds("allocator_pair");
  std::printf("\n");
  if (sha && cached) {
    std::printf("RATIO bm_cached_admission_vs_sha256 %.2f sha256_16k_tokens goal<=1.5\n",
                *cached / *sha);
  }
  if (sha && cold) {
    std::printf("INFO bm_cold_admission_vs_sha256 %.2f sha256_16k_tokens\n", *cold / *sha);
  }
  if (sha && cold_full) {
    std::printf("INFO bm_cold_full_pool_admission_vs_sha256 %.2f sha256_16k_tokens\n",
                *cold_full / *sha);
  }
  if (pair) {
    std::printf("RATIO bm_alloc_release_per_s %.2f 1e6_pairs_per_s goal>=1.0\n", 1.0 / *pair / 1e6);
  }
  if (pair_learned) {
    std::printf("RATIO bm_alloc_release_learned_per_s %.2f 1e6_pairs_per_s goal>=1.0\n",
                1.0 / *pair_learned / 1e6);
  }
  if (cold_full && cold_full_learned) {
    std::printf("RATIO bm_cold_full_learned_vs_priority_lru %.2f admission_cold_full goal>=0.8\n",
                *cold_full / *cold_full_learned);
  }
  if (raw) std::printf("INFO bm_allocator_pairs_per_s %.3g\n", 1.0 / *raw);
  for (const auto& [name, f] : ReplayFigures()) {
    std::printf("INFO %s hit_rate %.4f requests_per_s %.0f\n", name.c_str(), f.hit_rate,
                f.requests_per_s);
  }
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  using namespace kvmesh;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  static std::vector<TraceRequest> trace;
  const std::string path = MooncakeTracePath();
  if (std::filesystem::exists(path)) {
    auto t = ReadTrace(path);
    KVMESH_CHECK(t.ok()) << t.status();
    trace = std::move(t).value();
    RegisterReplay(&trace, "replay/mooncake/lru_10000", EvictionPolicyKind::kLru, 10000);
    RegisterReplay(&trace, "replay/mooncake/priority_lru_10000", EvictionPolicyKind::kPriorityLru,
                   10000);
    RegisterReplay(&trace, "replay/mooncake/learned_10000", EvictionPolicyKind::kLearned, 10000);
    RegisterReplay(&trace, "replay/mooncake/unlimited", EvictionPolicyKind::kLru, std::nullopt);
  } else {
    std::printf("SKIP replay/mooncake: trace not found at '%s' (set KVMESH_MOONCAKE_TRACE)\n",
                path.c_str());
  }
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintRatios(reporter);
  benchmark::Shutdown();
  return 0;
}
