// A kvnode's life as an operator sees it: refusals to start with one clear line, the default
// config, JSON logs, a clean SIGTERM that loses no acknowledged block under load, and a warm
// restart that finds the last run's blocks on disk.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "node/node.h"
#include "pool/primary_memory.h"
#include "tests/node/node_config_test_util.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

constexpr std::int32_t kT = 16;

std::vector<Token> Prompt(std::uint32_t seed, std::size_t n) {
  std::vector<Token> t(n);
  for (std::size_t i = 0; i < n; ++i) {
    t[i] = static_cast<Token>((seed * 2654435761u + i * 40503u) % 60000u);
  }
  return t;
}

std::string ReadWhole(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

RunOutput StartExpectingFailure(const ScratchDir& dir, const std::string& name,
                                const std::string& yaml) {
  const auto config = dir.path() / (name + ".yaml");
  { std::ofstream(config) << yaml; }
  return RunToCompletion(KvnodePath(), {"--config", config.string()}, dir.path() / name,
                         std::chrono::seconds(30));
}

TEST(KvnodeLifecycleTest, RefusesToStartWithOneClearLine) {
  ScratchDir dir;
  // A bad config names the key and its line.
  RunOutput bad = StartExpectingFailure(dir, "bad", "kv_cache:\n  tokens_per_blok: 16\n");
  EXPECT_EQ(bad.status.code, 2);
  EXPECT_THAT(bad.err, HasSubstr(":2: unknown key 'tokens_per_blok'"));
  EXPECT_THAT(bad.err, HasSubstr("tokens_per_block"));
  // An unusable data directory (a file).
  { std::ofstream(dir.path() / "not-a-dir") << "x"; }
  std::string file_cfg = TestConfig(dir.path());
  const std::string data_line = "data_dir: " + (dir.path() / "data").string();
  file_cfg.replace(file_cfg.find(data_line), data_line.size(),
                   "data_dir: " + (dir.path() / "not-a-dir").string());
  RunOutput file_dir = StartExpectingFailure(dir, "filedir", file_cfg);
  EXPECT_NE(file_dir.status.code, 0);
  EXPECT_THAT(file_dir.err, HasSubstr("data_dir"));
  // A data directory another kvnode holds; a socket path and a TCP port in use.
  ScratchDir first_dir;
  auto first = KvnodeProcess::Start(first_dir.path(), TestConfig(first_dir.path()));
  ASSERT_TRUE(first.ok()) << first.status();
  RunOutput held = StartExpectingFailure(dir, "held", TestConfig(first_dir.path()));
  EXPECT_EQ(held.status.code, 1);
  EXPECT_THAT(held.err, HasSubstr("is held by another kvnode (pid"));
  std::filesystem::create_directories(dir.path() / "other");
  std::string same_socket = TestConfig(dir.path() / "other");
  same_socket.replace(same_socket.find((dir.path() / "other" / "kvnode.sock").string()),
                      (dir.path() / "other" / "kvnode.sock").string().size(),
                      (*first)->unix_socket());
  RunOutput sock = StartExpectingFailure(dir, "sock2", same_socket);
  EXPECT_EQ(sock.status.code, 1);
  EXPECT_THAT(sock.err, HasSubstr("is in use: another process is listening on it"));
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string port_cfg = TestConfig(dir.path() / "port");
  std::filesystem::create_directories(dir.path() / "port");
  port_cfg.replace(port_cfg.find("127.0.0.1:0"), 11,
                   "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  RunOutput port = StartExpectingFailure(dir, "port", port_cfg);
  ::close(listener);
  EXPECT_EQ(port.status.code, 1);
  EXPECT_THAT(port.err, HasSubstr("control.tcp_listen 127.0.0.1:"));  // the key as written
  EXPECT_THAT(port.err, HasSubstr("in use"));
  EXPECT_THAT(port.err, HasSubstr("give each node its own control.tcp_listen"));
  // A CUDA device this process does not see (on a machine without a GPU: cuda:0).
  const int devices = CudaDeviceCount();
  std::string gpu_cfg = TestConfig(dir.path() / "gpu");
  std::filesystem::create_directories(dir.path() / "gpu");
  gpu_cfg.replace(gpu_cfg.find("device: cpu"), 11, "device: cuda:" + std::to_string(devices));
  RunOutput gpu = StartExpectingFailure(dir, "gpu", gpu_cfg);
  EXPECT_EQ(gpu.status.code, 1);
  EXPECT_THAT(gpu.err, HasSubstr("device cuda:" + std::to_string(devices) + ": needs CUDA device " +
                                 std::to_string(devices) + "; this process sees " +
                                 std::to_string(devices)));
  // The secret: none configured, or too short, is the config's fault (exit 2, no restart under
  // systemd); a secret file that cannot be read may be a mount not there yet (exit 1). The same
  // from --check-config, which reads a secret file as the start would.
  const std::string inline_secret = StrCat("  secret: ", node_test::kTestSecret, "\n");
  const auto with_secret = [&](const std::string& name, const std::string& lines) {
    std::filesystem::create_directories(dir.path() / name);
    std::string cfg = TestConfig(dir.path() / name);
    cfg.replace(cfg.find(inline_secret), inline_secret.size(), lines);
    return cfg;
  };
  { std::ofstream(dir.path() / "short-secret") << "12345\n"; }
  const std::string missing_file =
      with_secret("nofile", StrCat("  secret_file: ", (dir.path() / "nosuch").string(), "\n"));
  const std::string short_file = with_secret(
      "shortfile", StrCat("  secret_file: ", (dir.path() / "short-secret").string(), "\n"));
  const std::string no_env = with_secret("noenv", "  secret_env: KVMESH_TEST_UNSET_SECRET\n");
  RunOutput nofile = StartExpectingFailure(dir, "nofile", missing_file);
  EXPECT_EQ(nofile.status.code, 1) << nofile.err;
  EXPECT_THAT(nofile.err, HasSubstr("nosuch"));
  RunOutput shortfile = StartExpectingFailure(dir, "shortfile", short_file);
  EXPECT_EQ(shortfile.status.code, 2) << shortfile.err;
  EXPECT_THAT(shortfile.err, HasSubstr("at least 16 are required"));
  RunOutput noenv = StartExpectingFailure(dir, "noenv", no_env);
  EXPECT_EQ(noenv.status.code, 2) << noenv.err;
  EXPECT_THAT(noenv.err, HasSubstr("KVMESH_TEST_UNSET_SECRET"));
  const auto check = [&](const std::string& name, const std::string& yaml) {
    const auto config = dir.path() / (name + "-check.yaml");
    { std::ofstream(config) << yaml; }
    return RunToCompletion(KvnodePath(), {"--check-config", config.string()},
                           dir.path() / (name + "-check"), std::chrono::seconds(30));
  };
  EXPECT_EQ(check("nofile", missing_file).status.code, 1);
  EXPECT_EQ(check("shortfile", short_file).status.code, 2);
  const RunOutput valid = check("noenv", no_env);
  EXPECT_EQ(valid.status.code, 0);  // the service's environment is not ours
  EXPECT_THAT(valid.out, HasSubstr("noenv-check.yaml is valid"));
  // --check-config without a file checks the --config file, in either order.
  const auto noenv_config = (dir.path() / "noenv-check.yaml").string();
  const RunOutput after =
      RunToCompletion(KvnodePath(), {"--config", noenv_config, "--check-config"},
                      dir.path() / "after", std::chrono::seconds(30));
  EXPECT_EQ(after.status.code, 0) << after.err;
  EXPECT_THAT(after.out, HasSubstr("noenv-check.yaml is valid"));
  const RunOutput before =
      RunToCompletion(KvnodePath(), {"--check-config", "--config", noenv_config},
                      dir.path() / "before", std::chrono::seconds(30));
  EXPECT_EQ(before.status.code, 0) << before.err;
  const RunOutput nothing = RunToCompletion(KvnodePath(), {"--check-config"},
                                            dir.path() / "nothing", std::chrono::seconds(30));
  EXPECT_EQ(nothing.status.code, 2);
  EXPECT_THAT(nothing.err, HasSubstr("--check-config needs a file"));
  // A bad command line is a bad config to systemd too: exit 2, not CLI11's own codes.
  const RunOutput unknown = RunToCompletion(KvnodePath(), {"--confg", noenv_config},
                                            dir.path() / "unknown", std::chrono::seconds(30));
  EXPECT_EQ(unknown.status.code, 2) << unknown.err;
  EXPECT_THAT(unknown.err, HasSubstr("--confg"));
  // What the start would refuse about the config itself (the model, tensor_parallel_size, the
  // pool plan): refused by --check-config too (it said "is valid"), and by the start before it
  // opens anything, exit 2 (it was 1, restarted by systemd, for the plan); a model file not
  // there is 1, as a secret file.
  const auto config_with = [&](const std::string& name, const std::string& from,
                               const std::string& to) {
    std::filesystem::create_directories(dir.path() / name);
    std::string cfg = TestConfig(dir.path() / name);
    cfg.replace(cfg.find(from), from.size(), to);
    return cfg;
  };
  const std::string tp3 =
      config_with("tp3", "device: cpu\n", "device: cpu\ntensor_parallel_size: 3\n");
  const std::string tiny = config_with("tiny", "  max_tokens: 4096\n", "  max_tokens: 10\n");
  const std::string shares = config_with("shares", "  max_tokens: 4096\n",
                                         "  max_tokens: 4096\n  pool_shares: [0.5, 0.5]\n");
  const std::string no_model =
      config_with("nomodel", "model:\n  preset: qwen2.5-0.5b\n",
                  "model:\n  preset: \"\"\n  hf_config: nosuch/config.json\n");
  EXPECT_EQ(check("tp3", tp3).status.code, 2);
  EXPECT_THAT(check("tp3", tp3).err, HasSubstr("tensor_parallel_size 3 does not divide"));
  EXPECT_EQ(check("tiny", tiny).status.code, 2);
  EXPECT_EQ(check("shares", shares).status.code, 2);
  EXPECT_EQ(check("nomodel", no_model).status.code, 1);
  RunOutput tiny_start = StartExpectingFailure(dir, "tinystart", tiny);
  EXPECT_EQ(tiny_start.status.code, 2) << tiny_start.err;
  EXPECT_THAT(tiny_start.err, HasSubstr("gets no block"));
  RunOutput model_start = StartExpectingFailure(dir, "modelstart", no_model);
  EXPECT_EQ(model_start.status.code, 1) << model_start.err;
  EXPECT_THAT(model_start.err, HasSubstr("model.hf_config"));
  // Each refusal is one line.
  for (const RunOutput* r :
       {&held, &sock, &port, &gpu, &nofile, &shortfile, &noenv, &tiny_start, &model_start}) {
    EXPECT_EQ(std::count(r->err.begin(), r->err.end(), '\n'), 1) << r->err;
  }
}

TEST(KvnodeLifecycleTest, DefaultConfigAndJsonLogs) {
  ScratchDir dir;
  RunOutput def = RunToCompletion(KvnodePath(), {"--print-default-config"}, dir.path() / "def");
  EXPECT_EQ(def.status.code, 0);
  EXPECT_EQ(def.out, ReadWhole(std::filesystem::path(KVMESH_SOURCE_DIR) / "configs/kvnode.yaml"));
  auto node = KvnodeProcess::Start(dir.path(), TestConfig(dir.path()) + "  format: json\n");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_THAT((*node)->process().Stdout(), HasSubstr("pool 0     full/2x64"));
  EXPECT_THAT((*node)->process().Stdout(), HasSubstr("kvnode ready"));
  auto st = (*node)->Terminate();
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code, 0);
  std::istringstream lines((*node)->process().Stderr());
  int parsed = 0;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not a JSON line: " << line;
    EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("msg"));
    ++parsed;
  }
  EXPECT_GT(parsed, 2);
}

