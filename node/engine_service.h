// EngineService: the meaning of every control-plane request (node/proto/kvmesh_rpc.proto) — the
// engine API over the node's TieredCache (the block manager with the tiers behind it) and the
// operator's Status — as a RequestHandler for the control server.
//
// ---- The engine API (same contracts as pool/block_manager.h, per connection)
//   Attach            the pools' geometry and memory: memfd descriptors over the Unix socket for
//                     host pools, CUDA IPC handles (with the device's ordinal and UUID) for
//                     device pools (node/device_memory.h); kFailedPrecondition over TCP either
//                     way: the pools are memory of this host.
//   Admit             TieredCache::AddSequence: the prefix is matched in the pool, then restored
//                     from the host tier and RocksDB; returns one block table per pool and the
//                     reused block positions by tier. With a RemoteFetcher set, blocks the node
//                     and its tiers lack are first fetched from a peer (node/remote_fetch.h) and
//                     counted as remote hits. The engine's request_id names the sequence
//                     within its connection (two connections may use the same ids).
//   StoreFullBlocks, AppendTokens, Release, Prefetch   as the block manager's calls.
//   HandOffTo         a prefill -> decode handoff (node/handoff.h): of a prompt's stored blocks
//                     now, or (stream) of a running request's blocks layer by layer as its
//                     prefill writes them: the engine then announces each layer written
//                     (HandOffTo with layers_done; model layers, mapped to each pool's local
//                     layers) and may wait for the decode node's answer with the last one.
//                     Announce a layer only once its writes completed (device pools: after a
//                     stream synchronisation), as for StoreFullBlocks. A connection that closes
//                     cancels its streams that still wait for layers.
//   Lookup            how many prompt tokens are cached in the pool, then the host tier, then
//                     disk (a prefix; read-only).
//   PollEvents / SubscribeEvents   the block manager's KV events.
// The operator's requests (Pools, ListBlocks, Tree, InspectBlock, Stats, Evict, Flush,
// EngineReport) go to the OperatorService (node/operator_service.h) when one is set. Every request
// is timed and its status counted in the NodeMetrics when they are set (node/node_metrics.h).
// With kv_cache.enable_block_reuse false, StoreFullBlocks stores nothing (returns 0), so no block
// is ever reused or offloaded.
//
// ---- Shared pool memory: who may write which block when
//   An attached engine maps every pool read-write (mmap of the memfds, or cudaIpcOpenMemHandle of
//   the device pools). By contract:
//   - blocks of a sequence's tables at positions before reused_tokens (full reused blocks) are
//     shared and read-only: other sequences and the node's offload copies read them;
//   - the other blocks of its tables (fresh blocks, a partly reused block's copy) are private to
//     the sequence: the engine writes them (append kernel) until StoreFullBlocks stores them,
//     after which they are read-only like any cached block; the last, partial block stays private;
//   - after Release — or when the connection closes for any reason, a crash included — the
//     engine touches none of the sequence's blocks again: the node releases every sequence of
//     the connection (stored blocks stay cached at their priorities, private ones are freed and
//     reused), so a crashed engine leaves no sequence or pin behind. A block a crashed engine was
//     writing was private, so it is freed, never cached: no half-written block is ever reused.
//   - the node itself writes only blocks nobody else may touch: restores into hidden reserved
//     blocks, partial-reuse copies into fresh private blocks.
//   Device pools: the engine's writes are kernels on its own streams. It calls StoreFullBlocks
//   (and Release) only after those writes have completed (a stream synchronisation or an event
//   it waited for): the node's copies of a stored block to the host tier run on other streams,
//   in another process, and see the device memory as it is when they run. A crashed engine's
//   kernels end with its CUDA context; its IPC mappings close with the process; the memory is
//   the node's and stays allocated.
//   Engines are trusted local processes that passed the handshake; the contract is not enforced
//   by page protection.
//
// Thread safety: thread-safe (RequestHandler contract: Handle is serialised per session).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "node/control_server.h"
#include "node/node_pools.h"
#include "node/request_handler.h"
#include "store/tiered_cache.h"

