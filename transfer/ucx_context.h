// UcxContext: RAII owner of a UCP context (ucp_init / ucp_cleanup), configured from options rather
// than only from the environment; and the translation of UCX status codes into kvmesh Status.
//
// Configuration: UCX reads its UCX_* environment variables first (ucp_config_read); every option
// set here then overrides its variable (ucp_config_modify), so a kvnode config decides the
// transports, devices and TCP segment sizes whatever the environment says. Options left at their
// "unset" value (empty string, 0) leave UCX's own default or the environment's value in place.
//
// Transport-level keys go to ucp_config_modify under the name UCX 1.13 matches them by: the
// transport's own table without its prefix (TCP segment sizes: "TX_SEG_SIZE", "RX_SEG_SIZE"), or
// under the shared table's prefix ("MM_ERROR_HANDLING" for posix and sysv). Spelling them as the
// environment does ("TCP_TX_SEG_SIZE") is silently ignored by UCX 1.13 (a warning at worker
// creation); tests/transfer/ucx_wrappers_test.cc checks that the segment sizes do take effect.
//
// Features: active messages (the data path), wakeup (the progress thread sleeps on the worker's
// event fd). No tag matching, no RMA: transfer_engine.h says why.
//
// Thread safety: Create and destruction are not concurrent with any use. A context is used by the
// workers and memory regions created from it; it must outlive all of them.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace kvmesh {

struct UcxContextOptions {
  // UCX_TLS: "tcp", "posix,cma", "sm", ... Empty: UCX's default (every transport it finds).
  std::string tls;
  // UCX_NET_DEVICES: "lo", "eth0", "mlx5_0:1", ... Empty: every device.
  std::string net_devices;
  // UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE in bytes; 0 leaves UCX's default (8 KiB / 64 KiB).
  // 1 MiB each: the fastest of 8K/64K, 64K, 256K, 512K, 1M and 2M for the engine's 64 KiB to
  // 4 MiB blocks in bench/transfer_bench (docs/transfer.md has the figures). Costs UCX receive
  // buffers of 1 MiB. REQUIRES: rx >= tx when both are set (UCX refuses otherwise).
  std::uint64_t tcp_tx_seg_size = 1024 * 1024;
  std::uint64_t tcp_rx_seg_size = 1024 * 1024;
  // UCX_KEEPALIVE_INTERVAL: how often UCX checks that the peers of idle endpoints are alive (the
  // detection of a dead peer on shared memory; TCP sees a closed socket at once). Zero: UCX's
  // default (20 s).
  std::chrono::milliseconds keepalive_interval{250};
  // Lets the shared-memory transports take part in endpoints with peer error handling: posix and
  // sysv check their peer's liveness (MM_ERROR_HANDLING=y) and cma declares that it can invalidate
  // registrations (MEMORY_INVALIDATE=y). Without this, UCX 1.13 refuses shared memory for such
  // endpoints ("no peer failure handler") and the engine would fall back to TCP.
  bool shm_peer_error_handling = true;
  // Any further ucp_config_modify pairs, applied last: {"RNDV_THRESH", "64K"}, ...
  std::vector<std::pair<std::string, std::string>> extra;
};

class UcxContext {
 public:
  // kInvalidArgument: an option UCX does not accept (the message names it).
  // kNotSupported / kInternal: ucp_init failed (no usable transport, ...).
  static Result<std::unique_ptr<UcxContext>> Create(const UcxContextOptions& options);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  [[nodiscard]] ucp_context_h get() const { return context_; }
  [[nodiscard]] const UcxContextOptions& options() const { return options_; }

 private:
  UcxContext(ucp_context_h context, UcxContextOptions options)
      : context_(context), options_(std::move(options)) {}

  ucp_context_h context_;
  UcxContextOptions options_;
};

// The kvmesh code for a UCX status: UCS_ERR_CANCELED → kCancelled; connection reset, unreachable,
// endpoint timeout, rejected → kPeerUnreachable; UCS_ERR_TIMED_OUT → kTimedOut; no memory/resource
// → kResourceExhausted; invalid parameter → kInvalidArgument; unsupported → kNotSupported; I/O →
// kIoError; no such element → kNotFound; anything else → kInternal. `what` prefixes the message.
Status UcsToStatus(ucs_status_t status, std::string_view what);

}  // namespace kvmesh
