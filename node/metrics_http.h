// MetricsHttpServer: the node's HTTP endpoint for Prometheus and health checks, on Boost.Beast
// (metrics.listen, 127.0.0.1:9470 by default).
//
//   GET /metrics   the registry in the text exposition format 0.0.4
//                  (Content-Type: text/plain; version=0.0.4; charset=utf-8)
//   GET /healthz   200 "ok" while the process serves HTTP at all (liveness)
//   GET /readyz    200 "ready" while the node serves requests; 503 "starting" before the control
//                  server accepts, 503 "draining" once shutdown began (readiness)
//   anything else  404; a method other than GET or HEAD: 405
//
// One I/O thread of its own (a slow scrape never delays the control plane). Per connection (a
// session owning its beast::tcp_stream): a deadline before every read and write (`timeout`),
// requests of at most 8 KiB (headers and body), keep-alive up to 100 requests; at most
// `max_connections` connections (more are closed at once). Rendering /metrics runs the registry's
// collectors on this thread; they take short locks (the block manager's) and never wait for I/O.
//
// Start binds before returning, so "address in use" is refused at start-up (kFailedPrecondition,
// one line naming metrics.listen); port 0 binds any free port (address() tells which).
//
// Thread safety: Start, Stop and address() may be called from any thread; `render` and `readiness`
// are called on the server's thread and must stay valid until Stop returned. The destructor stops.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"

namespace kvmesh {

enum class Readiness : std::uint8_t { kStarting, kServing, kDraining };

struct MetricsHttpOptions {
  std::string listen;  // "host:port"
  int max_connections = 32;
  std::chrono::milliseconds timeout{10000};
};

class MetricsHttpServer {
 public:
  static Result<std::unique_ptr<MetricsHttpServer>> Start(const MetricsHttpOptions& options,
                                                          std::function<std::string()> render,
                                                          std::function<Readiness()> readiness);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // "127.0.0.1:9470" as bound.
  [[nodiscard]] const std::string& address() const;
  void Stop();

  class Impl;

 private:
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvmesh
