// cluster_replay_bench: the Mooncake conversation trace replayed on a 4-node kvmesh cluster
// (issue 14, "a cluster replay of the conversation trace on 4 nodes reporting the global vs
// isolated hit rate"), and the cluster directory's lookup latency at 4 nodes.
//
// Setup and replay loop: tests/node/cluster_replay_util.h (shared with node_cluster_replay_test):
// 4 in-process kvnodes on loopback, round-robin routing (request i to node i % 4: a router that
// does not know where the cache is), one trace hash id = one 16-token block of qwen2.5-0.5b BF16
// (192 KiB), each request Admitted on its node over the engine API, its reused blocks checked,
// the rest written and stored. Two runs, same routing, same pools:
//   isolated  no directory, no peer path: each node serves from its own pool;
//   global    static membership, the partitioned prefix directory (batch_ms 10) and remote fetch
//             over UCX tcp/lo: a node fetches prefix blocks it is missing from the node holding
//             them.
// Pool: 5,860 blocks per node by default — the paper's local cache of 3M tokens (5,860 ids of
// 512 tokens, its Figure 9, as tests/pool/trace_replay_mooncake_test.cc uses), about 3 % of the
// trace's distinct blocks on one node, 13 % on the four together: the whole trace fits in no
// node and not in the cluster either, so eviction (LRU, as in the paper's stores) decides.
//
// Then, on the global cluster as the replay left it, for --lookups trace prompts (evenly spread
// over the replayed requests): ClusterLookup on node 0 over TCP (what `kvctl route` sends; the
// homes of the prompt's ids are asked in parallel), the engine API's local Lookup of the same
// prompt on the same connection, and the in-process local lookup (BlockManager::LookupPrefix on
// node 0, no RPC) — p50/p99 of each.
//
// Prints both runs' hit rates (blocks reused / blocks asked; local and remote shares), and
//   RATIO cluster_replay_global_vs_isolated <global / isolated hit rate> isolated
//         (Mooncake reports 2.22 on this trace)
//   RATIO directory_lookup_4node_p50 <ClusterLookup p50 / in-process local lookup p50>
//         local_lookup (no goal)
//
//   cluster_replay_bench [--requests N] [--pool-blocks N] [--lookups N] [--batch-ms N]
//                        [--trace PATH]
//   (default: every request; trace $KVMESH_MOONCAKE_TRACE, else the build's path; exits 0 with a
//   message when the trace is absent)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/check.h"
#include "node/client.h"
#include "pool/trace.h"
#include "tests/node/cluster_replay_util.h"

