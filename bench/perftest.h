// The ucx_perftest baseline of the transfer benchmarks (transfer_bench, peer_fetch_bench,
// handoff_bench): one server and one client of Debian's ucx_perftest (ucx-utils) run as
// subprocesses on 127.0.0.1 with the given UCX_* environment (the caller's own UCX_* variables are
// dropped), one test (ucp_am_bw, tag_bw, ...) at one message size; the answer is the overall
// bandwidth the client prints.
//
// Processes: the server is started first; the client is retried (every 100 ms, up to
// `attempts` times) until one run succeeds, since the server takes a moment to listen. A client
// that runs past `client_timeout` is killed. Both are killed (SIGKILL) if still running and reaped
// on every return path: no child outlives RunPerftest.
//
// Thread safety: RunPerftest may be called from any thread; each call takes a port of its own
// (20000 + pid % 20000, then the next ones), so calls may overlap.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace kvmesh::bench {

struct PerftestOptions {
  // UCX_* settings of both processes, "NAME=value" (e.g. "UCX_TLS=tcp", "UCX_NET_DEVICES=lo").
  std::vector<std::string> env;
  std::string test = "ucp_am_bw";                   // ucx_perftest -t
  std::uint64_t message_bytes = 0;                  // -s; REQUIRES > 0
  std::uint64_t iterations = 64;                    // -n; REQUIRES > 0
  int warmup = 16;                                  // -w
  bool peer_errors = false;                         // -e: endpoints with peer error handling
  int attempts = 50;                                // client runs tried while the server comes up
  std::chrono::milliseconds client_timeout{60000};  // one client run at most
};

// The UCX_* environment of a tcp transport on `devices` with the given TCP segment sizes (0: UCX's
// default), and UCX_WARN_UNUSED_ENV_VARS=n.
std::vector<std::string> PerftestTcpEnv(const std::string& devices, std::uint64_t tx_seg,
                                        std::uint64_t rx_seg);

// Iterations that move about `bytes` in `message_bytes` messages (at least 64).
std::uint64_t PerftestIterations(std::uint64_t message_bytes, std::uint64_t bytes);

// Bytes per second (the "overall" bandwidth, ucx_perftest's MB/s taken as 2^20 bytes/s).
// Errors: kInvalidArgument (options), kIoError (spawn failed, no run succeeded, output without a
// result line).
Result<double> RunPerftest(const PerftestOptions& options);

}  // namespace kvmesh::bench