// Every disk_tier key lands in its field of the tier's options; the path defaults to
// <data_dir>/rocksdb.
TEST(KvnodeLifecycleTest, DiskTierOptionsCarryEveryKey) {
  NodeConfig c;
  c.data_dir = "/var/lib/kvmesh";
  RocksDbTierOptions d = DiskTierOptions(c);
  EXPECT_EQ(d.path, "/var/lib/kvmesh/rocksdb");
  EXPECT_EQ(d.capacity_bytes, 10ll << 30);
  EXPECT_EQ(d.durability, DiskDurability::kFlush);
  EXPECT_EQ(d.flush_after_ms, 1000);
  EXPECT_EQ(d.write_buffer_bytes, RocksDbTierOptions{}.write_buffer_bytes);
  c.disk_tier = DiskTierNoKeyAtDefault();
  d = DiskTierOptions(c);
  EXPECT_EQ(d.path, "/ssd/kv");
  EXPECT_EQ(d.capacity_bytes, 20ll << 30);
  EXPECT_EQ(d.durability, DiskDurability::kWal);
  EXPECT_EQ(d.flush_after_ms, 250);
  EXPECT_TRUE(d.wal_sync);
  EXPECT_EQ(d.on_damage, DiskDamagePolicy::kStayOff);
  EXPECT_TRUE(d.verify_block_checksums);
  EXPECT_TRUE(d.use_direct_io);
  EXPECT_EQ(d.write_buffer_bytes, 16ll << 20);
  EXPECT_EQ(d.block_cache_bytes, 0);
  EXPECT_EQ(d.max_background_jobs, 4);
}