namespace kvmesh {
namespace {

using cluster_replay::Cluster;
using cluster_replay::ClusterOptions;
using cluster_replay::Mode;
using cluster_replay::ReplayStats;

struct Args {
  std::int64_t requests = -1;  // all
  std::int64_t pool_blocks = 5860;
  int lookups = 1000;
  int batch_ms = 10;
  std::string trace;
};

Args Parse(int argc, char** argv) {
  Args a;
  if (const char* env = std::getenv("KVMESH_MOONCAKE_TRACE"); env != nullptr && *env != '\0') {
    a.trace = env;
  } else {
    a.trace = KVMESH_MOONCAKE_TRACE_DEFAULT;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--requests") a.requests = std::stoll(v);
    if (k == "--pool-blocks") a.pool_blocks = std::stoll(v);
    if (k == "--lookups") a.lookups = std::stoi(v);
    if (k == "--batch-ms") a.batch_ms = std::stoi(v);
    if (k == "--trace") a.trace = v;
  }
  return a;
}

struct Percentiles {
  double p50_us = 0;
  double p99_us = 0;
};
Percentiles Of(std::vector<double> us) {
  KVMESH_CHECK(!us.empty());
  std::sort(us.begin(), us.end());
  const auto at = [&us](double q) {
    return us[std::min(us.size() - 1,
                       static_cast<std::size_t>(q * static_cast<double>(us.size())))];
  };
  return {at(0.50), at(0.99)};
}

void PrintRun(const char* name, const ReplayStats& s, std::int64_t pinned) {
  std::printf(
      "%-8s requests %ld failed %ld  blocks asked %ld  found %ld (local %ld, remote %ld)  "
      "hit rate %.4f (local %.4f, remote %.4f)  stamp checks %ld mismatches %ld  pinned at end "
      "%ld  %.1f s (%.0f requests/s)\n",
      name, s.requests, s.failed_requests, s.input_blocks, s.hit_blocks(), s.local_hit_blocks,
      s.remote_hit_blocks, s.hit_rate(), s.Share(s.local_hit_blocks), s.Share(s.remote_hit_blocks),
      s.stamp_checks, s.stamp_mismatches, pinned, s.seconds,
      static_cast<double>(s.requests) / s.seconds);
  if (!s.first_error.empty()) std::printf("  first error: %s\n", s.first_error.c_str());
}

int Run(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  if (args.trace.empty() || !std::filesystem::exists(args.trace)) {
    std::printf("Mooncake trace not found at '%s' (set KVMESH_MOONCAKE_TRACE): nothing measured\n",
                args.trace.c_str());
    return 0;
  }
  Result<std::vector<TraceRequest>> trace = ReadTrace(
      args.trace, args.requests < 0 ? std::nullopt : std::optional<std::int64_t>(args.requests));
  KVMESH_CHECK(trace.ok()) << trace.status();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cluster_replay_bench." + std::to_string(getpid()));
  std::printf(
      "cluster replay: %zu requests of %s (N = %zu), 4 nodes, round-robin routing, %ld blocks "
      "of %d tokens per node (qwen2.5-0.5b bf16), LRU, directory batch_ms %d\n",
      trace->size(), args.trace.c_str(), trace->size(), args.pool_blocks,
      cluster_replay::kBlockTokens, args.batch_ms);

  ClusterOptions o;
  o.nodes = 4;
  o.pool_blocks = args.pool_blocks;
  o.batch_ms = args.batch_ms;

  ReplayStats isolated;
  {
    o.dir = dir / "isolated";
    o.mode = Mode::kIsolated;
    auto c = Cluster::Start(o);
    KVMESH_CHECK(c.ok()) << c.status();
    std::printf("pool blocks per node: %ld\n", (*c)->PoolBlocksPerNode());
    isolated = cluster_replay::Replay(**c, *trace);
    PrintRun("isolated", isolated, (*c)->PinnedBlocks());
  }

  o.dir = dir / "global";
  o.mode = Mode::kGlobal;
  auto c = Cluster::Start(o);
  KVMESH_CHECK(c.ok()) << c.status();
  const ReplayStats global = cluster_replay::Replay(**c, *trace);
  PrintRun("global", global, (*c)->PinnedBlocks());
  const RemoteFetchStats fs = (*c)->FetchStats();
  std::printf(
      "remote fetch: %ld fetches, %ld blocks, %ld bytes, %ld refused (failed verification), %ld "
      "failed transfers\n",
      fs.fetches, fs.fetched_blocks, fs.fetched_bytes, fs.refused_blocks, fs.failed_fetches);
  for (int n = 0; n < (*c)->size(); ++n) {
    const DirectoryStats d = (*c)->node(n).directory()->stats();
    std::printf(
        "directory %s: shard ids %ld, held ids %ld, updates sent %ld received %ld, send "
        "failures %ld, events lost %ld\n",
        cluster_replay::NodeId(n).c_str(), d.shard_ids, d.held_ids, d.updates_sent,
        d.updates_received, d.send_failures, d.events_lost);
  }

  // Lookup latency on node 0, prompts spread over the replayed trace.
  NodeClientOptions co;
  co.address = (*c)->node(0).tcp_address();
  co.secret = cluster_replay::kSecret;
  co.client_name = "replay-router";
  auto client = NodeClient::Connect(co);
  KVMESH_CHECK(client.ok()) << client.status();
  std::vector<std::vector<Token>> prompts;
  const std::size_t step = std::max<std::size_t>(1, trace->size() / std::max(1, args.lookups));
  for (std::size_t i = 0;
       i < trace->size() && prompts.size() < static_cast<std::size_t>(args.lookups); i += step) {
    if (!(*trace)[i].hash_ids.empty()) prompts.push_back(cluster_replay::ReplayTokens((*trace)[i]));
  }
  std::vector<double> cluster_us, rpc_us, local_us;
  std::int64_t cluster_tokens = 0, local_tokens = 0, unreachable = 0;
  BlockManager& manager = (*c)->node(0).cache().manager();
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up connections and caches
    for (const std::vector<Token>& p : prompts) {
      rpc::Request req;
      req.mutable_cluster_lookup()->mutable_tokens()->Add(p.begin(), p.end());
      auto t0 = std::chrono::steady_clock::now();
      Result<rpc::Response> r = (*client)->Call(std::move(req));
      auto t1 = std::chrono::steady_clock::now();
      KVMESH_CHECK(r.ok()) << r.status();
      Result<rpc::LookupResponse> l = (*client)->Lookup(p);
      auto t2 = std::chrono::steady_clock::now();
      KVMESH_CHECK(l.ok()) << l.status();
      Result<PrefixLookup> m = manager.LookupPrefix(p);
      auto t3 = std::chrono::steady_clock::now();
      KVMESH_CHECK(m.ok()) << m.status();
      if (pass == 0) continue;
      cluster_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      rpc_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      local_us.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
      std::int64_t best = 0;
      for (const rpc::NodePrefix& np : r->cluster_lookup().nodes()) {
        best = std::max(best, np.prefix_tokens());
      }
      cluster_tokens += best;
      local_tokens += m->cached_tokens;
      unreachable += r->cluster_lookup().unreachable_homes_size();
    }
  }
  const Percentiles cl = Of(cluster_us), rl = Of(rpc_us), ll = Of(local_us);
  std::printf(
      "lookup of %zu trace prompts on node 0 (4 members): ClusterLookup p50 %.1f us p99 %.1f us "
      "(longest prefix held anywhere: %ld tokens in all; unreachable homes %ld)\n",
      prompts.size(), cl.p50_us, cl.p99_us, cluster_tokens, unreachable);
  std::printf("  local Lookup over the same TCP connection (engine API): p50 %.1f us p99 %.1f us\n",
              rl.p50_us, rl.p99_us);
  std::printf(
      "  in-process local lookup (BlockManager::LookupPrefix on node 0): p50 %.2f us p99 %.2f us "
      "(node 0's own prefix: %ld tokens in all)\n",
      ll.p50_us, ll.p99_us, local_tokens);

