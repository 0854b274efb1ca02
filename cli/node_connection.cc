#include "cli/node_connection.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "common/strings.h"

namespace kvmesh::cli {
namespace {

constexpr const char* kDefaultAddress = "127.0.0.1:7420";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The config file to read: (path, must exist).
std::pair<std::string, bool> ConfigPath(const NodeConnectionFlags& flags) {
  if (!flags.config.empty()) return {flags.config, true};
  if (std::string e = Env("KVMESH_KVCTL_CONFIG"); !e.empty()) return {e, true};
  std::string base = Env("XDG_CONFIG_HOME");
  if (base.empty()) {
    const std::string home = Env("HOME");
    if (home.empty()) return {"", false};
    base = home + "/.config";
  }
  return {base + "/kvmesh/kvctl.yaml", false};
}

struct ConfigFile {
  std::string node;
  SecretSource secret;
  int timeout_ms = 0;
};

Status ReadConfig(const std::string& path, ConfigFile* out) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Status::NotFound(StrCat("kvctl config ", path, " cannot be read"));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(StrCat(path, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return Status::InvalidArgument(StrCat(path, ": expected a map of keys"));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node v = it->second;
    const int line = it->first.Mark().line + 1;
    if (!v.IsScalar()) {
      return Status::InvalidArgument(StrCat(path, ":", line, ": ", key, ": expected a value"));
    }
    const std::string text = v.Scalar();
    if (key == "node") {
      out->node = text;
    } else if (key == "secret") {
      out->secret.value = text;
    } else if (key == "secret_env") {
      out->secret.env = text;
    } else if (key == "secret_file") {
      const std::filesystem::path p(text);
      out->secret.file = p.is_absolute() || dir.empty() ? text : (dir / p).string();
    } else if (key == "timeout_ms") {
      char* end = nullptr;
      const long ms = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || ms <= 0 || ms > 3600000) {
        return Status::InvalidArgument(StrCat(path, ":", line, ": timeout_ms: '", text,
                                              "' is not a number of ms in 1..3600000"));
      }
      out->timeout_ms = static_cast<int>(ms);
    } else {
      return Status::InvalidArgument(
          StrCat(path, ":", line, ": unknown key '", key,
                 "' (known keys: node, secret, secret_env, secret_file, timeout_ms)"));
    }
  }
  const int sources =
      !out->secret.value.empty() + !out->secret.env.empty() + !out->secret.file.empty();
  if (sources > 1) {
    return Status::InvalidArgument(
        StrCat(path, ": give at most one of secret, secret_env, secret_file"));
  }
  return Status::Ok();
}

bool HasSecret(const SecretSource& s) {
  return !s.value.empty() || !s.env.empty() || !s.file.empty();
}

}  // namespace

void AddNodeConnectionFlags(CLI::App* command, NodeConnectionFlags* flags) {
  command->add_option("--node", flags->address,
                      "the node: a Unix socket path or host:port (default $KVMESH_NODE, the kvctl "
                      "config's node, else 127.0.0.1:7420)");
  command->add_option("--secret", flags->secret.value,
                      "the shared secret (prefer --secret-file or $KVMESH_SECRET)");
  command->add_option("--secret-env", flags->secret.env, "environment variable holding the secret");
  command->add_option("--secret-file", flags->secret.file, "file holding the secret");
  command->add_option("--config", flags->config,
                      "kvctl config file (default $KVMESH_KVCTL_CONFIG, else "
                      "~/.config/kvmesh/kvctl.yaml when it exists)");
  command->add_option("--timeout-ms", flags->timeout_ms, "per-request timeout (default 10000)");
}

Result<NodeTarget> ResolveNodeTarget(const NodeConnectionFlags& flags) {
  NodeTarget t;
  ConfigFile file;
  const auto [path, required] = ConfigPath(flags);
  std::error_code ec;
  if (!path.empty() && (required || std::filesystem::exists(path, ec))) {
    KVMESH_RETURN_IF_ERROR(ReadConfig(path, &file));
    t.config_file = path;
  }
  if (!flags.address.empty()) {
    t.address = flags.address;
    t.address_origin = "--node";
  } else if (!Env("KVMESH_NODE").empty()) {
    t.address = Env("KVMESH_NODE");
    t.address_origin = "KVMESH_NODE";
  } else if (!file.node.empty()) {
    t.address = file.node;
    t.address_origin = StrCat("node: in ", path);
  } else {
    t.address = kDefaultAddress;
    t.address_origin = "the default";
  }
  if (HasSecret(flags.secret)) {
    t.secret = flags.secret;
    t.secret.value_origin = "--secret";
    t.origin = "flags";
  } else if (!Env(kDefaultSecretEnv).empty() || !HasSecret(file.secret)) {
    t.origin = "environment";  // LoadSecret reads KVMESH_SECRET (and says so when it is unset)
  } else {
    t.secret = file.secret;
    t.secret.value_origin = StrCat("config ", path);
    t.origin = StrCat("config ", path);
  }
  t.timeout_ms = flags.timeout_ms > 0  ? flags.timeout_ms
                 : file.timeout_ms > 0 ? file.timeout_ms
                                       : 10000;
  return t;
}

Result<std::unique_ptr<NodeClient>> ConnectToNode(const NodeConnectionFlags& flags) {
  KVMESH_ASSIGN_OR_RETURN(const NodeTarget t, ResolveNodeTarget(flags));
  return ConnectToNode(t);
}

Result<std::unique_ptr<NodeClient>> ConnectToNode(const NodeTarget& t,
                                                  const std::string& client_name) {
  Result<LoadedSecret> secret = LoadSecret(t.secret);
  if (!secret.ok()) return secret.status().WithContext("the node's secret");
  NodeClientOptions o;
  o.address = t.address;
  o.secret = secret->secret;
  o.client_name = client_name;
  o.role = rpc::CLIENT_ROLE_OPERATOR;
  o.connect_timeout = std::chrono::milliseconds(t.timeout_ms);
  o.request_timeout = std::chrono::milliseconds(t.timeout_ms);
  Result<std::unique_ptr<NodeClient>> c = NodeClient::Connect(o);
  if (c.ok()) return c;
  const Status& st = c.status();
  if (st.code() == StatusCode::kPermissionDenied) {
    return Status::PermissionDenied(StrCat("the node at ", t.address, " refused the secret from ",
                                           secret->origin, ": ", st.message()));
  }
  const std::string from =
      t.address_origin.empty() ? "" : StrCat("the address from ", t.address_origin, "; ");
  // Connected, then no Hello in time (node/client.cc): not kvnode, or a stalled one.
  if (st.code() == StatusCode::kTimedOut &&
      st.message().starts_with("waiting for the node's Hello")) {
    return Status::PeerUnreachable(StrCat(
        st.message(), " (", from, "something at ", t.address,
        " took the connection but did not answer as kvnode: is it the node's control.tcp_listen "
        "or Unix socket, and not another port such as its metrics.listen? is the node stalled?)"));
  }
  if (st.code() == StatusCode::kPeerUnreachable || st.code() == StatusCode::kTimedOut) {
    return Status::PeerUnreachable(
        StrCat(st.message(), " (", from,
               "is kvnode running? give --node, KVMESH_NODE or node: in the kvctl config)"));
  }
  return st;
}

}  // namespace kvmesh::cli