// The disk_tier keys reach the RocksDB tier: its open line reports the durability and direct I/O
// chosen, and on_damage decides what a damaged tier does at the next start (here: CURRENT lost).
TEST(KvnodeLifecycleTest, DiskTierSettingsReachTheTier) {
  ScratchDir dir;
  const auto with_disk = [&](const std::string& keys) {
    std::string cfg = TestConfig(dir.path());
    const std::string capacity = "  capacity: 64MiB\n";
    cfg.replace(cfg.find(capacity), capacity.size(), capacity + keys);
    return cfg;
  };
  const std::string chosen =
      "  durability: wal\n  wal_sync: true\n  flush_interval: 250ms\n  on_damage: stay_off\n"
      "  verify_checksums: true\n  write_buffer: 1MiB\n  block_cache: 0\n"
      "  background_jobs: 3\n";
  auto node = KvnodeProcess::Start(dir.path(), with_disk(chosen));
  ASSERT_TRUE(node.ok()) << node.status();
  auto st = (*node)->Terminate();
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code, 0);
  EXPECT_THAT((*node)->process().Stderr(),
              HasSubstr("durability wal blob_files true direct_io false"));
  node->reset();
  const std::filesystem::path db = dir.path() / "data" / "rocksdb";
  ASSERT_TRUE(std::filesystem::remove(db / "CURRENT"));
  // stay_off: the node does not start, and says why in one line.
  RunOutput refused = StartExpectingFailure(dir, "stay_off", with_disk(chosen));
  EXPECT_EQ(refused.status.code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("on_damage is stay_off"));
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
  EXPECT_TRUE(std::filesystem::exists(db));
  // move_aside (the default): it starts with an empty tier, the damaged folder kept beside it.
  auto again = KvnodeProcess::Start(dir.path(), with_disk("  durability: none\n"));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Terminate().has_value());
  EXPECT_THAT((*again)->process().Stderr(), HasSubstr("durability none"));
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "data")) {
    if (e.path().filename().string().starts_with("rocksdb.damaged-")) ++aside;
  }
  EXPECT_EQ(aside, 1);
}

