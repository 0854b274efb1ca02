// The shared ucx_perftest runner of the transfer benchmarks (bench/perftest.h).
#include "bench/perftest.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/strings.h"

extern char** environ;

namespace kvmesh::bench {
namespace {

// A spawned child: SIGKILLed (if still running) and reaped when the object goes.
class Child {
 public:
  Child() = default;
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() { Kill(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] bool started() const { return pid_ > 0; }
  // Waits for the exit; true when it exited with status 0.
  bool WaitSucceeded() {
    if (pid_ <= 0) return false;
    int status = 0;
    pid_t r = -1;
    while ((r = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// posix_spawnp of `argv` with this process's environment less its UCX_* variables, plus `env`;
// stdout to `out_fd` (or /dev/null when < 0), stderr to /dev/null. -1 when it failed.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int out_fd) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "UCX_", 4) != 0) environment.emplace_back(*e);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd < 0) return -1;
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out_fd >= 0 ? out_fd : null_fd, STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, null_fd, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(null_fd);
  return rc == 0 ? pid : -1;
}

// One client run: its stdout, or empty when it failed, printed no result or ran past `timeout`.
std::string RunClient(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  Child client(Spawn(argv, env, fds[1]));
  ::close(fds[1]);
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    char chunk[4096];
    const ssize_t n = ::read(fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the client closed its stdout (exited)
    output.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (!client.started() || timed_out) return {};  // ~Child kills and reaps it
  if (!client.WaitSucceeded()) return {};
  if (output.find("overall") == std::string::npos) return {};
  return output;
}

// The last line of the table: iterations, 3 overheads (usec), bandwidth average and overall
// (MB/s = 2^20 bytes/s), message rates.
Result<double> ParseOverallBandwidth(const std::string& output) {
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.find('|') == std::string::npos && line.find('+') != 0) last = line;
  }
  // strtod, not operator>>: a run too short for a typical latency prints "inf" in that column,
  // which a stream does not read (and the columns after it would be lost).
  std::istringstream words(last);
  std::vector<double> values;
  for (std::string w; words >> w;) {
    char* end = nullptr;
    const double v = std::strtod(w.c_str(), &end);
    if (end == w.c_str() || *end != '\0') break;
    values.push_back(v);
  }
  if (values.size() < 6) {
    return Status::IoError(StrCat("ucx_perftest: no result line in its output: '", last, "'"));
  }
  return values[5] * 1048576.0;
}

}  // namespace

std::vector<std::string> PerftestTcpEnv(const std::string& devices, std::uint64_t tx_seg,
                                        std::uint64_t rx_seg) {
  std::vector<std::string> env = {"UCX_TLS=tcp", "UCX_WARN_UNUSED_ENV_VARS=n"};
  if (!devices.empty()) env.push_back("UCX_NET_DEVICES=" + devices);
  if (tx_seg != 0) env.push_back("UCX_TCP_TX_SEG_SIZE=" + std::to_string(tx_seg));
  if (rx_seg != 0) env.push_back("UCX_TCP_RX_SEG_SIZE=" + std::to_string(rx_seg));
  return env;
}

std::uint64_t PerftestIterations(std::uint64_t message_bytes, std::uint64_t bytes) {
  return std::max<std::uint64_t>(64, message_bytes == 0 ? 0 : bytes / message_bytes);
}

Result<double> RunPerftest(const PerftestOptions& options) {
  if (options.message_bytes == 0 || options.iterations == 0 || options.attempts < 1) {
    return Status::InvalidArgument("ucx_perftest: message size, iterations and attempts > 0");
  }
  static std::atomic<int> next_port{20000 + static_cast<int>(::getpid() % 20000)};
  const std::string port = std::to_string(next_port.fetch_add(1));
  Child server(Spawn({"ucx_perftest", "-p", port}, options.env, -1));
  if (!server.started()) return Status::IoError("ucx_perftest: could not start the server");
  std::vector<std::string> argv = {"ucx_perftest",
                                   "127.0.0.1",
                                   "-p",
                                   port,
                                   "-t",
                                   options.test,
                                   "-s",
                                   std::to_string(options.message_bytes),
                                   "-n",
                                   std::to_string(options.iterations),
                                   "-w",
                                   std::to_string(options.warmup),
                                   "-f"};
  if (options.peer_errors) argv.emplace_back("-e");
  std::string output;
  for (int attempt = 0; attempt < options.attempts && output.empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server is listening
    output = RunClient(argv, options.env, options.client_timeout);
  }
  server.Kill();  // it serves one test and exits; killed if it did not
  if (output.empty()) {
    return Status::IoError(StrCat("ucx_perftest ", options.test, " of ", options.message_bytes,
                                  " B: no successful run (is ucx-utils installed?)"));
  }
  return ParseOverallBandwidth(output);
}

}  // namespace kvmesh::bench
