// Node: one kvnode — everything a NodeConfig describes, assembled and running.
//
// Start(config):
//   1. the data directory: created when missing, must be writable, and is locked (flock on
//      <data_dir>/LOCK, holding the pid) so that two kvnodes never share one;
//   2. the secret (node/secret.h), the model (preset or Hugging Face config.json), the device;
//   3. the pool plan of the rank model (node/node_pools.h: tensor_parallel_size ranks) sized
//      from the primary memory's free bytes, and the pools in shared or device memory;
//   4. the TieredCache over them: the block manager, the host tier (host_cache_size) and the
//      RocksDB tier (<data_dir>/rocksdb unless disk_tier.path says otherwise);
//   5. with peer.enabled, the peer data path (node/peer_sessions.h, peer_service.h,
//      remote_fetch.h): the transfer engine, its staging memory registered once, the PeerTable
//      (membership writes it; tests Upsert), the PeerService and the RemoteFetcher of Admit;
//   6. the control server (Unix socket, TCP) with the EngineService and the OperatorService;
//   the metrics endpoint (metrics.listen: /metrics, /healthz, /readyz; node/metrics_http.h) is
//   bound with the control listeners and answers from then on: /readyz is 503 "starting" until
//   the control server serves, 200 while it does, 503 "draining" from the start of Shutdown.
// Any failure is one Status whose message says what to fix ("data_dir /x is held by another
// kvnode (pid 42)", "tcp_listen 127.0.0.1:7420: address already in use"); nothing is left
// running.
//
// Devices. `cpu` puts the pools in host shared memory (memfds) and the CPU backend runs the
// kernels. `cuda:N` puts rank r's pools in the device memory of CUDA device N + r, exported to
// engines as CUDA IPC handles (node/device_memory.h), sized from that device's free memory; the
// tiers then copy blocks through pinned host memory with the CUDA block copy on copy streams
// (store/device_staging.h), and copy-on-partial-reuse runs on the device. `auto` is cuda:0 when
// this process sees a CUDA device per rank, else cpu. With device pools the peer data path stages
// as the tiers do (UCX has no CUDA transport here): only its staging slots are registered, a
// holder encodes a block read through staging, a requester writes a verified bundle through
// staging (OffloadEngine::ReadBlock, WriteBlock). `emulated` is a test
// device (store/emulated_device.h): pools in host memory that the node's own code cannot read
// (PROT_NONE), every copy staged exactly as for CUDA pools but done by the CPU; engines are given
// the memfds and see host pools — so the device data path runs, and is checked, without a GPU.
//
// Shutdown() (SIGTERM/SIGINT in kvnode_main.cc):
//   1. stop accepting connections; new requests fail with kPeerUnreachable;
//   2. wait up to shutdown.drain_timeout for requests in flight;
//   3. close every connection (their sequences are released: stored blocks stay cached);
//   4. with shutdown.flush_to_disk, write every cached pool block and host-tier block at or above
//      secondary_offload_min_priority that the disk tier does not hold yet into it;
//   5. close the tiers (RocksDB flushed and closed) and release the lock.
// So every block an engine stored (StoreFullBlocks acknowledged) before the signal is on disk
// after a clean exit, within the disk tier's capacity. The metrics endpoint stops after step 4.
//
// Thread safety: Start and Shutdown are called from one thread; Summary and service() are
// thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "node/cluster_service.h"
#include "node/control_server.h"
#include "node/engine_service.h"
#include "node/handoff.h"
#include "node/membership.h"
#include "node/metrics_http.h"
#include "node/node_config.h"
#include "node/node_metrics.h"
#include "node/node_pools.h"
#include "node/operator_service.h"
#include "node/peer_service.h"
#include "node/peer_sessions.h"
#include "node/peer_table.h"
#include "node/remote_fetch.h"
#include "node/secret.h"
#include "pool/pool_plan.h"
#include "store/tiered_cache.h"

namespace kvmesh {

// The RocksDB tier's options from the config's disk_tier section (the path resolved to
// <data_dir>/rocksdb when empty); the tier's other settings keep their defaults. The pools are
// added by the tiered cache.
RocksDbTierOptions DiskTierOptions(const NodeConfig& c);

struct ShutdownReport {
  bool drained = true;  // no request was still running at the drain deadline
  std::int64_t released_sequences = 0;
  std::int64_t flushed_blocks = 0;  // written to the disk tier by flush_to_disk
  std::int64_t flush_failures = 0;
  // Not written: beyond the disk tier's capacity (node/flush.h).
  std::int64_t flush_skipped_full = 0;
  double seconds = 0;
};

// What Node::Start would refuse about the config itself, without a device, a socket or the data
// directory: the model loads (model.hf_config is read), tensor_parallel_size divides its heads,
// and its pools plan (pool_shares per pool, a max_tokens too small for a block), with memory as
// no bound. Errors as Start's (kNotFound / kIoError: a model file not there or unreadable).
Status CheckConfigForStart(const NodeConfig& config);

class Node {
 public:
  static Result<std::unique_ptr<Node>> Start(const NodeConfig& config);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The one-screen start-up summary: pools, bytes, tiers, listen addresses.
  [[nodiscard]] std::string Summary() const;
  // `progress` (optional) is told what the shutdown is doing, on this thread: at each step, and
  // every few seconds while the flush writes (kvnode tells systemd: STATUS, EXTEND_TIMEOUT_USEC).
  ShutdownReport Shutdown(const std::function<void(std::string_view what)>& progress = {});
  // Reads the secret and the second secret again from their sources (kvnode: SIGHUP), for the
  // handshakes that follow, both ways (the control server's, and this node's own connections to
  // its peers); sessions already open stay open. On an error (a source unreadable, a secret too
  // short) the secrets in use stay, and the error is logged and returned.
  Status ReloadSecrets();

