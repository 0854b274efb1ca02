// A listen setting's "host:port" as a TCP endpoint: the control plane's tcp_listen and the metrics
// endpoint's metrics.listen read it the same way.
//
// host: an IPv4 address, an IPv6 address in brackets ("[::1]"), or "localhost" (127.0.0.1); no
// name resolution. port: 0..65535 (0: any free port).
//
// Thread safety: a pure function.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvmesh {

// kInvalidArgument naming `setting` (e.g. "tcp_listen") and what is wrong: no host or port, a host
// that is not an IP address, a port that is not a number in range.
Result<boost::asio::ip::tcp::endpoint> ParseTcpEndpoint(std::string_view setting,
                                                        const std::string& text);

// kFailedPrecondition for a listen setting that could not be bound or listened on: the setting,
// its value and the system's reason; for an address in use, also what to do about it (a second
// kvnode on one host needs ports of its own).
Status ListenError(std::string_view setting, const std::string& text,
                   const boost::system::error_code& ec);

}  // namespace kvmesh
