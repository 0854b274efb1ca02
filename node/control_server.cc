#include "node/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/check.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/thread_annotations.h"
#include "node/control_server_internal.h"
#include "node/frame.h"
#include "node/rpc_convert.h"
#include "node/tcp_endpoint.h"

namespace kvmesh {

namespace asio = boost::asio;
using control_internal::error_code;
using control_internal::Proto;

namespace {

Status BindUnix(asio::io_context& io, const std::string& path,
                std::optional<asio::basic_socket_acceptor<Proto>>* out) {
  asio::local::stream_protocol::endpoint ep;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument(StrCat("unix_socket '", path, "' is longer than ",
                                          sizeof(sockaddr_un::sun_path) - 1, " bytes"));
  }
  ep = asio::local::stream_protocol::endpoint(path);
  std::error_code fs_ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, fs_ec))) {
    asio::local::stream_protocol::socket probe(io);
    error_code ec;
    probe.connect(ep, ec);
    if (!ec) {
      return Status::FailedPrecondition(
          StrCat("unix_socket ", path, " is in use: another process is listening on it"));
    }
    std::filesystem::remove(path, fs_ec);  // a stale socket of a node that did not exit cleanly
  }
  error_code ec;
  out->emplace(io);
  (*out)->open(Proto(AF_UNIX, 0), ec);
  if (!ec) (*out)->bind(Proto::endpoint(ep), ec);
  if (!ec) (*out)->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    out->reset();
    return Status::FailedPrecondition(StrCat("unix_socket ", path, ": ", ec.message()));
  }
  ::chmod(path.c_str(), 0660);
  return Status::Ok();
}

}  // namespace

Status ControlServer::Impl::Bind() {
  if (!options.unix_socket.empty()) {
    KVMESH_RETURN_IF_ERROR(BindUnix(io, options.unix_socket, &unix_acceptor));
  }
  if (!options.tcp_listen.empty()) {
    KVMESH_ASSIGN_OR_RETURN(const asio::ip::tcp::endpoint ep,
                            ParseTcpEndpoint("control.tcp_listen", options.tcp_listen));
    error_code ec;
    tcp_acceptor.emplace(io);
    tcp_acceptor->open(Proto(ep.protocol().family(), IPPROTO_TCP), ec);
    if (!ec) tcp_acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) tcp_acceptor->bind(Proto::endpoint(ep), ec);
    if (!ec) tcp_acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      tcp_acceptor.reset();
      return ListenError("control.tcp_listen", options.tcp_listen, ec);
    }
    const Proto::endpoint bound = tcp_acceptor->local_endpoint();
    asio::ip::tcp::endpoint tcp_ep;
    std::memcpy(tcp_ep.data(), bound.data(),
                std::min<std::size_t>(bound.size(), sizeof(sockaddr_in6)));
    tcp_bound = StrCat(tcp_ep.address().to_string(), ":", tcp_ep.port());
  }
  return Status::Ok();
}

void ControlServer::Impl::Refuse(Proto::socket socket) {
  connections_refused.fetch_add(1);
  rpc::Frame f;
  SetError(f.mutable_auth_result()->mutable_error(),
           draining.load() ? Status::PeerUnreachable("node is shutting down")
                           : Status::ResourceExhausted(StrCat("too many connections (limit ",
                                                              options.max_connections, ")")));
  auto bytes =
      std::make_shared<std::string>(std::move(EncodeFrame(f, kHandshakeMaxFrameBytes)).value());
  auto sock = std::make_shared<Proto::socket>(std::move(socket));
  asio::async_write(*sock, asio::buffer(*bytes), [sock, bytes](error_code, std::size_t) {
    error_code ec;
    sock->shutdown(Proto::socket::shutdown_both, ec);
    sock->close(ec);
  });
}

