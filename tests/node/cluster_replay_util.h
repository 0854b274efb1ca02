// The 4-node cluster replay of the Mooncake conversation trace, shared by
// bench/cluster_replay_bench.cc and tests/node/cluster_replay_test.cc (one setup, no copy):
// in-process kvnodes on loopback, a router that is not cache-aware, and the replay loop.
//
// Cluster::Start(options) starts `nodes` in-process kvnodes (node/node.h) in options.dir, each
// with a CPU pool of options.pool_blocks blocks of kBlockTokens tokens (qwen2.5-0.5b, BF16: the
// tests' geometry, 192 KiB a block), LRU eviction, no host or disk tier, TCP on a loopback port
// picked before the start. Two modes, the same pools otherwise:
//   kIsolated  no cluster section and no peer section: each node serves from its own pool only;
//   kGlobal    cluster.membership: static listing all the nodes (so the partitioned prefix
//              directory runs, batch_ms options.batch_ms) and peer.enabled over UCX tcp/lo: Admit
//              locates missing prefix blocks through the directory and fetches them from the
//              holder (node/remote_fetch.h).
//
// Replay(cluster, trace) sends the requests one at a time in trace order, request i to node
// i % nodes (round-robin: a router that ignores where the cache is). One trace hash id is one
// kvmesh block (the trace's ids are its reuse units: a 512-token prefix-chained block, README of
// the trace); its kBlockTokens tokens are BlockTokens(id) (pool/trace.h), and a request whose
// input_length is not a multiple of 512 tokens ends in a partial block, as in the trace. Per
// request, on its node, as an engine would over the engine API (Unix socket):
//   1. Admit(prompt, reuse_last_token, no partial reuse): the node reuses its pool's prefix and,
//      in kGlobal, fetches what a peer holds; the reply says how many blocks came from where;
//   2. every reused block is read back from the node's pool memory: it must carry the stamp the
//      engine wrote where the block was computed (hash id and position, first 16 bytes of the
//      block in every pool) — so a fetched block is checked end to end, beside the fetcher's own
//      verification (checksum, geometry, content id);
//   3. the blocks not reused are "computed": their stamp is written into the pool;
//   4. StoreFullBlocks (they become cached and, in kGlobal, published to the directory), Release.
// Hit rate = blocks reused / blocks of the prompts (every hash id, as the trace's published hit
// rates count; the partial last block is never reusable).
//
// Not thread-safe: one thread drives a cluster.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/strings.h"
#include "node/client.h"
#include "node/node.h"
#include "node/node_config.h"
#include "pool/trace.h"
#include "tests/node/loopback_port.h"

