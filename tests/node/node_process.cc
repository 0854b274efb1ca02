#include "tests/node/node_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/strings.h"

namespace kvmesh::node_test {
namespace {

std::string ReadWhole(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

ExitStatus Decode(int status) {
  ExitStatus e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  return e;
}

}  // namespace

namespace {
// The compiled-in path, unless the environment names another (the GPU check runs test binaries
// built on another machine, beside the programs they start: scripts/gpu-node-bundle).
std::string ProgramPath(const char* env, const char* built) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? v : built;
}
}  // namespace

std::string KvnodePath() { return ProgramPath("KVMESH_KVNODE", KVMESH_KVNODE_PATH); }
std::string SynthPath() { return ProgramPath("KVMESH_SYNTH", KVMESH_SYNTH_PATH); }

std::string TestConfig(const std::filesystem::path& dir, std::int64_t max_tokens,
                       const std::string& host_cache, const std::string& disk,
                       const std::string& extra, const std::string& control_extra,
                       const std::string& kv_cache_extra) {
  std::ostringstream y;
  y << "node_id: test-node\n"
    << "data_dir: " << (dir / "data").string() << "\n"
    << "device: cpu\n"
    << "model:\n  preset: qwen2.5-0.5b\n"
    << "kv_cache:\n"
    << "  dtype: bf16\n"
    << "  tokens_per_block: 16\n"
    << "  max_tokens: " << max_tokens << "\n"
    << "  host_cache_size: " << (host_cache.empty() ? "0" : host_cache) << "\n"
    << "  secondary_offload_min_priority: 0\n"
    << kv_cache_extra << "disk_tier:\n"
    << "  enabled: " << (disk.empty() ? "false" : "true") << "\n";
  if (!disk.empty()) y << "  capacity: " << disk << "\n";
  y << "control:\n"
    << "  unix_socket: " << (dir / "kvnode.sock").string() << "\n"
    << "  tcp_listen: 127.0.0.1:0\n"
    << "  secret: " << kTestSecret << "\n"
    << "  handshake_timeout: 2s\n"
    << control_extra;
  // The metrics endpoint on a free port, unless the caller configures it.
  if (extra.find("metrics:") == std::string::npos) y << "metrics:\n  listen: 127.0.0.1:0\n";
  y << extra << "logging:\n  level: info\n";
  return y.str();
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const std::string& path,
                                                          const std::vector<std::string>& args,
                                                          const std::filesystem::path& log_prefix) {
  const std::filesystem::path out = log_prefix.string() + ".out";
  const std::filesystem::path err = log_prefix.string() + ".err";
  std::vector<std::string> argv_s{path};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_s.size() + 1);
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError("fork failed");
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) ::dup2(o, 1);
    if (e >= 0) ::dup2(e, 2);
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, out, err));
}

ChildProcess::~ChildProcess() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
}

bool ChildProcess::running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }

void ChildProcess::Signal(int sig) {
  if (!status_) ::kill(pid_, sig);
}

std::optional<ExitStatus> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = Decode(st);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string ChildProcess::Stdout() const { return ReadWhole(out_); }
std::string ChildProcess::Stderr() const { return ReadWhole(err_); }

