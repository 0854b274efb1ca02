// For the benchmarks that run the real programs: a kvnode process started from a YAML config
// (path of the binary compiled in by bench/CMakeLists.txt), waited for until a Status call on its
// Unix socket answers, stopped with SIGTERM (SIGKILL after 30 s) when the object goes; its
// resident memory read from /proc; and a program run to completion with its stdout captured.
//
// Not thread-safe: the benchmarks use it from their main thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "node/client.h"

namespace kvmesh::bench {

// posix_spawn, not fork: glibc spawns with CLONE_VM | CLONE_VFORK, so the time to start a program
// does not grow with the memory of the process that starts it (a benchmark hosting a node with a
// large pool would otherwise time its own page tables being copied).
inline pid_t SpawnProcess(const std::string& path, const std::vector<std::string>& args,
                          const std::filesystem::path& out, const std::filesystem::path& err) {
  std::vector<std::string> argv_s{path};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  KVMESH_CHECK(rc == 0) << "posix_spawn " << path << " failed: " << rc;
  return pid;
}

// Runs `path args` to completion; its stdout, and the wall time in seconds.
struct ProgramRun {
  int exit_code = -1;
  std::string out;
  double seconds = 0;
};
inline ProgramRun RunProgram(const std::string& path, const std::vector<std::string>& args,
                             const std::filesystem::path& dir) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = SpawnProcess(path, args, dir / "program.out", dir / "program.err");
  int status = 0;
  ::waitpid(pid, &status, 0);
  ProgramRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(dir / "program.out");
  std::stringstream s;
  s << in.rdbuf();
  r.out = s.str();
  return r;
}

// VmRSS of a process in bytes (0 when it cannot be read).
inline std::int64_t ResidentBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

class KvnodeChild {
 public:
  // `yaml` must put the Unix socket at dir/kvnode.sock and use `secret`.
  KvnodeChild(const std::string& kvnode, const std::filesystem::path& dir, const std::string& yaml,
              std::string secret)
      : socket_((dir / "kvnode.sock").string()), secret_(std::move(secret)) {
    std::ofstream(dir / "kvnode.yaml") << yaml;
    pid_ = SpawnProcess(kvnode, {"--config", (dir / "kvnode.yaml").string()}, dir / "kvnode.out",
                        dir / "kvnode.err");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      KVMESH_CHECK(::waitpid(pid_, &status, WNOHANG) == 0)
          << "kvnode exited before it was ready; see " << (dir / "kvnode.err").string();
      auto c = NodeClient::Connect(Options(socket_));
      if (c.ok()) {
        auto s = (*c)->GetStatus();
        if (s.ok()) {
          tcp_ = s->tcp_listen();
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    KVMESH_CHECK(false) << "kvnode did not become ready";
  }
  ~KvnodeChild() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 3000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  KvnodeChild(const KvnodeChild&) = delete;
  KvnodeChild& operator=(const KvnodeChild&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& socket() const { return socket_; }
  [[nodiscard]] const std::string& tcp() const { return tcp_; }
  [[nodiscard]] NodeClientOptions Options(const std::string& address) const {
    NodeClientOptions o;
    o.address = address;
    o.secret = secret_;
    return o;
  }

 private:
  pid_t pid_ = -1;
  std::string socket_;
  std::string secret_;
  std::string tcp_;
};

}  // namespace kvmesh::bench
