// NodeClient: the C++ client of a kvnode's control plane, used by engines, kvctl, the synthetic
// engine, tests and benchmarks.
//
// Connect() opens the Unix socket ("unix:/path", or any address containing '/') or TCP
// ("host:port"), runs the handshake (node/auth.h) — the client proves it knows the secret and
// checks that the node does too — and returns a ready client. Each call sends one request and
// waits for its response (one request at a time per client; open several clients for
// parallelism). The typed calls have the contracts of the block manager's calls
// (pool/block_manager.h) as the node's EngineService applies them (node/engine_service.h).
//
// Errors: the node's Status for a refused request (its code and message, e.g. kResourceExhausted
// when the node's in-flight limits are reached, kNotFound for an unknown request id);
// kPermissionDenied when the secret is wrong; kPeerUnreachable when the node cannot be reached,
// closes the connection or is shutting down; kTimedOut when no response came within the request's
// timeout_ms (request_timeout when it sets none) and a short grace (the connection is then closed:
// a late response could not be matched). After a transport error
// every call returns kPeerUnreachable; connect again.
//
// Thread safety: externally synchronised (one caller at a time).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "node/frame.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "pool/block_manager.h"
#include "pool/kv_events.h"

namespace kvmesh {

struct NodeClientOptions {
  std::string address;  // "unix:/run/kvnode.sock", "/run/kvnode.sock" or "127.0.0.1:7420"
  std::string secret;
  std::string client_name = "kvmesh-client";
  rpc::ClientRole role = rpc::CLIENT_ROLE_ENGINE;
  std::chrono::milliseconds connect_timeout{5000};  // connecting and the handshake
  std::chrono::milliseconds request_timeout{30000};
  std::uint32_t max_frame_size = 64u << 20;  // largest response accepted
  // How long a call polls for its response before it sleeps in poll(2) (0: sleeps at once). The
  // calling thread spins on a core meanwhile (yielding it to any other thread ready there); a
  // response within it is read without a wake-up. Adaptive, per kind of call: a kind whose
  // recent answers took longer than spin_wait (an Admit that restores from disk) sleeps at once
  // until its answers come within spin_wait again (a 2-bit counter per kind, updated by every
  // call, spinning or not).
  std::chrono::microseconds spin_wait{0};
};

struct AdmitReply {
  AddSequenceResult result;
  std::int64_t pool_hit_blocks = 0;
  std::int64_t host_hit_blocks = 0;
  std::int64_t disk_hit_blocks = 0;
  std::int64_t remote_hit_blocks = 0;  // fetched from a peer
};

class NodeClient {
 public:
  static Result<std::unique_ptr<NodeClient>> Connect(const NodeClientOptions& options);
  ~NodeClient();
  NodeClient(const NodeClient&) = delete;
  NodeClient& operator=(const NodeClient&) = delete;

  [[nodiscard]] const std::string& node_id() const { return node_id_; }
  [[nodiscard]] std::uint64_t session_id() const { return session_id_; }
  [[nodiscard]] bool connected() const { return fd_ >= 0; }
  // Calls that spun for their answer (spin_wait > 0 and their kind answered within it lately).
  [[nodiscard]] std::int64_t spinning_calls() const { return spinning_calls_; }

  // One request, one response. `fds` receives descriptors that came with the response (Attach
  // over the Unix socket); the caller owns them. The response's error is returned as a Status.
  Result<rpc::Response> Call(rpc::Request request, std::vector<int>* fds = nullptr);

  Result<rpc::AttachResponse> Attach(std::vector<int>* fds);
  Result<AdmitReply> Admit(std::uint64_t request_id, std::span<const Token> tokens,
                           const SequenceOptions& options = {});
  Result<std::int64_t> StoreFullBlocks(std::uint64_t request_id,
                                       std::optional<std::int64_t> num_computed_tokens = {});
  Result<AppendResult> AppendTokens(std::uint64_t request_id, std::span<const Token> tokens);
  Status Release(std::uint64_t request_id);
  Result<std::int64_t> Prefetch(std::span<const Token> tokens, const SequenceOptions& options = {});
  Result<rpc::LookupResponse> Lookup(std::span<const Token> tokens,
                                     const SequenceOptions& options = {});
  Result<KvEventBatch> PollEvents(std::uint64_t from_seq, std::uint32_t max_events = 0);
  // Asks this (prefill) node to hand the prompt's blocks to decode node `to_node_id` at
  // `to_address` (node/handoff.h); the decode node's answer.
  Result<rpc::HandoffResponse> HandOffTo(const std::string& to_node_id,
                                         const std::string& to_address,
                                         std::span<const Token> tokens,
                                         const SequenceOptions& options = {},
                                         std::uint32_t deadline_ms = 0);
  // Streaming (node/handoff.h): starts handing this connection's running request `request_id`
  // (its prompt `tokens`) to the decode node layer by layer as its prefill writes them; the answer
  // comes at once with the stream's id (handoff_id; streaming false: the decode node needs
  // nothing). `deadline_ms` (0: 5000) covers the whole stream.
  Result<rpc::HandoffResponse> HandOffStream(std::uint64_t request_id,
                                             const std::string& to_node_id,
                                             const std::string& to_address,
                                             std::span<const Token> tokens,
                                             const SequenceOptions& options = {},
                                             std::uint32_t deadline_ms = 0);
  // Model layers [0, layers_done) of every block of stream `handoff_id` are written (and, on a
  // device, synchronised). wait: returns the decode node's answer (wanted, had, moved, held).
  Result<rpc::HandoffResponse> HandOffLayers(std::uint64_t handoff_id, std::int32_t layers_done,
                                             bool wait = false);
  Result<rpc::StatusResponse> GetStatus();

  // A subscription to KV events from `from_seq` (SubscribeEvents): the node then pushes event
  // batches on this connection until it closes. While subscribed, use NextEvents only (a Call
  // would skip batches). NextEvents waits up to `wait` for the next batch: nullopt when none came
  // (the connection stays open), kPeerUnreachable when the node closed it.
  Status SubscribeEvents(std::uint64_t from_seq);
  Result<std::optional<KvEventBatch>> NextEvents(std::chrono::milliseconds wait);

  // Raw access for tests of malformed input: writes bytes as they are, reads one frame.
  Status SendRaw(std::span<const std::byte> bytes);
  Result<rpc::Frame> ReadFrame(std::vector<int>* fds = nullptr);

 private:
  NodeClient(int fd, NodeClientOptions options);
  // Hello, AuthRequest, AuthResult, all before `deadline` (the connect deadline).
  Status Handshake(std::chrono::steady_clock::time_point deadline);
  // HandOffTo, or HandOffStream of `stream_request`: one HandOffToRequest.
  Result<rpc::HandoffResponse> HandOff(const std::string& to_node_id, const std::string& to_address,
                                       std::span<const Token> tokens,
                                       const SequenceOptions& options, std::uint32_t deadline_ms,
                                       std::optional<std::uint64_t> stream_request);
  void Disconnect();
  Status WaitReadable(std::chrono::steady_clock::time_point deadline);
  // ReadFrame with an explicit deadline; a timeout disconnects only when `disconnect_on_timeout`.
  Result<rpc::Frame> ReadFrameUntil(std::chrono::steady_clock::time_point deadline,
                                    std::vector<int>* fds, bool disconnect_on_timeout);
  std::uint64_t subscription_id_ = 0;

  int fd_ = -1;
  bool local_ = false;
  NodeClientOptions options_;
  std::string node_id_;
  std::uint64_t session_id_ = 0;
  std::uint64_t next_id_ = 1;
  FrameDecoder decoder_;
  std::vector<int> pending_fds_;
  // Adaptive spin_wait: per request body case, 0..3; a call spins when its kind's score is >= 2.
  static constexpr std::uint8_t kSpinScoreStart = 2, kSpinScoreSpin = 2, kSpinScoreMax = 3;
  // How long past a request's timeout_ms Call still waits for the node's answer at that deadline.
  static constexpr std::chrono::milliseconds kAnswerGrace{250};
  std::unordered_map<int, std::uint8_t> spin_score_;
  bool spin_now_ = false;  // the call in progress spins (read by WaitReadable)
  std::int64_t spinning_calls_ = 0;
};

}  // namespace kvmesh
