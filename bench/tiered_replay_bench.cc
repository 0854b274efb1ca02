// Replay of the Mooncake conversation trace with tiers (store/tiered_replay.h): a pool of 5,860
// blocks of 512 tokens (3M tokens) alone, the same pool with a host tier of 10x and a RocksDB
// tier of 100x as many blocks, and an unlimited pool. Blocks are real bytes (4 KiB each: 1 layer,
// K and V, 1 head, head_dim 4, FP8) written with content derived from their content ids; the
// tiers hold and move them (offload to host, spill to RocksDB, verified restores, every restored
// block checked).
//
//   tiered_replay_bench [TRACE.jsonl]      (default: $KVMESH_MOONCAKE_TRACE or the build's path)
//   environment: KVMESH_BENCH_LIMIT=N replays the first N requests only; TMPDIR for RocksDB.
//
// Prints the three hit rates with the blocks and bytes restored per second beside them, hits per
// tier, bytes moved and copy rates, wall time, requests/s, where the replay's time goes (the
// tier hooks' stages: looking blocks up in the tiers, restoring them, checking them, recomputing
// the missed ones, the offload decisions under the manager's lock; the rest is the block
// manager's own work, which the pool-only replay does too), and:
//   RATIO tiered_replay_hit_rate_vs_unlimited <with tiers / unlimited> unlimited goal>=0.95
//     (goal: with a disk tier larger than the trace's distinct blocks, the tiers should recover
//     nearly every hit an unlimited pool gets; what is lost is blocks in flight and tail blocks
//     below the offload priority)
//   RATIO tiered_replay_requests_per_s_vs_pool_only <with tiers / pool alone> pool_only goal>=0.6
//     (both rates over the time spent replaying requests, as the pool alone's is; with tiers that
//     time also counts waiting at the end for the copies still in flight; it leaves out creating
//     the tiers and the final RocksDB flush, which are printed beside it)
//   INFO  tiered_replay_requests_per_s_whole_run_vs_pool_only   (the same over the whole run:
//     creating the tiers, replaying, draining and flushing)
//   INFO  pool_only_hit_rate_vs_unlimited <pool alone / unlimited> unlimited  (information)
//   INFO  tiered_replay_whole_run_cpu_bound_vs_pool_only   (the pool alone's time over the least
//     time the whole run's measured CPU allows: the threads' CPU spread perfectly over the
//     cores, and no thread faster than its own CPU; compare with the whole-run INFO above)
//   INFO  tiered_onboard_host_vs_memcpy <host onboard bytes/s / memcpy of 4 KiB blocks> memcpy
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pool/trace.h"
#include "pool/trace_replay.h"
#include "store/tiered_replay.h"

namespace kvmesh {
namespace {

constexpr std::int64_t kPoolBlocks = 5860;
constexpr std::int64_t kHostBlocks = 10 * kPoolBlocks;
constexpr std::int64_t kDiskBlocks = 100 * kPoolBlocks;
constexpr std::int64_t kBlockBytes = 4096;

std::string TracePath(int argc, char** argv) {
  if (argc > 1) return argv[1];
  if (const char* env = std::getenv("KVMESH_MOONCAKE_TRACE"); env != nullptr && *env != '\0') {
    return env;
  }
  return KVMESH_MOONCAKE_TRACE_DEFAULT;
}

// memcpy of 4 KiB blocks over 64 MiB, bytes per second (the in-run baseline of the copy rates).
double MemcpyBytesPerSecond() {
  constexpr std::size_t kTotal = 64 << 20;
  std::vector<std::byte> src(kTotal, std::byte{1}), dst(kTotal);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t off = 0; off < kTotal; off += kBlockBytes) {
      std::memcpy(dst.data() + off, src.data() + off, kBlockBytes);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(kTotal) / s);
  }
  if (dst[kTotal / 2] != std::byte{1}) std::printf("memcpy check failed\n");
  return best;
}