  [[nodiscard]] const NodeConfig& config() const { return config_; }
  [[nodiscard]] const PoolPlan& plan() const { return plan_; }
  [[nodiscard]] std::string tcp_address() const;
  [[nodiscard]] const std::string& unix_socket() const { return description_.unix_socket; }
  // The metrics endpoint as bound ("127.0.0.1:9470"); empty when metrics.listen is "".
  [[nodiscard]] const std::string& metrics_address() const { return description_.metrics_listen; }
  // The control plane's counters (connections, requests, busy polling).
  [[nodiscard]] ControlServerStats control_stats() const { return server_->stats(); }
  EngineService& service() { return *service_; }
  // The cluster (cluster.membership other than none; else null): the member table membership
  // keeps, and the prefix directory as the PrefixLocator remote fetch and routing use.
  [[nodiscard]] PeerTable* peers() { return peers_.get(); }
  [[nodiscard]] PrefixDirectory* directory() { return directory_.get(); }
  [[nodiscard]] Membership* membership() { return membership_.get(); }
  TieredCache& cache() { return *cache_; }
  [[nodiscard]] const NodePools& pools() const { return pools_; }
  // The peer data path; null without peer.enabled (peers() then too, unless in a cluster).
  PeerSessions* peer_sessions() { return peer_sessions_.get(); }
  PeerService* peer_service() { return peer_service_.get(); }
  BlockSource* block_source() { return block_source_.get(); }
  RemoteFetcher* remote_fetcher() { return fetcher_.get(); }
  HandoffSender* handoff_sender() { return handoff_sender_.get(); }
  HandoffReceiver* handoff_receiver() { return handoff_receiver_.get(); }

 private:
  struct Startup;
  Node() = default;
  Status Open(const NodeConfig& config);
  Status StartMetrics();
  Status StartPeers();
  void ResetPeers();
  Status CreateDirectory();
  // The control address this node gives its peers (cluster.advertise, else tcp_listen as bound).
  [[nodiscard]] std::string AdvertisedAddress() const;
  Status StartMembership();
  void StopCluster();
  void StartServices();
  [[nodiscard]] Readiness readiness() const;

  NodeConfig config_;
  NodeDescription description_;
  std::string secret_origin_;
  // The secret this node presents to its peers (peer sessions, directory updates).
  std::shared_ptr<PresentedSecret> presented_secret_;
  std::string model_summary_;
  int lock_fd_ = -1;
  int first_device_ = -1;  // CUDA device of rank 0's pools; -1: host pools
  // device: emulated — the test device the pools live on; outlives them and the cache.
  std::unique_ptr<EmulatedDevice> emulated_device_;
  std::int64_t disk_entries_at_start_ = 0;
  PoolPlan plan_;
  NodePools pools_;
  // Before the cache: its copy workers report to the metrics until the cache is gone.
  std::unique_ptr<NodeMetrics> metrics_;
  std::unique_ptr<ThreadPool> copy_pool_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<OperatorService> operator_;
  // The member table: membership (a cluster) writes it, the directory and the peer data path read
  // it; made when either is configured, gone last.
  std::unique_ptr<PeerTable> peers_;
  // The cluster: built after the cache, stopped first at shutdown (the node leaves, then drains).
  std::unique_ptr<PrefixDirectory> directory_;
  std::unique_ptr<ClusterService> cluster_;
  std::unique_ptr<Membership> membership_;
  // The peer data path: after the cache (it reads the pools), before the services that use it.
  std::unique_ptr<PeerSessions> peer_sessions_;
  std::unique_ptr<CacheBlockSource> block_source_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<AskPeersLocator> locator_;
  std::unique_ptr<RemoteFetcher> fetcher_;
  std::unique_ptr<HandoffSender> handoff_sender_;
  std::unique_ptr<HandoffReceiver> handoff_receiver_;
  std::unique_ptr<EngineService> service_;
  std::unique_ptr<ControlServer> server_;
  NodeMetricSources sources_;
  int node_collector_ = 0;
  std::atomic<bool> serving_{false};
  std::atomic<bool> draining_{false};
  // Last: stopped first, before anything its collectors read goes.
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  bool shut_down_ = false;
};

}  // namespace kvmesh