// The disk tier holds every block the engines can store (200 prompts of 3 blocks, 192 KiB each,
// with RocksDB's space on disk): at 96 MiB a slow SIGTERM on a loaded machine let 85 prompts be
// acknowledged and the tier evicted the oldest to stay within its capacity, which is a cache
// doing its job, not a lost block.
TEST(KvnodeLifecycleTest, SigtermUnderLoadLosesNoAcknowledgedBlock) {
  ScratchDir dir;
  const std::string config = TestConfig(dir.path(), 4096, "8MiB", "512MiB");
  auto node = KvnodeProcess::Start(dir.path(), config);
  ASSERT_TRUE(node.ok()) << node.status();
  std::mutex mu;
  std::vector<std::uint32_t> acknowledged;
  std::atomic<int> acks{0};
  std::vector<std::thread> engines;
  for (int e = 0; e < 2; ++e) {
    engines.emplace_back([&, e] {
      auto c = (*node)->Connect("engine-" + std::to_string(e));
      if (!c.ok()) return;
      for (std::uint32_t i = 0; i < 100; ++i) {
        const std::uint32_t seed = static_cast<std::uint32_t>(e) * 1000 + i;
        const std::vector<Token> p = Prompt(seed, 3 * kT + 1);
        if (!(*c)->Admit(i + 1, p).ok()) return;
        if (!(*c)->StoreFullBlocks(i + 1).ok()) return;  // not acknowledged: not counted
        {
          std::lock_guard<std::mutex> lock(mu);
          acknowledged.push_back(seed);
        }
        acks.fetch_add(1);
        if (!(*c)->Release(i + 1).ok()) return;
      }
    });
  }
  while (acks.load() < 30) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  (*node)->process().Signal(SIGTERM);  // while both engines are still sending
  for (auto& t : engines) t.join();
  auto st = (*node)->process().Wait(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->exited);
  EXPECT_EQ(st->code, 0) << (*node)->process().Stderr();
  node->reset();
  ASSERT_LT(acknowledged.size(), 200u);
  auto restarted = KvnodeProcess::Start(dir.path(), config);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  auto c = (*restarted)->Connect();
  ASSERT_TRUE(c.ok());
  for (const std::uint32_t seed : acknowledged) {
    auto l = (*c)->Lookup(Prompt(seed, 3 * kT + 1));
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->pool_tokens() + l->host_tokens() + l->disk_tokens(), 3 * kT)
        << "acknowledged prompt " << seed << " lost";
  }
}