void PrintTraffic(const char* name, const TierTraffic& t) {
  std::printf("  %-14s %10lld blocks %10.1f MiB  %8.2f GB/s over %.3f s of copies\n", name,
              static_cast<long long>(t.blocks), static_cast<double>(t.bytes) / (1 << 20),
              t.bytes_per_s() / 1e9, t.copy_s);
}

// The tables and the RATIO/INFO lines; false when a restored block had wrong bytes.
bool Report(const ReplayResult& alone, const TieredReplayResult& tiered, double tiered_wall,
            const ReplayResult& unlimited) {
  const ReplayResult& t = tiered.replay;
  const TieredReplayStats& s = tiered.tiers;
  const double replay_s = t.wall_s + s.drain_s;  // replaying, then the copies still in flight
  std::printf("\n%-34s %9s %10s %10s %9s %12s\n", "run", "hit_rate", "reused", "restored", "wall_s",
              "requests/s");
  std::printf("%-34s %9.4f %10lld %10s %9.2f %12.0f\n", "pool 5860 blocks alone (lru)",
              alone.hit_rate(), static_cast<long long>(alone.reused_blocks), "-", alone.wall_s,
              alone.requests_per_s());
  std::printf("%-34s %9.4f %10lld %10lld %9.2f %12.0f\n", "pool + host 58600 + disk 586000",
              t.hit_rate_with_tiers(), static_cast<long long>(t.reused_blocks),
              static_cast<long long>(t.restored_blocks), replay_s,
              static_cast<double>(t.requests) / replay_s);
  std::printf("%-34s %9s restored %.0f blocks/s, %.1f MB/s (host %lld, disk %lld blocks)\n", "", "",
              static_cast<double>(t.restored_blocks) / replay_s,
              static_cast<double>(t.restored_blocks * s.block_bytes) / replay_s / 1e6,
              static_cast<long long>(s.host_hit_blocks), static_cast<long long>(s.disk_hit_blocks));
  std::printf("%-34s %9.4f %10lld %10s %9.2f %12.0f\n", "unlimited pool", unlimited.hit_rate(),
              static_cast<long long>(unlimited.reused_blocks), "-", unlimited.wall_s,
              unlimited.requests_per_s());
  std::printf("\nwith tiers: hits pool %lld, host %lld, disk %lld; missed %lld (recomputed)\n",
              static_cast<long long>(t.reused_blocks), static_cast<long long>(s.host_hit_blocks),
              static_cast<long long>(s.disk_hit_blocks),
              static_cast<long long>(t.input_blocks - t.reused_blocks - t.restored_blocks));
  std::printf(
      "block %lld bytes (bundle %lld): %d layer, kv %d, %d head, head_dim %d, fp8_per_tensor\n",
      static_cast<long long>(s.block_bytes), static_cast<long long>(s.bundle_bytes),
      s.geometry.num_layers, s.geometry.kv_factor, s.geometry.num_kv_heads, s.geometry.head_dim);
  std::printf("restored blocks checked %lld, mismatched %lld, corrupt reads %lld\n",
              static_cast<long long>(s.verified_blocks),
              static_cast<long long>(s.mismatched_blocks),
              static_cast<long long>(s.offload.onboard_corrupt));
  std::printf(
      "evictions %lld: offloaded %lld, clean (already in a tier) %lld, below priority %lld, "
      "failed %lld\n",
      static_cast<long long>(s.offload.evictions_seen),
      static_cast<long long>(s.offload.offload.blocks),
      static_cast<long long>(s.offload.skipped_clean),
      static_cast<long long>(s.offload.skipped_priority),
      static_cast<long long>(s.offload.offload_failed));
  PrintTraffic("offload", s.offload.offload);
  std::printf(
      "  (of the offloaded blocks, %lld copied by the replay thread while it waited for "
      "them, the rest by the copy worker)\n",
      static_cast<long long>(s.offload.offload_helped));
  PrintTraffic("spill", s.offload.spill);
  PrintTraffic("onboard host", s.offload.onboard_host);
  PrintTraffic("onboard disk", s.offload.onboard_disk);
  std::printf("host tier: %lld entries, %lld evictions; disk tier: %lld entries, %.1f MiB\n",
              static_cast<long long>(s.offload.host.entries),
              static_cast<long long>(s.offload.host.evictions),
              static_cast<long long>(s.offload.disk.entries),
              static_cast<double>(s.offload.disk.used_bytes) / (1 << 20));
  const double hooks_s =
      s.lookup_s + s.onboard_s + s.check_s + s.recompute_s + s.offload.listener_s;
  std::printf(
      "whole run with tiers %.2f s: creating the tiers %.2f s, replaying %.2f s, draining the "
      "copies in flight %.2f s, the final RocksDB flush %.2f s, the rest (creating the manager, "
      "closing RocksDB, removing its folder) %.2f s\n",
      tiered_wall, s.setup_s, t.wall_s, s.drain_s, s.flush_s,
      tiered_wall - s.setup_s - t.wall_s - s.drain_s - s.flush_s);
  std::printf(
      "replaying with tiers %.2f s: tier lookups %.2f s, restores %.2f s (host %.2f, disk %.2f of "
      "copies), checks %.2f s, recomputing %.2f s, offload decisions %.2f s (under the manager's "
      "lock); the rest, %.2f s, the block manager and replay (the pool alone took %.2f s)\n",
      t.wall_s, s.lookup_s, s.onboard_s, s.offload.onboard_host.copy_s,
      s.offload.onboard_disk.copy_s, s.check_s, s.recompute_s, s.offload.listener_s,
      t.wall_s - hooks_s, alone.wall_s);
  std::printf(
      "  copy workers: offload %.2f s, spill %.2f s (RocksDB writes); disk tier stages: "
      "index %.2f s, rocksdb %.2f s, verify+copy %.2f s, encode %.2f s\n",
      s.offload.offload.copy_s, s.offload.spill.copy_s, s.offload.disk.stages.index_s,
      s.offload.disk.stages.read_s + s.offload.disk.stages.write_s, s.offload.disk.stages.decode_s,
      s.offload.disk.stages.encode_s);
  std::printf(
      "  host tier stages: index and eviction bookkeeping %.2f s, encode (copy + checksum) %.2f "
      "s, handing victims to the disk tier's spill queue %.2f s, restores' verify+copy %.2f s\n",
      s.offload.host.stages.index_s, s.offload.host.stages.encode_s, s.offload.host.stages.write_s,
      s.offload.host.stages.decode_s);
  double cpu_total = 0;
  for (const auto& [name, cpu] : s.thread_cpu_s) cpu_total += cpu;
  std::printf(
      "CPU of the whole run with tiers by thread: %.2f s on %u cores over %.2f s (%.2f cores "
      "busy on average):",
      cpu_total, std::thread::hardware_concurrency(), tiered_wall,
      tiered_wall > 0 ? cpu_total / tiered_wall : 0.0);
  for (const auto& [name, cpu] : s.thread_cpu_s) {
    if (cpu >= 0.005) std::printf(" %s %.2f s,", name.c_str(), cpu);
  }
  std::printf(" (the pool alone: one thread, %.2f s)\n", alone.wall_s);
  const double memcpy_rate = MemcpyBytesPerSecond();
  std::printf("memcpy of 4 KiB blocks: %.2f GB/s\n\n", memcpy_rate / 1e9);

  const double unl = unlimited.hit_rate();
  std::printf("RATIO tiered_replay_hit_rate_vs_unlimited %.3f unlimited goal>=0.95\n",
              unl > 0 ? t.hit_rate_with_tiers() / unl : 0.0);
  std::printf("INFO pool_only_hit_rate_vs_unlimited %.3f unlimited\n",
              unl > 0 ? alone.hit_rate() / unl : 0.0);
  std::printf("RATIO tiered_replay_requests_per_s_vs_pool_only %.3f pool_only goal>=0.6\n",
              alone.requests_per_s() > 0
                  ? static_cast<double>(t.requests) / replay_s / alone.requests_per_s()
                  : 0.0);
  std::printf("INFO tiered_replay_requests_per_s_whole_run_vs_pool_only %.3f pool_only\n",
              alone.requests_per_s() > 0
                  ? static_cast<double>(t.requests) / tiered_wall / alone.requests_per_s()
                  : 0.0);
  // What the CPU the run used allows at best: its threads' CPU spread perfectly over the cores,
  // and no thread faster than its own CPU. A RATIO near this bound is CPU-bound, not waiting.
  double busiest_thread = 0;
  for (const auto& [name, cpu] : s.thread_cpu_s) busiest_thread = std::max(busiest_thread, cpu);
  const double cpu_floor_s =
      std::max(cpu_total / std::max(1u, std::thread::hardware_concurrency()), busiest_thread);
  std::printf(
      "INFO tiered_replay_whole_run_cpu_bound_vs_pool_only %.3f pool_only (the best the whole "
      "run's CPU allows: %.2f s of CPU over %u cores, busiest thread %.2f s)\n",
      cpu_floor_s > 0 ? alone.wall_s / cpu_floor_s : 0.0, cpu_total,
      std::thread::hardware_concurrency(), busiest_thread);
  std::printf("INFO tiered_onboard_host_vs_memcpy %.3f memcpy_4KiB_blocks\n",
              memcpy_rate > 0 ? s.offload.onboard_host.bytes_per_s() / memcpy_rate : 0.0);
  if (s.mismatched_blocks != 0) {
    std::printf("FAIL: %lld restored blocks had wrong bytes\n",
                static_cast<long long>(s.mismatched_blocks));
    return false;
  }
  return true;
}

