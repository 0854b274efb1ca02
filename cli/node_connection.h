// How kvctl's live commands reach a kvnode: the address and the secret, from flags or the
// environment, and one connection with the operator role.
//
//   --node ADDRESS   a Unix socket path (engines' socket) or host:port (the node's TCP listener);
//                    default: $KVMESH_NODE, else 127.0.0.1:7420 (kvnode's default tcp_listen)
//   --secret S | --secret-env NAME | --secret-file PATH
//                    default: $KVMESH_SECRET (node/secret.h)
//   --timeout-ms N   per request (default 10000)
//
// Errors name what to fix: kPeerUnreachable "cannot reach the node at 127.0.0.1:7420: Connection
// refused (is kvnode running? give --node or KVMESH_NODE)", kPermissionDenied "the node at ...
// refused the secret ...".
//
// Not thread-safe (kvctl runs one command per process).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "common/result.h"
#include "node/client.h"
#include "node/secret.h"

namespace kvmesh::cli {

struct NodeConnectionFlags {
  std::string address;
  SecretSource secret;
  int timeout_ms = 10000;
};

// Adds the flags above to `command`.
void AddNodeConnectionFlags(CLI::App* command, NodeConnectionFlags* flags);

// Connects and authenticates as an operator.
Result<std::unique_ptr<NodeClient>> ConnectToNode(const NodeConnectionFlags& flags);

}  // namespace kvmesh::cli