namespace kvmesh::cluster_replay {

inline constexpr std::int32_t kBlockTokens = 16;  // tokens of one kvmesh block = one trace id
inline constexpr const char* kSecret = "kvmesh-replay-secret-0123456789";

enum class Mode { kIsolated, kGlobal };
inline const char* ModeName(Mode m) { return m == Mode::kGlobal ? "global" : "isolated"; }

struct ClusterOptions {
  std::filesystem::path dir;  // each node under dir/<node id>
  int nodes = 4;
  std::int64_t pool_blocks = 5860;  // per node
  Mode mode = Mode::kGlobal;
  int batch_ms = 10;  // the directory's publishing interval (kGlobal)
  std::string log_level = "warn";
};

inline std::string NodeId(int i) { return StrCat("replay-", i); }

// The YAML of node `i`; `ports` are every node's control port (kGlobal lists them all).
inline std::string NodeYaml(const ClusterOptions& o, int i, const std::vector<int>& ports) {
  const std::filesystem::path dir = o.dir / NodeId(i);
  std::ostringstream y;
  y << "node_id: " << NodeId(i) << "\ndata_dir: " << (dir / "data").string() << "\ndevice: cpu\n"
    << "model:\n  preset: qwen2.5-0.5b\n"
    << "kv_cache:\n  dtype: bf16\n  tokens_per_block: " << kBlockTokens
    << "\n  max_tokens: " << o.pool_blocks * kBlockTokens
    << "\n  host_cache_size: 0\n  eviction_policy: lru\n"
    << "disk_tier:\n  enabled: false\n"
    << "control:\n  unix_socket: " << (dir / "kvnode.sock").string()
    << "\n  tcp_listen: 127.0.0.1:" << ports[static_cast<std::size_t>(i)]
    << "\n  secret: " << kSecret << "\n"
    << "metrics:\n  listen: \"\"\n"
    << "shutdown:\n  flush_to_disk: false\n";
  if (o.mode == Mode::kGlobal) {
    y << "peer:\n  enabled: true\n  ucx_tls: tcp\n  ucx_net_devices: lo\n"
      << "cluster:\n  membership: static\n  peers:\n";
    for (int j = 0; j < o.nodes; ++j) {
      y << "    - {node_id: " << NodeId(j)
        << ", address: \"127.0.0.1:" << ports[static_cast<std::size_t>(j)] << "\"}\n";
    }
    y << "  directory:\n    batch_ms: " << o.batch_ms << "\n";
  }
  y << "logging:\n  level: " << o.log_level << "\n";
  return y.str();
}

class Cluster {
 public:
  static Result<std::unique_ptr<Cluster>> Start(const ClusterOptions& o) {
    std::unique_ptr<Cluster> c(new Cluster(o));
    std::vector<int> ports;
    for (int i = 0; i < o.nodes; ++i) {
      const int p = node_test::FreeLoopbackPort();
      if (p == 0) return Status::IoError("no free loopback port");
      ports.push_back(p);
    }
    for (int i = 0; i < o.nodes; ++i) {
      std::filesystem::create_directories(o.dir / NodeId(i));
      KVMESH_ASSIGN_OR_RETURN(NodeConfig config, ParseNodeConfig(NodeYaml(o, i, ports), NodeId(i)));
      KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<Node> node, Node::Start(config));
      c->nodes_.push_back(std::move(node));
    }
    for (int i = 0; i < o.nodes; ++i) {
      NodeClientOptions co;
      co.address = c->nodes_[static_cast<std::size_t>(i)]->unix_socket();
      co.secret = kSecret;
      co.client_name = StrCat("replay-engine-", i);
      KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> client, NodeClient::Connect(co));
      c->engines_.push_back(std::move(client));
    }
    return c;
  }
  ~Cluster() {
    engines_.clear();
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) (*it)->Shutdown();
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  [[nodiscard]] const ClusterOptions& options() const { return options_; }
  [[nodiscard]] int size() const { return static_cast<int>(nodes_.size()); }
  Node& node(int i) { return *nodes_[static_cast<std::size_t>(i)]; }
  NodeClient& engine(int i) { return *engines_[static_cast<std::size_t>(i)]; }

  // Blocks pinned in every pool of every node (0 once every sequence is released).
  [[nodiscard]] std::int64_t PinnedBlocks() const {
    std::int64_t pinned = 0;
    for (const auto& n : nodes_) {
      for (const PoolStats& p : n->cache().manager().GetStats().pools) pinned += p.pinned_blocks;
    }
    return pinned;
  }
  // The blocks of every node's first pool.
  [[nodiscard]] std::int64_t PoolBlocksPerNode() const {
    return nodes_.front()->cache().manager().GetStats().pools.front().num_blocks;
  }
  // Summed over the nodes (all zero in kIsolated, which has no fetcher).
  [[nodiscard]] RemoteFetchStats FetchStats() const {
    RemoteFetchStats s;
    for (const auto& n : nodes_) {
      if (n->remote_fetcher() == nullptr) continue;
      const RemoteFetchStats f = n->remote_fetcher()->stats();
      s.fetches += f.fetches;
      s.fetched_blocks += f.fetched_blocks;
      s.refused_blocks += f.refused_blocks;
      s.failed_fetches += f.failed_fetches;
      s.fetched_bytes += f.fetched_bytes;
    }
    return s;
  }

 private:
  explicit Cluster(ClusterOptions o) : options_(std::move(o)) {}
  ClusterOptions options_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<NodeClient>> engines_;
};

// The prompt of a trace request in kBlockTokens-token blocks: one block per hash id; the last one
// partial (1..kBlockTokens-1 tokens, in proportion) when input_length is not a multiple of the
// trace's 512 tokens per id.
inline std::vector<Token> ReplayTokens(const TraceRequest& r) {
  std::vector<Token> tokens(r.hash_ids.size() * static_cast<std::size_t>(kBlockTokens));
  for (std::size_t i = 0; i < r.hash_ids.size(); ++i) {
    BlockTokens(r.hash_ids[i], std::span<Token>(tokens.data() + i * kBlockTokens,
                                                static_cast<std::size_t>(kBlockTokens)));
  }
  const std::int64_t rem = r.input_length % kMooncakeBlockTokens;
  if (!tokens.empty() && rem != 0) {
    const std::int64_t tail =
        std::clamp<std::int64_t>(rem * kBlockTokens / kMooncakeBlockTokens, 1, kBlockTokens - 1);
    tokens.resize(tokens.size() - static_cast<std::size_t>(kBlockTokens - tail));
  }
  return tokens;
}

