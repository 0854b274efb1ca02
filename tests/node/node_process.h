// For the tests that run real kvnode processes: a kvnode started from a YAML config in a scratch
// directory, its output captured to files, stopped (SIGTERM, then SIGKILL after a grace period)
// when the object goes, also when the test fails; and the synthetic engine as a child process.
// Binaries' paths are compiled in (KVMESH_KVNODE_PATH, KVMESH_SYNTH_PATH).
//
// Not thread-safe: tests use it from their main thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/client.h"

namespace kvmesh::node_test {

inline constexpr const char* kTestSecret = "kvmesh-test-secret-0123456789";

// A small node config for tests: `data_dir` under `dir`, the secret above, TCP on a free port,
// qwen2.5-0.5b bf16 (12 KiB per token) in 16-token blocks capped at `max_tokens` tokens, a host
// tier and a disk tier of the given sizes ("" = none), the metrics endpoint on a free loopback port
// (unless `extra` has a metrics section). `extra` is added at the top level (whole keys or
// sections), `control_extra` inside the control section and `kv_cache_extra` inside kv_cache
// ("  key: value" lines). The last section is logging, so "  format: json\n" appended to the text
// sets the log format.
std::string TestConfig(const std::filesystem::path& dir, std::int64_t max_tokens = 4096,
                       const std::string& host_cache = "8MiB", const std::string& disk = "64MiB",
                       const std::string& extra = "", const std::string& control_extra = "",
                       const std::string& kv_cache_extra = "");

struct ExitStatus {
  bool exited = false;
  int code = -1;   // exit code when exited
  int signal = 0;  // the signal that ended it otherwise
};

// A child process with stdout and stderr in files.
class ChildProcess {
 public:
  static Result<std::unique_ptr<ChildProcess>> Spawn(const std::string& path,
                                                     const std::vector<std::string>& args,
                                                     const std::filesystem::path& log_prefix);
  ~ChildProcess();  // SIGKILL and reap if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool running();
  void Signal(int sig);
  // Waits up to `timeout`; nullopt while still running.
  std::optional<ExitStatus> Wait(std::chrono::milliseconds timeout);
  [[nodiscard]] std::string Stdout() const;
  [[nodiscard]] std::string Stderr() const;

 private:
  ChildProcess(pid_t pid, std::filesystem::path out, std::filesystem::path err)
      : pid_(pid), out_(std::move(out)), err_(std::move(err)) {}
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  std::filesystem::path out_, err_;
};

// A kvnode process: Start writes dir/kvnode.yaml and waits until a Status call on the Unix socket
// succeeds (or the process exits: the error then carries its stderr).
class KvnodeProcess {
 public:
  // `launcher`, when given, runs kvnode through it: {"/usr/sbin/ip", "netns", "exec", "ns-a"}
  // starts it in network namespace ns-a (the Unix socket, a path, still reaches it from here).
  static Result<std::unique_ptr<KvnodeProcess>> Start(
      const std::filesystem::path& dir, const std::string& yaml,
      std::chrono::milliseconds timeout = std::chrono::seconds(60),
      const std::vector<std::string>& launcher = {});
  ~KvnodeProcess();

  [[nodiscard]] ChildProcess& process() { return *process_; }
  [[nodiscard]] const std::string& unix_socket() const { return socket_; }
  [[nodiscard]] const std::string& tcp_address() const { return tcp_; }
  // The metrics endpoint as bound ("127.0.0.1:40123"); empty when off.
  [[nodiscard]] const std::string& metrics_address() const { return metrics_; }
  [[nodiscard]] NodeClientOptions Client(const std::string& name = "test-engine",
                                         bool tcp = false) const;
  Result<std::unique_ptr<NodeClient>> Connect(const std::string& name = "test-engine",
                                              bool tcp = false) const;
  // SIGTERM, then waits up to `timeout` for the exit.
  std::optional<ExitStatus> Terminate(std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string socket_;
  std::string tcp_;
  std::string metrics_;
};

// Sends SIGSTOP to `pid` and returns once every thread of it is stopped (state T in
// /proc/<pid>/task/*/stat), or false after 5 s. kill() returning is not enough: the kernel wakes
// one thread to take the signal and the others stop only once it has run, so on a loaded machine a
// thread of a stopped kvnode went on serving for milliseconds (PeerFetchTest's holder answered the
// fetch it should have left waiting, in 3 of about 100 runs under load).
bool StopProcess(pid_t pid);

// Runs kvnode (e.g. --check-config, or a start that must fail) to completion.
struct RunOutput {
  ExitStatus status;
  std::string out;
  std::string err;
};
RunOutput RunToCompletion(const std::string& path, const std::vector<std::string>& args,
                          const std::filesystem::path& log_prefix,
                          std::chrono::milliseconds timeout = std::chrono::seconds(180));

// The programs the tests start: the build's, or $KVMESH_KVNODE / $KVMESH_SYNTH when set.
std::string KvnodePath();
std::string SynthPath();

// A fresh directory named after the running test, removed with the object.
// GET http://127.0.0.1:port/target: the body; nullopt when the server does not answer 200 within
// 5 s.
std::optional<std::string> HttpGet(int port, const std::string& target);

// The value of the sample `series` (name and labels exactly as written, e.g.
// `kvmesh_directory_resyncs_total{cause="periodic"}`) in a Prometheus text exposition; nullopt
// when it is not there.
std::optional<double> MetricValue(const std::string& exposition, const std::string& series);

// The node's answer to a cluster-wide lookup of prompt `p` (rpc ClusterLookup, kvctl route).
Result<rpc::ClusterLookupResponse> ClusterLookup(NodeClient& c, const std::vector<Token>& p);

class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvmesh::node_test