void ControlServer::Impl::Stop() {
  if (stopped.exchange(true)) return;
  draining.store(true);
  asio::post(accept_strand, [this] { CloseAcceptors(); });
  CloseAll();
  {
    MutexLock lock(&mu);
    AwaitConditionFor(cv, mu, std::chrono::seconds(10),
                      [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return sessions.empty(); });
  }
  // Every session is closed. The order leaves no handler queued anywhere when the pool and io are
  // destroyed (a queued handler holds its session, whose timers belong to io's services):
  // 1. io runs out of work once the closed sessions' last handlers have run — those may still post
  //    a session's CloseSession to its worker strand (a Close noticed late, on an io thread);
  work.reset();
  for (auto& t : io_threads) t.join();
  io_threads.clear();
  // 2. the workers run every request and CloseSession posted so far, the io threads' included
  //    (joined before step 1, a CloseSession posted after the join stayed queued in the pool and
  //    destroyed its session after io's timer service was gone: UBSan, node_handoff_test);
  workers.join();
  // 3. what the workers posted back to io since (handlers of closed sessions, which do nothing).
  io.restart();
  io.run();
  if (!options.unix_socket.empty()) {
    std::error_code fs_ec;
    std::filesystem::remove(options.unix_socket, fs_ec);
  }
}

Result<std::unique_ptr<ControlServer>> ControlServer::Bind(const ControlServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  KVMESH_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

void ControlServer::Serve(RequestHandler* handler) {
  KVMESH_CHECK(impl_->handler == nullptr && handler != nullptr);
  impl_->handler = handler;
  impl_->inline_slots.store(std::max(1, impl_->options.io_threads) - 1);
  if (impl_->unix_acceptor) impl_->Accept(*impl_->unix_acceptor, /*local=*/true);
  if (impl_->tcp_acceptor) impl_->Accept(*impl_->tcp_acceptor, /*local=*/false);
  for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i) {
    impl_->io_threads.emplace_back([io = &impl_->io] { io->run(); });
  }
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const ControlServerOptions& options,
                                                            RequestHandler* handler) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<ControlServer> server, Bind(options));
  server->Serve(handler);
  return server;
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlServer::~ControlServer() { Stop(); }

std::string ControlServer::tcp_address() const { return impl_->tcp_bound; }
const std::string& ControlServer::unix_socket() const { return impl_->options.unix_socket; }

void ControlServer::StopAccepting() {
  impl_->draining.store(true);
  asio::post(impl_->accept_strand, [impl = impl_.get()] { impl->CloseAcceptors(); });
}

bool ControlServer::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&impl_->mu);
  const auto left = deadline - std::chrono::steady_clock::now();
  return AwaitConditionFor(
      impl_->cv, impl_->mu, std::chrono::duration_cast<std::chrono::milliseconds>(left),
      [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return impl_->inflight.load() == 0; });
}

void ControlServer::Stop() { impl_->Stop(); }

bool ControlServer::draining() const { return impl_->draining.load(); }

void ControlServer::SetSecrets(std::string secret, std::string second) {
  auto next =
      std::make_shared<const Impl::Secrets>(Impl::Secrets{std::move(secret), std::move(second)});
  MutexLock lock(&impl_->secrets_mu);
  impl_->secrets = std::move(next);
}

ControlServerStats ControlServer::stats() const {
  ControlServerStats s;
  s.connections = impl_->connections.load();
  s.sessions_opened = impl_->sessions_opened.load();
  s.auth_failures = impl_->auth_failures.load();
  s.connections_refused = impl_->connections_refused.load();
  s.requests_total = impl_->requests_total.load();
  s.requests_failed = impl_->requests_failed.load();
  s.requests_rejected = impl_->requests_rejected.load();
  s.requests_inline = impl_->requests_inline.load();
  s.busy_poll_hits = impl_->busy_poll_hits.load();
  s.busy_poll_seconds = static_cast<double>(impl_->busy_poll_ns.load()) / 1e9;
  s.bad_frames = impl_->bad_frames.load();
  s.inflight = impl_->inflight.load();
  return s;
}

}  // namespace kvmesh
