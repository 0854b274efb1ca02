// NodeConfig: everything a kvnode is configured with, and its YAML form (`kvnode --config FILE`).
//
// The YAML keys use the names inference engines already use where one exists (TensorRT-LLM's
// KvCacheConfig: tokens_per_block, free_gpu_memory_fraction, max_tokens, enable_block_reuse,
// host_cache_size, secondary_offload_min_priority, event_buffer_max_size; vLLM's
// tensor_parallel_size). configs/kvnode.yaml is the documented example: every key, its default and
// what it means; `kvnode --print-default-config` prints the same text (DefaultNodeConfigYaml()),
// and a test checks that the two agree and that the text parses to NodeConfig{}.
//
// Top-level sections (see configs/kvnode.yaml for every key):
//   node_id, data_dir, device, tensor_parallel_size
//   model        preset | hf_config, revision
//   kv_cache     dtype, kv_layout, tokens_per_block, free_gpu_memory_fraction, max_tokens,
//                pool_shares, enable_block_reuse, enable_partial_reuse, eviction_policy,
//                host_cache_size, secondary_offload_min_priority, event_buffer_max_size,
//                copy_threads, nvfp4_global_scale, nvfp4_expected_amax, fp8_per_tensor_scale
//   disk_tier    enabled, path, capacity, durability, flush_interval, wal_sync, on_damage,
//                verify_checksums, direct_io, write_buffer, block_cache, background_jobs
//   control      unix_socket, tcp_listen, secret, secret_env, secret_file, max_frame_size,
//                handshake_timeout, idle_timeout, request_timeout, max_connections,
//                max_inflight_per_connection, max_inflight_total, io_threads, worker_threads,
//                busy_poll_us
//   metrics      listen
//   shutdown     drain_timeout, flush_to_disk
//   peer         enabled, fetch_deadline, staging_size, ucx_tls, ucx_net_devices, busy_poll_us,
//                transfer_lanes
//   logging      level, format
//   cluster      advertise, membership, peers, etcd (endpoints, lease_ttl_s, prefix,
//                poll_interval), directory (batch_ms, lookup_timeout, max_batch_events,
//                resync_interval)
//
// Errors (ParseNodeConfig / LoadNodeConfig): kInvalidArgument whose message names the source, the
// key as a dotted path and its line, e.g.
//   "kvnode.yaml:12: kv_cache.tokens_per_block: 48 is not a power of two greater than 1"
//   "kvnode.yaml:3: unknown key 'tokens_per_blok' in kv_cache (did you mean tokens_per_block?)"
// An unknown key, a wrong type, a bad value or a duplicate key is an error; nothing is guessed.
// Relative paths (data_dir, disk_tier.path, control.unix_socket, model.hf_config, secret_file)
// are resolved against the directory of the config file (the current directory for text that did
// not come from a file), defaults included: a file that leaves a key out means what the same file
// with the key at its default would mean. Writing model.hf_config without model.preset clears the
// default preset.
//
// A plain value; thread-safe as values are.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "pool/cache_config.h"
#include "pool/eviction_policy.h"
#include "store/disk_policy.h"

namespace kvmesh {

// Where the primary pools live.
struct DeviceSelection {
  enum class Kind : std::uint8_t {
    kAuto = 0,  // the first CUDA device when kvmesh has CUDA and a device is present, else cpu
    kCpu = 1,   // host memory, the CPU backend
    kCuda = 2,  // CUDA device `index` (and index + 1 .. index + tensor_parallel_size - 1)
    // A test device: pools in host memory that the node's own code cannot read, every copy staged
    // as with a GPU (store/emulated_device.h); engines see host pools.
    kEmulated = 3,
  };
  Kind kind = Kind::kAuto;
  std::int32_t index = 0;  // kCuda only

