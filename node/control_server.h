// ControlServer: the node's control plane on Boost.Asio — a Unix socket for engines on the host,
// TCP (127.0.0.1 by default) for kvctl and peers — with framing (node/frame.h), authentication
// (node/auth.h), limits and the threads that run requests.
//
// Per connection (a Session, in control_server.cc):
//   handshake  Hello is sent at once; only an AuthRequest in a frame of at most 1 KiB is accepted,
//              within handshake_timeout; a wrong MAC gets AuthResult{permission_denied} and the
//              connection is closed; anything else, or silence, closes it. The MAC is checked
//              against the secret and, when one is set, the second secret (accepted during a
//              rotation); the server proves itself with the one the client used. SetSecrets
//              replaces both for the handshakes that follow (sessions already open stay open).
//   ready      Requests in frames of at most max_frame_size. Each request is checked against the
//              in-flight limits (per connection and overall: kResourceExhausted at once when full,
//              never an unbounded queue) and the node's state (draining: kPeerUnreachable "node is
//              shutting down"), then runs on the worker pool, serialised per connection (requests
//              of one connection run one at a time, in order; connections run in parallel) — or
//              inline, see below. A
//              request whose deadline (its timeout_ms, or request_timeout) passed before it ran
//              gets kTimedOut and does not run. A frame that does not parse, or a message of an
//              unknown type, gets an error response (id 0) and the connection stays; a bad frame
//              header (length over the limit, another version) gets an error response and the
//              connection is closed (the stream cannot be resynchronised). A frame begun but not
//              finished within handshake_timeout, or a connection idle (no request in flight) for
//              idle_timeout, is closed.
//   closed     After the last in-flight request of the connection finished, the handler's
//              CloseSession runs (it releases every sequence and pin the connection held).
// Connections beyond max_connections get AuthResult{resource_exhausted} and are closed.
// Every handler of a session runs on its strand (one per session on the I/O context); its first one
// is posted, so the acceptor's handler never runs a session's work (a request run inline there
// would keep every new connection waiting until it finished). Requests run
// on the worker pool (a strand per session over it), except one case: a request that arrives when
// nothing else of its connection is in flight runs inline, on the io thread that read it, if at
// most io_threads - 2 other io threads are doing so — so at least one io thread is always free to
// serve every socket, however long a request takes (a restore from disk, a peer fetch), and
// io_threads 1 never runs a request inline. Inline, the request's answer is written from the same
// thread: the two hand-offs (io -> worker -> io), two of the four thread wake-ups of a request,
// are saved. Its order, limits, deadline and accounting are those of a pooled request.
//
// Busy polling (busy_poll > 0; off by default, see docs/kvnode.md for when it pays): after a
// request of an engine (a Unix-socket connection) ran inline and its answer was written, the io
// thread polls that connection (a non-blocking peek at its socket) for up to busy_poll before it
// goes back to waiting for every socket, and reads the next request at once if it came. An engine
// calls the node in bursts (Admit, StoreFullBlocks, AppendTokens, Release of a scheduling step),
// each call sent as soon as the answer to the one before came: the next request is then read by a
// thread that is already running instead of one woken from epoll_wait (docs/kvnode.md, "The control
// plane"). Only a connection that is sending back to back is polled (its last request came within
// busy_poll of the answer before it), and never a TCP one (kvctl, peers), where many clients would
// take turns holding the inline slot. The poll holds an inline slot, so at least one io thread
// still serves every other socket. The price is CPU: up to busy_poll of an io thread after the last
// request of a burst; nothing while the node is idle (stats: busy_poll_hits, the requests found so;
// busy_poll_seconds, the time spent polling). 0: off.
//
// Shutdown: StopAccepting() closes the listeners and makes new requests fail with
// kPeerUnreachable; WaitIdle(deadline) waits for in-flight requests; Stop() closes every
// connection (their CloseSession runs), then joins the threads. The destructor calls Stop().
//
// Thread safety: the public methods are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "node/request_handler.h"

namespace kvmesh {

struct ControlServerOptions {
  std::string node_id;
  std::string secret;
  std::string second_secret;  // also accepted; empty: none
  std::string unix_socket;    // path; empty: no Unix listener
  std::string tcp_listen;     // "host:port"; empty: no TCP listener; port 0: any free port
  std::uint32_t max_frame_size = 4u << 20;
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds idle_timeout{300000};
  std::chrono::milliseconds request_timeout{30000};
  std::int32_t max_connections = 256;
  std::int32_t max_inflight_per_connection = 64;
  std::int32_t max_inflight_total = 1024;
  std::int32_t io_threads = 2;
  std::int32_t worker_threads = 4;
  std::chrono::milliseconds event_poll_interval{20};
  // How long an io thread polls a connection for its next request after answering one inline
  // (see above); >= 0, 0 = off.
  std::chrono::microseconds busy_poll{0};
};

struct ControlServerStats {
  std::int64_t connections = 0;          // open now (authenticated or not)
  std::int64_t sessions_opened = 0;      // authenticated, cumulative
  std::int64_t auth_failures = 0;        // wrong MAC, bad handshake, handshake timeout
  std::int64_t connections_refused = 0;  // over max_connections
  std::int64_t requests_total = 0;       // requests answered
  std::int64_t requests_failed = 0;      // answered with an error (rejected ones included)
  std::int64_t requests_rejected = 0;    // in-flight limits (resource_exhausted)
  std::int64_t bad_frames = 0;           // headers, payloads or message types refused
  std::int64_t inflight = 0;             // requests accepted and not yet answered
  std::int64_t requests_inline = 0;      // run on the io thread that read them (no hand-off)
  // Busy polling: requests whose arrival a polling io thread saw (read without a wake-up), and
  // the seconds io threads spent polling (CPU), found or not.
  std::int64_t busy_poll_hits = 0;
  double busy_poll_seconds = 0;
};

class ControlServer {
 public:
  // Binds the listeners; nothing is accepted before Serve. Errors (kFailedPrecondition, one line
  // each): the socket path is in use by a running process, the TCP address is in use, an address
  // that does not parse (kInvalidArgument), a path too long for a Unix socket. A node binds first,
  // so that these refusals come before anything slow (opening RocksDB) is done.
  static Result<std::unique_ptr<ControlServer>> Bind(const ControlServerOptions& options);
  // Starts accepting and the threads; `handler` must outlive the server. Called once.
  void Serve(RequestHandler* handler);
  // Bind, then Serve.
  static Result<std::unique_ptr<ControlServer>> Start(const ControlServerOptions& options,
                                                      RequestHandler* handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // "127.0.0.1:7420" as bound (the real port when 0 was asked); empty without TCP.
  [[nodiscard]] std::string tcp_address() const;
  [[nodiscard]] const std::string& unix_socket() const;

  void StopAccepting();
  // True when no request is in flight before `deadline`.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  void Stop();

  [[nodiscard]] ControlServerStats stats() const;
  [[nodiscard]] bool draining() const;
  // The secrets the handshakes that start from now on accept (`second` empty: one).
  void SetSecrets(std::string secret, std::string second);

  class Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvmesh
