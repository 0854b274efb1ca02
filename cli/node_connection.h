// How kvctl's live commands reach a kvnode: the address and the secret, from flags, the
// environment or a kvctl config file, and one connection with the operator role.
//
//   --node ADDRESS   a Unix socket path (engines' socket) or host:port (the node's TCP listener)
//   --secret S | --secret-env NAME | --secret-file PATH
//   --config PATH    a kvctl config file (below)
//   --timeout-ms N   per request (default 10000)
//
// Where each setting comes from, first found wins:
//   address  --node, $KVMESH_NODE, the config file's `node`, 127.0.0.1:7420 (kvnode's default)
//   secret   --secret/--secret-env/--secret-file, $KVMESH_SECRET, the config file's `secret`,
//            `secret_env` or `secret_file` (at most one)
//   timeout  --timeout-ms, the config file's `timeout_ms`, 10000
// The config file is --config, else $KVMESH_KVCTL_CONFIG, else ~/.config/kvmesh/kvctl.yaml
// ($XDG_CONFIG_HOME/kvmesh/kvctl.yaml) when it exists. It is YAML with only those keys:
//
//   node: 127.0.0.1:7420
//   secret_file: /etc/kvmesh/secret     # relative paths are relative to the config file
//   timeout_ms: 5000
//
// A config file named by --config or $KVMESH_KVCTL_CONFIG must exist; an unknown key or a bad
// value is an error naming the file, the line and the key.
//
// Errors name what to fix and where the address came from: kPeerUnreachable "cannot connect to
// 127.0.0.1:7420: Connection refused (the address from KVMESH_NODE; is kvnode running? give
// --node, KVMESH_NODE or node: in the kvctl config)"; kTimedOut when something accepted the
// connection but did not answer as kvnode (another service's port); kPermissionDenied "the node at
// ... refused the secret from ...".
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
  std::string config;  // --config
  int timeout_ms = 0;  // 0: not given
};

// Where the settings resolved to.
struct NodeTarget {
  std::string address;
  // Where the address came from: "--node", "KVMESH_NODE", "node: in FILE" or "the default".
  std::string address_origin;
  SecretSource secret;  // what to load (empty: $KVMESH_SECRET)
  std::string origin;   // of the secret settings: "flags", "environment", "config FILE"
  int timeout_ms = 10000;
  std::string config_file;  // the config file read, or ""
};

// Adds the flags above to `command`.
void AddNodeConnectionFlags(CLI::App* command, NodeConnectionFlags* flags);

// Resolves flags, environment and config file. kInvalidArgument / kNotFound for a bad config file.
Result<NodeTarget> ResolveNodeTarget(const NodeConnectionFlags& flags);

// Connects and authenticates as an operator.
Result<std::unique_ptr<NodeClient>> ConnectToNode(const NodeConnectionFlags& flags);
Result<std::unique_ptr<NodeClient>> ConnectToNode(const NodeTarget& target,
                                                  const std::string& client_name = "kvctl");

}  // namespace kvmesh::cli