  c->reset();
  std::filesystem::remove_all(dir);

  if (isolated.hit_rate() > 0) {
    std::printf(
        "RATIO cluster_replay_global_vs_isolated %.3f isolated (global %.4f / isolated %.4f; "
        "Mooncake reports 2.22 on this trace)\n",
        global.hit_rate() / isolated.hit_rate(), global.hit_rate(), isolated.hit_rate());
  } else {
    std::printf("isolated hit rate is 0: no RATIO cluster_replay_global_vs_isolated\n");
  }
  std::printf(
      "RATIO directory_lookup_4node_p50 %.1f local_lookup (ClusterLookup %.1f us / in-process "
      "local lookup %.2f us; no goal)\n",
      cl.p50_us / ll.p50_us, cl.p50_us, ll.p50_us);
  std::printf("INFO directory_lookup_4node_p50_vs_local_rpc %.2f local_lookup_rpc\n",
              cl.p50_us / rl.p50_us);
  const bool clean = isolated.failed_requests == 0 && global.failed_requests == 0 &&
                     isolated.stamp_mismatches == 0 && global.stamp_mismatches == 0 &&
                     fs.refused_blocks == 0;
  if (!clean) std::printf("ERROR: failed requests, stamp mismatches or refused blocks above\n");
  return clean ? 0 : 1;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) { return kvmesh::Run(argc, argv); }