TEST(KvnodeLifecycleTest, WarmRestartServesTheLastRunsBlocksFromDisk) {
  ScratchDir dir;
  const std::string config = TestConfig(dir.path(), 4096, "8MiB", "96MiB");
  const std::vector<std::string> synth = {"--socket",
                                          (dir.path() / "kvnode.sock").string(),
                                          "--secret",
                                          kTestSecret,
                                          "--synthetic",
                                          "--conversations",
                                          "10",
                                          "--turns",
                                          "2",
                                          "--block-tokens",
                                          "32",
                                          "--system-prompts",
                                          "2",
                                          "--decode-tokens",
                                          "1"};
  {
    auto node = KvnodeProcess::Start(dir.path(), config);
    ASSERT_TRUE(node.ok()) << node.status();
    RunOutput first = RunToCompletion(SynthPath(), synth, dir.path() / "first");
    EXPECT_EQ(first.status.code, 0) << first.out << first.err;
    auto st = (*node)->Terminate();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->code, 0);
    EXPECT_THAT((*node)->process().Stdout(), HasSubstr("kvnode stopped"));
  }
  auto node = KvnodeProcess::Start(dir.path(), config);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_THAT((*node)->process().Stdout(),
              ::testing::Not(HasSubstr(", 0 blocks from earlier runs")));
  RunOutput second = RunToCompletion(SynthPath(), synth, dir.path() / "second");
  EXPECT_EQ(second.status.code, 0) << second.out << second.err;
  // Every prompt of the first run's first turns is now found on disk, and decoded correctly.
  EXPECT_THAT(second.out, ::testing::ContainsRegex("disk [1-9][0-9]*"));
  EXPECT_THAT(second.out, HasSubstr(", 0 failed"));
  // The copy-time histogram has one observation per block copied, disk restores (read in ranges
  // of several blocks at once) included.
  const std::string& address = (*node)->metrics_address();
  const std::optional<std::string> metrics =
      HttpGet(std::stoi(address.substr(address.rfind(':') + 1)), "/metrics");
  ASSERT_TRUE(metrics.has_value());
  for (const char* labels :
       {"{direction=\"onboard\",tier=\"disk\"}", "{direction=\"onboard\",tier=\"host\"}",
        "{direction=\"offload\",tier=\"host\"}"}) {
    const std::optional<double> blocks =
        MetricValue(*metrics, StrCat("kvmesh_tier_copied_blocks_total", labels));
    const std::optional<double> observed =
        MetricValue(*metrics, StrCat("kvmesh_tier_copy_duration_seconds_count", labels));
    ASSERT_TRUE(blocks.has_value() && observed.has_value()) << labels;
    EXPECT_EQ(*observed, *blocks) << labels;
  }
  EXPECT_GT(*MetricValue(*metrics,
                         "kvmesh_tier_copied_blocks_total{direction=\"onboard\",tier=\"disk\"}"),
            0);
}

}  // namespace
}  // namespace kvmesh::node_test