  // "auto", "cpu", "cuda:0".
  [[nodiscard]] std::string ToString() const;
  friend bool operator==(const DeviceSelection&, const DeviceSelection&) = default;
};
// Accepts "auto", "cpu", "cuda" (= cuda:0), "cuda:N" and "emulated"; kInvalidArgument otherwise.
Result<DeviceSelection> ParseDeviceSelection(std::string_view text);

struct ModelSelection {
  std::string preset = "qwen2.5-0.5b";  // a name of pool/model_presets.h, or empty with hf_config
  std::string hf_config;                // path to a Hugging Face config.json (instead of preset)
  std::string revision;                 // model revision, part of every block's namespace
  friend bool operator==(const ModelSelection&, const ModelSelection&) = default;
};

struct KvCacheSection {
  // dtype, kv_layout, tokens_per_block, free_gpu_memory_fraction, max_tokens, pool_shares,
  // nvfp4_global_scale, nvfp4_expected_amax, fp8_per_tensor_scale. Its host_budget_bytes and
  // disk_budget_bytes are not keys and stay 0 here: NodeConfig::EffectiveCacheConfig() fills them
  // from host_cache_size below and disk_tier.capacity (0 when disabled).
  CacheConfig cache;
  bool enable_block_reuse = true;    // false: no prefix reuse at all (every Admit is a miss)
  bool enable_partial_reuse = true;  // copy or claim partly matching blocks
  EvictionPolicyKind eviction_policy = kDefaultEvictionPolicy;  // learned
  std::int64_t host_cache_size = 1ll << 30;      // bytes of the pinned host tier; 0 = none
  int secondary_offload_min_priority = 35;       // blocks below it are not offloaded (0..101)
  std::int64_t event_buffer_max_size = 1 << 16;  // KV events kept for polling (> 0)
  int copy_threads = 2;                          // offload/onboard copy workers (>= 1)
  // Not defaulted: CacheConfig has no operator== (node_config.cc compares its fields).
  friend bool operator==(const KvCacheSection&, const KvCacheSection&);
};

// The RocksDB tier (store/rocksdb_tier.h, docs/disk-tier.md has what each setting does).
struct DiskTierSection {
  bool enabled = true;
  std::string path;                    // empty: <data_dir>/rocksdb
  std::int64_t capacity = 10ll << 30;  // bytes (> 0 when enabled)
  DiskDurability durability = DiskDurability::kFlush;
  std::chrono::milliseconds flush_interval{1000};  // flush: longest a put stays unflushed, > 0
  bool wal_sync = false;                           // wal: fsync the log on every put
  DiskDamagePolicy on_damage = DiskDamagePolicy::kMoveAside;
  bool verify_checksums = false;           // RocksDB's own checksums on reads
  bool direct_io = false;                  // O_DIRECT reads and flush/compaction writes
  std::int64_t write_buffer = 64ll << 20;  // per memtable of a pool, >= 256 KiB
  std::int64_t block_cache = 8ll << 20;    // RocksDB's block cache, >= 0
  int background_jobs = 2;                 // RocksDB's flush and compaction threads, >= 1
  friend bool operator==(const DiskTierSection&, const DiskTierSection&) = default;
};

struct ControlSection {
  std::string unix_socket;                    // empty: <data_dir>/kvnode.sock
  std::string tcp_listen = "127.0.0.1:7420";  // host:port; empty: no TCP listener; port 0: any
  // The shared secret, from exactly one of: secret (inline), secret_env (an environment
  // variable's name), secret_file (a file's path; its content with the trailing newline removed).
  // None given: the environment variable KVMESH_SECRET. A secret shorter than 16 bytes is refused.
  std::string secret;
  std::string secret_env;
  std::string secret_file;
  // A file holding a second secret the node also accepts (never presents), for rotating the
  // secret without a restart; a missing or empty file: none. Re-read with the secret on SIGHUP.
  std::string second_secret_file;
  std::int64_t max_frame_size = 4ll << 20;  // bytes of one frame after authentication
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds idle_timeout{300000};    // a connection silent this long is closed
  std::chrono::milliseconds request_timeout{30000};  // default deadline of a request
  std::int32_t max_connections = 256;
  std::int32_t max_inflight_per_connection = 64;
  std::int32_t max_inflight_total = 1024;
  std::int32_t io_threads = 2;
  std::int32_t worker_threads = 4;
  // Microseconds an io thread polls an engine's connection for its next request after answering
  // one (ControlServerOptions::busy_poll); 0..10000, 0 = off.
  std::int32_t busy_poll_us = 0;
  friend bool operator==(const ControlSection&, const ControlSection&) = default;
};

struct MetricsSection {
  // host:port of the HTTP endpoint (/metrics, /healthz, /readyz); port 0: any free port; empty:
  // no endpoint.
  std::string listen = "127.0.0.1:9470";
  friend bool operator==(const MetricsSection&, const MetricsSection&) = default;
};

struct ShutdownSection {
  std::chrono::milliseconds drain_timeout{10000};  // in-flight work after SIGTERM/SIGINT
  bool flush_to_disk = true;  // write cached pool and host-tier blocks to the disk tier at exit
  friend bool operator==(const ShutdownSection&, const ShutdownSection&) = default;
};

struct PeerSection {
  bool enabled = false;
  std::chrono::milliseconds fetch_deadline{2000};
  std::int64_t staging_size = 64ll << 20;  // per direction (send, receive)
  std::string ucx_tls;
  std::string ucx_net_devices;
  // Microseconds the transfer engine's progress thread polls after its last event before it sleeps
  // (TransferEngineOptions::busy_poll); 0..10000, 0 = sleeps at once.
  std::int32_t busy_poll_us = 0;
  // The transfer engine's lanes (TransferEngineOptions::lanes): progress threads, each with its
  // own UCX worker; a transfer is striped over the lanes both nodes have. 1..16.
  std::int32_t transfer_lanes = 2;
  friend bool operator==(const PeerSection&, const PeerSection&) = default;
};

struct LoggingSection {
  std::string level = "info";   // trace, debug, info, warn, error, off
  std::string format = "text";  // text, json (one JSON object per line)
  friend bool operator==(const LoggingSection&, const LoggingSection&) = default;
};

// How a node finds the other kvnodes of its cluster (node/membership.h).
enum class MembershipKind : std::uint8_t {
  kNone = 0,    // a single node: no peers, no prefix directory
  kStatic = 1,  // cluster.peers, fixed for the process's life
  kEtcd = 2,    // etcd v3 leases under cluster.etcd.prefix: members join and leave at will
};
Result<MembershipKind> ParseMembershipKind(std::string_view text);
std::string_view MembershipKindName(MembershipKind kind);

struct StaticPeer {
  std::string node_id;
  std::string address;  // host:port of its control plane (its cluster.advertise)
  friend bool operator==(const StaticPeer&, const StaticPeer&) = default;
};

struct EtcdSection {
  // host:port of etcd's client URLs (the v3 JSON gateway is on the same port); tried in order.
  std::vector<std::string> endpoints = {"127.0.0.1:2379"};
  std::int32_t lease_ttl_s = 10;  // a member whose lease is not kept alive is out after this
  std::string prefix = "/kvmesh/members/";       // keys: <prefix><node_id>
  std::chrono::milliseconds poll_interval{500};  // how often the member list is read
  friend bool operator==(const EtcdSection&, const EtcdSection&) = default;
};

struct DirectorySection {
  std::int32_t batch_ms = 100;  // KV events are sent to their home nodes at least this often
  std::chrono::milliseconds lookup_timeout{500};  // Locate's default deadline per home node
  std::int32_t max_batch_events = 4096;           // events per update message at most
  // How often the holdings are rebuilt from what the pools and tiers hold (host and disk copies
  // enter the directory this way; also after lost KV events); 0: only after lost events.
  std::chrono::milliseconds resync_interval{10000};
  friend bool operator==(const DirectorySection&, const DirectorySection&) = default;
};

struct ClusterSection {
  // host:port peers reach this node's control plane at; "": control.tcp_listen as bound.
  std::string advertise;
  MembershipKind membership = MembershipKind::kNone;
  std::vector<StaticPeer> peers;  // membership: static (this node may be listed too: ignored)
  EtcdSection etcd;
  DirectorySection directory;
  friend bool operator==(const ClusterSection&, const ClusterSection&) = default;
};

struct NodeConfig {
  std::string node_id;                    // empty: the host name
  std::string data_dir = ".kvmesh/node";  // the node's folder (lock file, socket, RocksDB)
  DeviceSelection device;
  std::int32_t tensor_parallel_size = 1;  // ranks sharing each block by KV heads (see node.h)
  ModelSelection model;
  KvCacheSection kv_cache;
  DiskTierSection disk_tier;
  ControlSection control;
  MetricsSection metrics;
  ShutdownSection shutdown;
  PeerSection peer;
  LoggingSection logging;
  ClusterSection cluster;

  // Cross-field checks that the parser cannot do key by key (e.g. one secret source at most,
  // kv_cache values through CacheConfig::Validate); kInvalidArgument naming the keys.
  [[nodiscard]] Status Validate() const;
  // kv_cache.cache with host_budget_bytes = kv_cache.host_cache_size and disk_budget_bytes =
  // disk_tier.capacity (0 when the disk tier is disabled): what BuildPoolPlan and the tiers take.
  [[nodiscard]] CacheConfig EffectiveCacheConfig() const;
  friend bool operator==(const NodeConfig&, const NodeConfig&) = default;
};

// Parses YAML text; `source` names it in errors ("kvnode.yaml"); relative paths are resolved
// against `base_dir` (empty: left relative). Keys absent from the text keep their defaults.
Result<NodeConfig> ParseNodeConfig(std::string_view yaml_text, std::string_view source,
                                   const std::string& base_dir = "");
// Reads and parses a file (kNotFound / kIoError when it cannot be read).
Result<NodeConfig> LoadNodeConfig(const std::string& path);
// The documented default configuration (configs/kvnode.yaml's text).
std::string_view DefaultNodeConfigYaml();

}  // namespace kvmesh