int Run(int argc, char** argv) {
  const std::string path = TracePath(argc, argv);
  std::optional<std::int64_t> limit;
  if (const char* env = std::getenv("KVMESH_BENCH_LIMIT"); env != nullptr) limit = std::atoll(env);
  auto trace = ReadTrace(path, limit);
  if (!trace.ok()) {
    std::printf("SKIP tiered_replay_bench: %s\n", trace.status().ToString().c_str());
    return 0;
  }
  std::int64_t input = 0;
  for (const TraceRequest& r : *trace) input += std::ssize(r.hash_ids);
  const char* tmp = std::getenv("TMPDIR");
  struct statvfs vfs {};
  const std::string tmp_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  if (statvfs(tmp_dir.c_str(), &vfs) == 0) {
    const double free_gib =
        static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize) / (1 << 30);
    const double need_gib =
        static_cast<double>(std::min(input, kDiskBlocks)) * 4300 * 2 / (1 << 30);
    std::printf("disk: %.1f GiB free in %s, at most %.1f GiB needed\n", free_gib, tmp_dir.c_str(),
                need_gib);
    if (free_gib < need_gib) {
      std::printf("SKIP tiered_replay_bench: not enough free disk\n");
      return 0;
    }
  }
  std::printf("trace %s: %zu requests, %lld input blocks of 512 tokens\n", path.c_str(),
              trace->size(), static_cast<long long>(input));

  ReplayConfig config;
  config.tokens_per_block = kMooncakeBlockTokens;
  config.policy = EvictionPolicyKind::kLru;
  ReplayConfig unlimited_config = config;
  config.capacity_blocks = kPoolBlocks;
  auto unlimited = ReplayTrace(*trace, unlimited_config);
  auto alone = ReplayTrace(*trace, config);
  if (!unlimited.ok() || !alone.ok()) {
    std::printf("replay failed: %s\n",
                (!unlimited.ok() ? unlimited.status() : alone.status()).ToString().c_str());
    return 1;
  }
  TieredReplayOptions tiers;
  tiers.block_bytes = kBlockBytes;
  tiers.host_blocks = kHostBlocks;
  tiers.disk_blocks = kDiskBlocks;
  tiers.copy_threads = 1;
  const auto start = std::chrono::steady_clock::now();
  auto tiered = ReplayTraceWithTiers(*trace, config, tiers);
  const double tiered_wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!tiered.ok()) {
    std::printf("replay with tiers failed: %s\n", tiered.status().ToString().c_str());
    return 1;
  }
  return Report(*alone, *tiered, tiered_wall, *unlimited) ? 0 : 1;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) { return kvmesh::Run(argc, argv); }
