#include "node/metrics_http.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "node/tcp_endpoint.h"

namespace kvmesh {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::uint64_t kMaxRequestBytes = 8 * 1024;
constexpr unsigned kMaxRequestsPerConnection = 100;

}  // namespace

class MetricsHttpServer::Impl {
 public:
  Impl(MetricsHttpOptions o, std::function<std::string()> r, std::function<Readiness()> ready)
      : options(std::move(o)),
        render(std::move(r)),
        readiness(std::move(ready)),
        acceptor(io),
        work(asio::make_work_guard(io)) {}

  Status Bind();
  void Accept();
  void Stop();

  const MetricsHttpOptions options;
  const std::function<std::string()> render;
  const std::function<Readiness()> readiness;
  // Before io: sessions still queued in io when it is destroyed count themselves out.
  std::atomic<int> connections{0};
  std::atomic<bool> stopped{false};
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::string bound;
  std::thread thread;
};

namespace {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(MetricsHttpServer::Impl& server, tcp::socket socket)
      : server_(server), stream_(std::move(socket)) {}
  ~HttpSession() { server_.connections.fetch_sub(1); }

  void Start() { Read(); }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxRequestBytes);
    parser_->header_limit(static_cast<std::uint32_t>(kMaxRequestBytes));
    stream_.expires_after(server_.options.timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(error_code ec) {
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::operation_aborted &&
          ec != beast::error::timeout) {
        // A malformed or oversized request: answer 400 once, then close.
        Respond(http::status::bad_request, "bad request\n", "text/plain", 11, false, true);
        return;
      }
      Close();
      return;
    }
    const http::request<http::string_body>& req = parser_->get();
    ++served_;
    const bool keep_alive = req.keep_alive() && served_ < kMaxRequestsPerConnection;
    const bool head = req.method() == http::verb::head;
    if (req.method() != http::verb::get && !head) {
      Respond(http::status::method_not_allowed, "only GET and HEAD\n", "text/plain", req.version(),
              keep_alive, head);
      return;
    }
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path == "/metrics") {
      Respond(http::status::ok, server_.render(), "text/plain; version=0.0.4; charset=utf-8",
              req.version(), keep_alive, head);
    } else if (path == "/healthz") {
      Respond(http::status::ok, "ok\n", "text/plain", req.version(), keep_alive, head);
    } else if (path == "/readyz") {
      const Readiness r = server_.readiness();
      if (r == Readiness::kServing) {
        Respond(http::status::ok, "ready\n", "text/plain", req.version(), keep_alive, head);
      } else {
        Respond(http::status::service_unavailable,
                r == Readiness::kStarting ? "starting\n" : "draining\n", "text/plain",
                req.version(), keep_alive, head);
      }
    } else {
      Respond(http::status::not_found, "not found: /metrics, /healthz, /readyz\n", "text/plain",
              req.version(), keep_alive, head);
    }
  }

  void Respond(http::status status, std::string body, const char* type, unsigned version,
               bool keep_alive, bool head) {
    auto res = std::make_shared<http::response<http::string_body>>(status, version);
    res->set(http::field::server, "kvnode");
    res->set(http::field::content_type, type);
    res->keep_alive(keep_alive);
    res->content_length(body.size());
    if (!head) res->body() = std::move(body);
    stream_.expires_after(server_.options.timeout);
    auto serializer = std::make_shared<http::response_serializer<http::string_body>>(*res);
    if (head) serializer->split(true);
    const auto done = [self = shared_from_this(), res, serializer, keep_alive](error_code ec,
                                                                               std::size_t) {
      if (ec || !keep_alive) {
        self->Close();
        return;
      }
      self->Read();
    };
    if (head) {
      http::async_write_header(stream_, *serializer, done);
    } else {
      http::async_write(stream_, *res, done);
    }
  }

  void Close() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  MetricsHttpServer::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned served_ = 0;
};

}  // namespace

Status MetricsHttpServer::Impl::Bind() {
  KVMESH_ASSIGN_OR_RETURN(const tcp::endpoint ep,
                          ParseTcpEndpoint("metrics.listen", options.listen));
  error_code ec;
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return ListenError("metrics.listen", options.listen, ec);
  const tcp::endpoint local = acceptor.local_endpoint(ec);
  bound = local.address().is_v6() ? StrCat("[", local.address().to_string(), "]:", local.port())
                                  : StrCat(local.address().to_string(), ":", local.port());
  return Status::Ok();
}

void MetricsHttpServer::Impl::Accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec != asio::error::operation_aborted && !stopped.load()) {
        KVMESH_LOG_WARN("metrics accept failed error {}", ec.message());
        Accept();
      }
      return;
    }
    if (connections.fetch_add(1) >= options.max_connections) {
      connections.fetch_sub(1);
      error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<HttpSession>(*this, std::move(socket))->Start();
    }
    Accept();
  });
}

void MetricsHttpServer::Impl::Stop() {
  if (stopped.exchange(true)) return;
  asio::post(io, [this] {
    error_code ec;
    acceptor.close(ec);
  });
  work.reset();
  // Sessions end at their next deadline at the latest; stop() ends them now.
  io.stop();
  if (thread.joinable()) thread.join();
}

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, std::function<std::string()> render,
    std::function<Readiness()> readiness) {
  auto impl = std::make_unique<Impl>(options, std::move(render), std::move(readiness));
  KVMESH_RETURN_IF_ERROR(impl->Bind());
  impl->Accept();
  impl->thread = std::thread([io = &impl->io] { io->run(); });
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsHttpServer::~MetricsHttpServer() { Stop(); }
const std::string& MetricsHttpServer::address() const { return impl_->bound; }
void MetricsHttpServer::Stop() { impl_->Stop(); }

}  // namespace kvmesh
