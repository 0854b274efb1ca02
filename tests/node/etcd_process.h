// For tests against a real etcd: an `etcd` process (Debian etcd-server) on free loopback ports with
// its data in a scratch directory, stopped by its PID (SIGKILL and reap) when the object goes, also
// when the test fails. EtcdBinary() is empty when etcd is not installed: tests then GTEST_SKIP
// with kEtcdMissing.
//
// Not thread-safe: tests use it from their main thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "common/result.h"
#include "tests/node/loopback_port.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {

inline constexpr const char* kEtcdMissing =
    "etcd is not installed (Debian package etcd-server; scripts/bootstrap installs it)";

// The path of the etcd binary (PATH, then /usr/bin/etcd), or "".
std::string EtcdBinary();

class EtcdProcess {
 public:
  // Starts etcd under `dir` and waits until it answers a range request.
  static Result<std::unique_ptr<EtcdProcess>> Start(const std::filesystem::path& dir);
  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }  // "127.0.0.1:port"
  [[nodiscard]] ChildProcess& process() { return *process_; }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string endpoint_;
};

}  // namespace kvmesh::node_test