Result<std::unique_ptr<KvnodeProcess>> KvnodeProcess::Start(
    const std::filesystem::path& dir, const std::string& yaml, std::chrono::milliseconds timeout,
    const std::vector<std::string>& launcher) {
  const std::filesystem::path config = dir / "kvnode.yaml";
  { std::ofstream(config) << yaml; }
  static std::atomic<int> starts{0};
  auto p = std::unique_ptr<KvnodeProcess>(new KvnodeProcess());
  std::vector<std::string> args(launcher.begin(), launcher.end());
  args.insert(args.end(), {KvnodePath(), "--config", config.string()});
  const std::string path = args.front();
  args.erase(args.begin());
  KVMESH_ASSIGN_OR_RETURN(
      p->process_, ChildProcess::Spawn(path, args, dir / StrCat("kvnode.", starts.fetch_add(1))));
  p->socket_ = (dir / "kvnode.sock").string();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last = Status::TimedOut("kvnode did not become ready");
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto st = p->process_->Wait(std::chrono::milliseconds(0)); st) {
      return Status::FailedPrecondition(StrCat("kvnode exited (code ", st->code, ", signal ",
                                               st->signal,
                                               ") before it was ready: ", p->process_->Stderr()));
    }
    auto client = p->Connect("test-readiness");
    if (client.ok()) {
      auto status = (*client)->GetStatus();
      if (status.ok()) {
        p->tcp_ = status->tcp_listen();
        p->metrics_ = status->metrics_listen();
        // The node answers before main prints its summary and "kvnode ready" (what a user and
        // scripts/run wait for); tests read that output, so wait for it too (on a loaded machine
        // a test once read stdout before the line was written).
        while (p->process_->Stdout().find("kvnode ready\n") == std::string::npos) {
          if (std::chrono::steady_clock::now() >= deadline) {
            return Status::TimedOut("kvnode answered but did not print 'kvnode ready'");
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return p;
      }
      last = status.status();
    } else {
      last = client.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return last.WithContext(StrCat("kvnode not ready: ", p->process_->Stderr()));
}

KvnodeProcess::~KvnodeProcess() {
  if (process_ && process_->running()) {
    process_->Signal(SIGTERM);
    if (!process_->Wait(std::chrono::seconds(20))) process_->Signal(SIGKILL);
  }
}

NodeClientOptions KvnodeProcess::Client(const std::string& name, bool tcp) const {
  NodeClientOptions o;
  o.address = tcp ? tcp_ : socket_;
  o.secret = kTestSecret;
  o.client_name = name;
  o.connect_timeout = std::chrono::seconds(5);
  o.request_timeout = std::chrono::seconds(30);
  return o;
}

Result<std::unique_ptr<NodeClient>> KvnodeProcess::Connect(const std::string& name,
                                                           bool tcp) const {
  return NodeClient::Connect(Client(name, tcp));
}

std::optional<ExitStatus> KvnodeProcess::Terminate(std::chrono::milliseconds timeout) {
  process_->Signal(SIGTERM);
  return process_->Wait(timeout);
}

bool StopProcess(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const std::filesystem::path tasks = std::filesystem::path("/proc") / std::to_string(pid) / "task";
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream in(task.path() / "stat");
      std::string stat;
      std::getline(in, stat);
      const std::size_t paren = stat.rfind(')');  // the name may hold spaces or parentheses
      all = all && paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
    }
    if (!ec && all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

RunOutput RunToCompletion(const std::string& path, const std::vector<std::string>& args,
                          const std::filesystem::path& log_prefix,
                          std::chrono::milliseconds timeout) {
  RunOutput r;
  auto child = ChildProcess::Spawn(path, args, log_prefix);
  if (!child.ok()) return r;
  auto st = (*child)->Wait(timeout);
  if (st) r.status = *st;
  r.out = (*child)->Stdout();
  r.err = (*child)->Stderr();
  return r;
}

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  // Short: a Unix socket path inside it must stay under 108 bytes.
  path_ = std::filesystem::path("/tmp") / StrCat("kvn-", ::getpid(), "-", counter.fetch_add(1));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::optional<std::string> HttpGet(int port, const std::string& target) {
  namespace http = boost::beast::http;
  try {
    boost::asio::io_context io;
    boost::beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::seconds(5));
    stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                  static_cast<unsigned short>(port)));
    http::request<http::empty_body> req(http::verb::get, target, 11);
    req.set(http::field::host, "127.0.0.1");
    http::write(stream, req);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    boost::beast::error_code ec;
    stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    if (res.result() != http::status::ok) return std::nullopt;
    return res.body();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> MetricValue(const std::string& exposition, const std::string& series) {
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

Result<rpc::ClusterLookupResponse> ClusterLookup(NodeClient& c, const std::vector<Token>& p) {
  rpc::Request r;
  r.mutable_cluster_lookup()->mutable_tokens()->Add(p.begin(), p.end());
  KVMESH_ASSIGN_OR_RETURN(rpc::Response resp, c.Call(std::move(r)));
  return std::move(*resp.mutable_cluster_lookup());
}

}  // namespace kvmesh::node_test
