#include "tests/node/etcd_process.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "common/strings.h"
#include "node/etcd_client.h"

namespace kvmesh::node_test {

std::string EtcdBinary() {
  if (const char* path = std::getenv("PATH")) {
    for (const std::string& dir : StrSplit(path, ':')) {
      const std::filesystem::path p = std::filesystem::path(dir) / "etcd";
      if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return ::access("/usr/bin/etcd", X_OK) == 0 ? "/usr/bin/etcd" : "";
}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const std::filesystem::path& dir) {
  const std::string binary = EtcdBinary();
  if (binary.empty()) return Status::NotFound(kEtcdMissing);
  std::filesystem::create_directories(dir);
  const int client = FreeLoopbackPort();
  const int peer = FreeLoopbackPort();
  const std::string client_url = StrCat("http://127.0.0.1:", client);
  const std::string peer_url = StrCat("http://127.0.0.1:", peer);
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
  etcd->endpoint_ = StrCat("127.0.0.1:", client);
  KVMESH_ASSIGN_OR_RETURN(
      etcd->process_,
      ChildProcess::Spawn(
          binary,
          {"--name", "test", "--data-dir", (dir / "data").string(), "--listen-client-urls",
           client_url, "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url,
           "--initial-advertise-peer-urls", peer_url, "--initial-cluster",
           StrCat("test=", peer_url), "--log-level", "warn"},
          dir / "etcd"));
  const EtcdClient probe({etcd->endpoint_}, std::chrono::milliseconds(500));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!etcd->process_->running()) {
      return Status::IoError(StrCat("etcd exited: ", etcd->process_->Stderr()));
    }
    if (probe.ListPrefix("/").ok()) return etcd;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::TimedOut(StrCat("etcd did not answer within 20 s: ", etcd->process_->Stderr()));
}

}  // namespace kvmesh::node_test
