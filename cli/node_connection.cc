#include "cli/node_connection.h"

#include <cstdlib>

#include "common/strings.h"

namespace kvmesh::cli {

void AddNodeConnectionFlags(CLI::App* command, NodeConnectionFlags* flags) {
  command->add_option("--node", flags->address,
                      "the node: a Unix socket path or host:port (default $KVMESH_NODE, else "
                      "127.0.0.1:7420)");
  command->add_option("--secret", flags->secret.value,
                      "the shared secret (prefer --secret-file or $KVMESH_SECRET)");
  command->add_option("--secret-env", flags->secret.env, "environment variable holding the secret");
  command->add_option("--secret-file", flags->secret.file, "file holding the secret");
  command->add_option("--timeout-ms", flags->timeout_ms, "per-request timeout")
      ->capture_default_str();
}

Result<std::unique_ptr<NodeClient>> ConnectToNode(const NodeConnectionFlags& flags) {
  std::string address = flags.address;
  if (address.empty()) {
    const char* env = std::getenv("KVMESH_NODE");
    address = env != nullptr && *env != '\0' ? env : "127.0.0.1:7420";
  }
  Result<LoadedSecret> secret = LoadSecret(flags.secret);
  if (!secret.ok()) return secret.status().WithContext("the node's secret");
  NodeClientOptions o;
  o.address = address;
  o.secret = secret->secret;
  o.client_name = "kvctl";
  o.role = rpc::CLIENT_ROLE_OPERATOR;
  o.connect_timeout = std::chrono::milliseconds(flags.timeout_ms);
  o.request_timeout = std::chrono::milliseconds(flags.timeout_ms);
  Result<std::unique_ptr<NodeClient>> c = NodeClient::Connect(o);
  if (c.ok()) return c;
  const Status& st = c.status();
  if (st.code() == StatusCode::kPermissionDenied) {
    return Status::PermissionDenied(StrCat("the node at ", address, " refused the secret from ",
                                           secret->origin, ": ", st.message()));
  }
  if (st.code() == StatusCode::kPeerUnreachable || st.code() == StatusCode::kTimedOut) {
    return Status::PeerUnreachable(
        StrCat(st.message(), " (is kvnode running? give --node or KVMESH_NODE)"));
  }
  return st;
}

}  // namespace kvmesh::cli
