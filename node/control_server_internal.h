// Internal to the control server (node/control_server.cc, node/control_session.cc): the server's
// state (ControlServer::Impl) and the per-connection Session it runs. Not a public header; the
// contract is node/control_server.h's.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "node/control_server.h"

namespace kvmesh {

namespace control_internal {
using Proto = boost::asio::generic::stream_protocol;
using SteadyTime = std::chrono::steady_clock::time_point;
using boost::system::error_code;

class Session;  // node/control_session.cc
}  // namespace control_internal

class ControlServer::Impl {
  using Proto = control_internal::Proto;
  using Session = control_internal::Session;
  using error_code = control_internal::error_code;

 public:
  // The secrets a handshake accepts (options' at first; ControlServer::SetSecrets).
  struct Secrets {
    std::string secret;
    std::string second;  // empty: none
  };

  explicit Impl(ControlServerOptions o)
      : secrets(std::make_shared<const Secrets>(Secrets{o.secret, o.second_secret})),
        options(std::move(o)),
        workers(static_cast<std::size_t>(std::max(1, options.worker_threads))),
        work(boost::asio::make_work_guard(io)) {}

  Status Bind();
  void Accept(boost::asio::basic_socket_acceptor<Proto>& acceptor, bool local);
  void Refuse(Proto::socket socket);
  void Register(const std::shared_ptr<Session>& s) KVMESH_EXCLUDES(mu);
  void Unregister(std::uint64_t id) KVMESH_EXCLUDES(mu);
  void CloseAll() KVMESH_EXCLUDES(mu);
  void Stop();
  // Closes both acceptors, once: StopAccepting and Stop each post it, and with several io threads
  // the two could otherwise close the same acceptor at the same time (UBSan in the reactor).
  void CloseAcceptors() {
    if (acceptors_closed.exchange(true)) return;
    error_code ec;
    if (unix_acceptor) unix_acceptor->close(ec);
    if (tcp_acceptor) tcp_acceptor->close(ec);
  }

  std::shared_ptr<const Secrets> CurrentSecrets() const KVMESH_EXCLUDES(secrets_mu) {
    MutexLock lock(&secrets_mu);
    return secrets;
  }
  mutable Mutex secrets_mu;
  std::shared_ptr<const Secrets> secrets KVMESH_GUARDED_BY(secrets_mu);
  const ControlServerOptions options;
  RequestHandler* handler = nullptr;  // set once by Serve, before any session exists
  // Declared before io: handlers still queued in io when it is destroyed hold sessions, whose
  // worker strands need the pool alive.
  boost::asio::thread_pool workers;
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
  // The acceptors' accept handlers (which re-arm async_accept) and CloseAcceptors run on this
  // strand: with several io threads a close could otherwise run while another thread re-arms the
  // same acceptor (a data race TSan found in a clean-clone CI run of node_concurrency_test).
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand{io.get_executor()};
  std::optional<boost::asio::basic_socket_acceptor<Proto>> unix_acceptor;
  std::optional<boost::asio::basic_socket_acceptor<Proto>> tcp_acceptor;
  std::string tcp_bound;
  std::vector<std::thread> io_threads;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> acceptors_closed{false};
  std::atomic<std::uint64_t> next_session_id{1};

  std::atomic<std::int64_t> connections{0}, sessions_opened{0}, auth_failures{0},
      connections_refused{0}, requests_total{0}, requests_failed{0}, requests_rejected{0},
      bad_frames{0}, inflight{0}, requests_inline{0}, busy_poll_hits{0}, busy_poll_ns{0};
  // io threads that may run a request where it was read (Session::OnReadyFrame): io_threads - 1,
  // so that one io thread is always free to serve the sockets.
  std::atomic<std::int32_t> inline_slots{0};

  // Takes an inline slot: false when none is free.
  bool TakeInlineSlot() {
    std::int32_t n = inline_slots.load(std::memory_order_relaxed);
    while (n > 0) {
      if (inline_slots.compare_exchange_weak(n, n - 1, std::memory_order_acquire)) return true;
    }
    return false;
  }
  void ReturnInlineSlot() { inline_slots.fetch_add(1, std::memory_order_release); }

  Mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, std::weak_ptr<Session>> sessions KVMESH_GUARDED_BY(mu);
};

}  // namespace kvmesh
