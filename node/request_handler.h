// RequestHandler: what the control server (node/control_server.h) asks of the node's logic, and the
// per-connection state that logic keeps.
//
// The server owns connections, framing, authentication, limits and threads; the handler owns the
// meaning of requests. Calls:
//   OpenSession   once per authenticated connection, on an I/O thread (must not block);
//   Handle        per request, on a worker thread or inline on the I/O thread that read it
//                 (control_server.h says when), serialised per session (one request of a session
//                 at a time, in arrival order), so a session's state needs no lock of its own; may
//                 block (block manager, tier copies, RocksDB): the server keeps an I/O thread free;
//   CloseSession  once, on a worker thread, after the session's last Handle returned — it
//                 releases whatever the connection held (sequences, pins);
//   PollEvents    on an I/O thread, for SubscribeEvents streams (must not block: the event ring has
//                 its own short lock).
//
// Thread safety: implementations are thread-safe across sessions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "node/proto/kvmesh_rpc.pb.h"
#include "pool/kv_events.h"

namespace kvmesh {

struct SessionInfo {
  std::uint64_t session_id = 0;
  rpc::ClientRole role = rpc::CLIENT_ROLE_UNSPECIFIED;
  std::string client_name;
  std::string peer;    // "unix" or "127.0.0.1:51234"
  bool local = false;  // on the Unix socket (may receive file descriptors)
};

// What a handler keeps per connection; derived by the handler.
class SessionState {
 public:
  explicit SessionState(SessionInfo info) : info_(std::move(info)) {}
  virtual ~SessionState() = default;
  [[nodiscard]] const SessionInfo& info() const { return info_; }

 private:
  SessionInfo info_;
};

struct HandlerResult {
  rpc::Response response;
  // Descriptors to pass with the response (SCM_RIGHTS; Unix socket only). Not owned: they stay
  // open in the node, and the receiver gets its own duplicates.
  std::vector<int> fds;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual std::shared_ptr<SessionState> OpenSession(const SessionInfo& info) = 0;
  virtual HandlerResult Handle(SessionState& session, const rpc::Request& request) = 0;
  virtual void CloseSession(SessionState& session) = 0;
  virtual KvEventBatch PollEvents(std::uint64_t from_seq, std::size_t max_events) = 0;
};

}  // namespace kvmesh