// The 16 bytes the replay's engine writes at the start of a computed block in every pool.
struct Stamp {
  std::uint64_t id = 0;
  std::uint64_t check = 0;
};
inline Stamp StampOf(std::uint64_t hash_id, std::size_t position) {
  return {hash_id, (hash_id * 0x9e3779b97f4a7c15ull) ^ (position + 0x6b766d657368ull)};
}

// The round-robin router: request `index` (0-based, trace order) goes to this node.
inline int RouteRoundRobin(std::size_t index, int nodes) {
  return static_cast<int>(index % static_cast<std::size_t>(nodes));
}

struct ReplayStats {
  std::int64_t requests = 0;
  std::int64_t failed_requests = 0;    // an engine call failed (first_error says which)
  std::int64_t input_blocks = 0;       // hash ids of the prompts (blocks asked)
  std::int64_t local_hit_blocks = 0;   // reused from the node's own pool
  std::int64_t remote_hit_blocks = 0;  // fetched from a peer
  std::int64_t stamp_checks = 0;       // reused blocks read back
  std::int64_t stamp_mismatches = 0;   // ... that did not carry their stamp
  std::int64_t stored_blocks = 0;
  double seconds = 0;
  std::string first_error;

  [[nodiscard]] std::int64_t hit_blocks() const { return local_hit_blocks + remote_hit_blocks; }
  [[nodiscard]] double Share(std::int64_t blocks) const {
    return input_blocks == 0 ? 0.0
                             : static_cast<double>(blocks) / static_cast<double>(input_blocks);
  }
  [[nodiscard]] double hit_rate() const { return Share(hit_blocks()); }
};

// Replays `trace` on `cluster` (see the top of the file). Engine-call failures are counted, not
// returned; the replay goes on.
inline ReplayStats Replay(Cluster& cluster, std::span<const TraceRequest> trace) {
  ReplayStats s;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<KvPoolView>> views;
  for (int n = 0; n < cluster.size(); ++n) views.push_back(cluster.node(n).pools().views());
  SequenceOptions so;
  so.reuse_last_token = true;  // every id may match, as the trace's hit rates count
  so.allow_partial_reuse = false;
  const auto fail = [&s](const std::string& what) {
    ++s.failed_requests;
    if (s.first_error.empty()) s.first_error = what;
  };
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& r = trace[i];
    ++s.requests;
    if (r.hash_ids.empty()) continue;
    const int n = RouteRoundRobin(i, cluster.size());
    NodeClient& engine = cluster.engine(n);
    const std::vector<Token> tokens = ReplayTokens(r);
    const std::uint64_t id = i + 1;
    s.input_blocks += static_cast<std::int64_t>(r.hash_ids.size());
    Result<AdmitReply> admitted = engine.Admit(id, tokens, so);
    if (!admitted.ok()) {
      fail(StrCat("admit of request ", i, " on ", NodeId(n), ": ", admitted.status().ToString()));
      continue;
    }
    s.local_hit_blocks +=
        admitted->pool_hit_blocks + admitted->host_hit_blocks + admitted->disk_hit_blocks;
    s.remote_hit_blocks += admitted->remote_hit_blocks;
    const std::size_t reused = static_cast<std::size_t>(admitted->result.reused_blocks);
    const std::size_t full = tokens.size() / kBlockTokens;
    const std::vector<BlockTable>& tables = admitted->result.tables;
    const std::vector<KvPoolView>& pools = views[static_cast<std::size_t>(n)];
    for (std::size_t t = 0; t < tables.size() && t < pools.size(); ++t) {
      const std::vector<std::int32_t>& blocks = tables[t].block_ids;
      for (std::size_t p = 0; p < full && p < blocks.size(); ++p) {
        if (blocks[p] < 0) continue;
        std::uint8_t* bytes = pools[t].BlockBytes(KvComponent::kData, blocks[p]);
        const Stamp want = StampOf(r.hash_ids[p], p);
        if (p < reused) {
          Stamp got;
          std::memcpy(&got, bytes, sizeof(got));
          ++s.stamp_checks;
          if (got.id != want.id || got.check != want.check) ++s.stamp_mismatches;
        } else {
          std::memcpy(bytes, &want, sizeof(want));  // the engine computed this block
        }
      }
    }
    Result<std::int64_t> stored = engine.StoreFullBlocks(id);
    if (stored.ok()) {
      s.stored_blocks += *stored;
    } else {
      fail(StrCat("store of request ", i, ": ", stored.status().ToString()));
    }
    if (Status st = engine.Release(id); !st.ok()) {
      fail(StrCat("release of request ", i, ": ", st.ToString()));
    }
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace kvmesh::cluster_replay