namespace kvmesh {

// What Status reports about the node itself (filled by node/node.cc).
struct NodeDescription {
  std::string node_id;
  std::string version;
  std::string device;  // "cpu", "cuda:0"
  std::string model_name;
  std::string model_revision;
  std::string dtype;
  std::string kv_layout;
  std::int32_t num_layers = 0;
  std::int32_t num_attention_heads = 0;
  std::string unix_socket;
  std::string tcp_listen;
  std::string data_dir;
  std::int64_t host_tier_capacity = 0;
  std::int64_t disk_tier_capacity = 0;
  bool enable_block_reuse = true;
  std::string metrics_listen;  // as bound; empty: no metrics endpoint
};

class NodeMetrics;
class OperatorService;
class PeerService;
class RemoteFetcher;
class ClusterService;
class HandoffSender;
class PeerTable;

// One pool's line of the status and of the pools listing (kvctl status, kvctl pools): its
// occupancy by state from the block manager, its rank and block size from the node's pools.
void FillPoolStatus(const PoolStats& p, const RankPool& rp, rpc::PoolStatus* ps);

class EngineService final : public RequestHandler {
 public:
  // `cache` and `pools` must outlive the service.
  EngineService(NodeDescription description, TieredCache* cache, const NodePools* pools);
  ~EngineService() override;

  std::shared_ptr<SessionState> OpenSession(const SessionInfo& info) override;
  HandlerResult Handle(SessionState& session, const rpc::Request& request) override;
  void CloseSession(SessionState& session) override;
  KvEventBatch PollEvents(std::uint64_t from_seq, std::size_t max_events) override;

  // The server whose connection and request counters Status reports (null: none yet).
  void SetServer(const ControlServer* server) { server_.store(server); }
  // Where requests are timed and counted, and who answers operator requests (null: none; an
  // operator request then gets kNotSupported). Set before the server serves.
  void SetMetrics(NodeMetrics* metrics) { metrics_ = metrics; }
  void SetOperator(OperatorService* service) { operator_ = service; }
  // Who answers peer requests (PeerHello, HaveBlocks, FetchBlocks; sessions of role peer only)
  // and who fetches missing prefix blocks from peers in Admit (node/remote_fetch.h). Null: none
  // (peer requests get kNotSupported). Set before the server serves.
  void SetPeer(PeerService* service, RemoteFetcher* fetcher) {
    peer_ = service;
    fetcher_ = fetcher;
  }
  // The cluster messages (node/cluster_service.h); none: they get kNotSupported. Set before Serve.
  void SetCluster(ClusterService* service) { cluster_ = service; }
  // Who answers HandOffTo (node/handoff.h) and the peer table that says where the decode node is:
  // a member where membership says (an address given must agree), else a contact at the address
  // given (node/peer_table.h); the member list is never changed. Null: kNotSupported. Set before
  // the server serves.
  void SetHandoff(HandoffSender* sender, PeerTable* peers) {
    handoff_ = sender;
    handoff_peers_ = peers;
  }

  [[nodiscard]] std::int64_t open_sessions() const { return open_sessions_.load(); }
  // Sequences released because their connection closed without Release (cumulative).
  [[nodiscard]] std::int64_t released_on_close() const { return released_on_close_.load(); }

  void FillStatus(rpc::StatusResponse* out) const;

 private:
  class EngineSession;

  Status Attach(EngineSession& s, rpc::AttachResponse* out, std::vector<int>* fds) const;
  Status Admit(EngineSession& s, const rpc::AdmitRequest& in, rpc::AdmitResponse* out);
  // A handoff, the start of a streaming one (in.stream) or a stream's announcement.
  Status HandOffTo(EngineSession& s, const rpc::HandOffToRequest& in, rpc::HandoffResponse* out);
  Status HandOffLayers(EngineSession& s, const rpc::HandoffLayersDone& in,
                       rpc::HandoffResponse* out);
  Status StoreFullBlocks(EngineSession& s, const rpc::StoreFullBlocksRequest& in,
                         rpc::StoreFullBlocksResponse* out);
  Status AppendTokens(EngineSession& s, const rpc::AppendTokensRequest& in,
                      rpc::AppendTokensResponse* out);
  Status Release(EngineSession& s, const rpc::ReleaseRequest& in);
  Status Prefetch(const rpc::PrefetchRequest& in, rpc::PrefetchResponse* out);
  Status Lookup(const rpc::LookupRequest& in, rpc::LookupResponse* out);
  Result<RequestId> Running(EngineSession& s, std::uint64_t engine_id) const;

  const NodeDescription description_;
  TieredCache* const cache_;
  const NodePools* const pools_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<std::uint64_t> next_request_{1};
  std::atomic<std::int64_t> open_sessions_{0};
  std::atomic<std::int64_t> released_on_close_{0};
  std::atomic<const ControlServer*> server_{nullptr};
  NodeMetrics* metrics_ = nullptr;
  OperatorService* operator_ = nullptr;
  PeerService* peer_ = nullptr;
  RemoteFetcher* fetcher_ = nullptr;
  ClusterService* cluster_ = nullptr;
  HandoffSender* handoff_ = nullptr;
  PeerTable* handoff_peers_ = nullptr;
};

}  // namespace kvmesh
