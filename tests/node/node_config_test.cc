// NodeConfig's YAML form: the documented default (configs/kvnode.yaml) is NodeConfig{}, every key
// is read, the units, relative paths follow the file, the devices, and the checks of
// NodeConfig::Validate. The error messages of the parser: node_config_errors_test.cc.
#include "node/node_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tests/node/node_config_test_util.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
// Every key path of a YAML text: "node_id", "kv_cache", "kv_cache.dtype", ...
std::set<std::string> KeyPaths(std::string_view text) {
  std::set<std::string> keys;
  const YAML::Node root = YAML::Load(std::string(text));
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string name = it->first.Scalar();
    keys.insert(name);
    if (!it->second.IsMap()) continue;
    for (auto jt = it->second.begin(); jt != it->second.end(); ++jt) {
      keys.insert(name + "." + jt->first.Scalar());
    }
  }
  return keys;
}
TEST(NodeConfigTest, TheDocumentedExampleIsTheCompiledInDefaultAndParsesToTheDefaults) {
  const std::string file = ReadFile(KVMESH_DEFAULT_NODE_CONFIG_PATH);
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(DefaultNodeConfigYaml(), file);
  EXPECT_EQ(ParseOk(DefaultNodeConfigYaml()), NodeConfig{});
  EXPECT_TRUE(NodeConfig{}.Validate().ok()) << NodeConfig{}.Validate();
  // Nothing given: every default (an empty file, only comments, an empty section).
  EXPECT_EQ(ParseOk(""), NodeConfig{});
  EXPECT_EQ(ParseOk("# nothing\n"), NodeConfig{});
  EXPECT_EQ(ParseOk("kv_cache:\n  # dtype: fp8\ncontrol:\n"), NodeConfig{});
}

// Every key, none at its default.
constexpr std::string_view kEveryKey = R"(node_id: node-7
data_dir: /var/lib/kvmesh
device: cuda:3
tensor_parallel_size: 2
model:
  preset: ""
  hf_config: /models/m/config.json
  revision: abc123
kv_cache:
  dtype: nvfp4
  kv_layout: NHD
  tokens_per_block: 64
  free_gpu_memory_fraction: 0.5
  max_tokens: 256k
  pool_shares: [0.25, 0.75]
  enable_block_reuse: false
  enable_partial_reuse: false
  eviction_policy: lru
  host_cache_size: 2GiB
  secondary_offload_min_priority: 50
  event_buffer_max_size: 1024
  copy_threads: 3
  nvfp4_global_scale: null
  nvfp4_expected_amax: 3.5
  fp8_per_tensor_scale: null
disk_tier:
  enabled: false
  path: /ssd/kv
  capacity: 20GiB
  durability: wal
  flush_interval: 250ms
  wal_sync: true
  on_damage: stay_off
  verify_checksums: true
  direct_io: true
  write_buffer: 16MiB
  block_cache: 0
  background_jobs: 4
control:
  unix_socket: /run/kvnode.sock
  tcp_listen: "0.0.0.0:0"
  secret: ""
  secret_env: MY_KVMESH_SECRET
  secret_file: ""
  second_secret_file: /etc/kvmesh/secret.next
  max_frame_size: 8MiB
  handshake_timeout: 500ms
  idle_timeout: 1h
  request_timeout: 2m
  max_connections: 10
  max_inflight_per_connection: 8
  max_inflight_total: 80
  io_threads: 1
  worker_threads: 16
  busy_poll_us: 150
metrics:
  listen: "0.0.0.0:9100"
shutdown:
  drain_timeout: 1500
  flush_to_disk: false
peer:
  enabled: true
  fetch_deadline: 750
  staging_size: 16MiB
  ucx_tls: tcp
  ucx_net_devices: lo
  busy_poll_us: 40
  transfer_lanes: 3
logging:
  level: debug
  format: json
cluster:
  advertise: "10.0.0.1:7420"
  membership: static
  peers:
    - {node_id: b, address: "10.0.0.2:7420"}
  etcd:
    endpoints: ["10.0.0.9:2379"]
    lease_ttl_s: 4
    prefix: /x/
    poll_interval: 200ms
  directory:
    batch_ms: 20
    lookup_timeout: 1s
    max_batch_events: 100
    resync_interval: 2s
)";

NodeConfig EveryKeyExpected() {
  NodeConfig e;
  e.node_id = "node-7";
  e.data_dir = "/var/lib/kvmesh";
  e.device = {DeviceSelection::Kind::kCuda, 3};
  e.tensor_parallel_size = 2;
  e.model = {"", "/models/m/config.json", "abc123"};
  CacheConfig& c = e.kv_cache.cache;
  c.dtype = KvDtype::kNVFP4;
  c.kv_layout = KvLayout::kNHD;
  c.tokens_per_block = 64;
  c.free_gpu_memory_fraction = 0.5;
  c.max_tokens = 256000;
  c.pool_shares = {0.25, 0.75};
  c.nvfp4_expected_amax = 3.5f;
  e.kv_cache.enable_block_reuse = false;
  e.kv_cache.enable_partial_reuse = false;
  e.kv_cache.eviction_policy = EvictionPolicyKind::kLru;
  e.kv_cache.host_cache_size = 2ll << 30;
  e.kv_cache.secondary_offload_min_priority = 50;
  e.kv_cache.event_buffer_max_size = 1024;
  e.kv_cache.copy_threads = 3;
  e.disk_tier = DiskTierNoKeyAtDefault();
  ControlSection& k = e.control;
  k.unix_socket = "/run/kvnode.sock";
  k.tcp_listen = "0.0.0.0:0";
  k.secret_env = "MY_KVMESH_SECRET";
  k.second_secret_file = "/etc/kvmesh/secret.next";
  k.max_frame_size = 8 << 20;
  k.handshake_timeout = std::chrono::milliseconds(500);
  k.idle_timeout = std::chrono::hours(1);
  k.request_timeout = std::chrono::minutes(2);
  k.max_connections = 10;
  k.max_inflight_per_connection = 8;
  k.max_inflight_total = 80;
  k.io_threads = 1;
  k.worker_threads = 16;
  k.busy_poll_us = 150;
  e.metrics.listen = "0.0.0.0:9100";
  e.shutdown = {std::chrono::milliseconds(1500), false};
  e.peer = {true, std::chrono::milliseconds(750), 16ll << 20, "tcp", "lo", 40, 3};
  e.logging = {"debug", "json"};
  ClusterSection& cl = e.cluster;
  cl.advertise = "10.0.0.1:7420";
  cl.membership = MembershipKind::kStatic;
  cl.peers = {{"b", "10.0.0.2:7420"}};
  cl.etcd = {{"10.0.0.9:2379"}, 4, "/x/", std::chrono::milliseconds(200)};
  cl.directory = {20, std::chrono::milliseconds(1000), 100, std::chrono::milliseconds(2000)};
  return e;
}

TEST(NodeConfigTest, EveryKeySetToANonDefaultValueIsRead) {
  const NodeConfig expected = EveryKeyExpected();
  EXPECT_EQ(ParseOk(kEveryKey), expected);
  // The text names every key of the documented default, and only those.
  EXPECT_EQ(KeyPaths(kEveryKey), KeyPaths(DefaultNodeConfigYaml()));
  // Every field differs from its default, so a key read into the wrong field would show. The
  // four left at their default here (the scales of other dtypes, two secret sources) have their
  // own tests.
  const NodeConfig d;
  EXPECT_NE(expected.node_id, d.node_id);
  EXPECT_NE(expected.data_dir, d.data_dir);
  EXPECT_NE(expected.device, d.device);
  EXPECT_NE(expected.tensor_parallel_size, d.tensor_parallel_size);
  EXPECT_NE(expected.model.preset, d.model.preset);
  EXPECT_NE(expected.model.hf_config, d.model.hf_config);
  EXPECT_NE(expected.model.revision, d.model.revision);
  const CacheConfig& c = expected.kv_cache.cache;
  EXPECT_NE(c.dtype, d.kv_cache.cache.dtype);
  EXPECT_NE(c.kv_layout, d.kv_cache.cache.kv_layout);
  EXPECT_NE(c.tokens_per_block, d.kv_cache.cache.tokens_per_block);
  EXPECT_NE(c.free_gpu_memory_fraction, d.kv_cache.cache.free_gpu_memory_fraction);
  EXPECT_NE(c.max_tokens, d.kv_cache.cache.max_tokens);
  EXPECT_NE(c.pool_shares, d.kv_cache.cache.pool_shares);
  EXPECT_NE(c.nvfp4_expected_amax, d.kv_cache.cache.nvfp4_expected_amax);
  EXPECT_NE(expected.kv_cache.enable_block_reuse, d.kv_cache.enable_block_reuse);
  EXPECT_NE(expected.kv_cache.enable_partial_reuse, d.kv_cache.enable_partial_reuse);
  EXPECT_NE(expected.kv_cache.eviction_policy, d.kv_cache.eviction_policy);
  EXPECT_NE(expected.kv_cache.host_cache_size, d.kv_cache.host_cache_size);
  EXPECT_NE(expected.kv_cache.secondary_offload_min_priority,
            d.kv_cache.secondary_offload_min_priority);
  EXPECT_NE(expected.kv_cache.event_buffer_max_size, d.kv_cache.event_buffer_max_size);
  EXPECT_NE(expected.kv_cache.copy_threads, d.kv_cache.copy_threads);
  EXPECT_NE(expected.disk_tier.enabled, d.disk_tier.enabled);
  EXPECT_NE(expected.disk_tier.path, d.disk_tier.path);
  EXPECT_NE(expected.disk_tier.capacity, d.disk_tier.capacity);
  const ControlSection& k = expected.control;
  EXPECT_NE(k.unix_socket, d.control.unix_socket);
  EXPECT_NE(k.tcp_listen, d.control.tcp_listen);
  EXPECT_NE(k.secret_env, d.control.secret_env);
  EXPECT_NE(k.second_secret_file, d.control.second_secret_file);
  EXPECT_NE(k.max_frame_size, d.control.max_frame_size);
  EXPECT_NE(k.handshake_timeout, d.control.handshake_timeout);
  EXPECT_NE(k.idle_timeout, d.control.idle_timeout);
  EXPECT_NE(k.request_timeout, d.control.request_timeout);
  EXPECT_NE(k.max_connections, d.control.max_connections);
  EXPECT_NE(k.max_inflight_per_connection, d.control.max_inflight_per_connection);
  EXPECT_NE(k.max_inflight_total, d.control.max_inflight_total);
  EXPECT_NE(k.io_threads, d.control.io_threads);
  EXPECT_NE(k.worker_threads, d.control.worker_threads);
  EXPECT_NE(k.busy_poll_us, d.control.busy_poll_us);
  EXPECT_NE(expected.metrics.listen, d.metrics.listen);
  EXPECT_NE(expected.shutdown.drain_timeout, d.shutdown.drain_timeout);
  EXPECT_NE(expected.shutdown.flush_to_disk, d.shutdown.flush_to_disk);
  EXPECT_NE(expected.peer.enabled, d.peer.enabled);
  EXPECT_NE(expected.peer.fetch_deadline, d.peer.fetch_deadline);
  EXPECT_NE(expected.peer.staging_size, d.peer.staging_size);
  EXPECT_NE(expected.peer.ucx_tls, d.peer.ucx_tls);
  EXPECT_NE(expected.peer.ucx_net_devices, d.peer.ucx_net_devices);
  EXPECT_NE(expected.peer.busy_poll_us, d.peer.busy_poll_us);
  EXPECT_NE(expected.peer.transfer_lanes, d.peer.transfer_lanes);
  EXPECT_NE(expected.logging.level, d.logging.level);
  EXPECT_NE(expected.logging.format, d.logging.format);
  EXPECT_NE(expected.cluster.advertise, d.cluster.advertise);
  EXPECT_NE(expected.cluster.membership, d.cluster.membership);
  EXPECT_NE(expected.cluster.peers, d.cluster.peers);
  EXPECT_NE(expected.cluster.etcd.endpoints, d.cluster.etcd.endpoints);
  EXPECT_NE(expected.cluster.etcd.lease_ttl_s, d.cluster.etcd.lease_ttl_s);
  EXPECT_NE(expected.cluster.etcd.prefix, d.cluster.etcd.prefix);
  EXPECT_NE(expected.cluster.etcd.poll_interval, d.cluster.etcd.poll_interval);
  EXPECT_NE(expected.cluster.directory.batch_ms, d.cluster.directory.batch_ms);
  EXPECT_NE(expected.cluster.directory.lookup_timeout, d.cluster.directory.lookup_timeout);
  EXPECT_NE(expected.cluster.directory.max_batch_events, d.cluster.directory.max_batch_events);
  EXPECT_NE(expected.cluster.directory.resync_interval, d.cluster.directory.resync_interval);
}

TEST(NodeConfigTest, TheOtherScaleAndSecretSources) {
  NodeConfig c = ParseOk("kv_cache:\n  dtype: nvfp4\n  nvfp4_global_scale: 2.5\n");
  EXPECT_EQ(c.kv_cache.cache.nvfp4_global_scale, 2.5f);
  c = ParseOk("kv_cache:\n  dtype: fp8_per_tensor\n  fp8_per_tensor_scale: 0.25\n");
  EXPECT_EQ(c.kv_cache.cache.fp8_per_tensor_scale, 0.25f);
  c = ParseOk("control:\n  secret: 0123456789abcdef0123\n");
  EXPECT_EQ(c.control.secret, "0123456789abcdef0123");
  c = ParseOk("control:\n  secret_file: /etc/kvmesh/secret\n");
  EXPECT_EQ(c.control.secret_file, "/etc/kvmesh/secret");
}

// kv_cache.eviction_policy orders the victims of the pools and of the host tier (node.cc passes it
// to both; docs/kvnode-config.md, "Eviction policy"): every policy's name is read, in any case,
// and the documented default says that it covers the host tier.
TEST(NodeConfigTest, EvictionPolicyNamesEveryPolicyInAnyCase) {
  for (const EvictionPolicyKind kind : AllEvictionPolicies()) {
    std::string name(EvictionPolicyName(kind));
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const NodeConfig c = ParseOk("kv_cache:\n  eviction_policy: " + name + "\n");
    EXPECT_EQ(c.kv_cache.eviction_policy, kind) << name;
  }
  EXPECT_EQ(NodeConfig{}.kv_cache.eviction_policy, kDefaultEvictionPolicy);
  EXPECT_THAT(std::string(DefaultNodeConfigYaml()),
              HasSubstr("Victim order within a priority, in the pools and in the host tier"));
}

TEST(NodeConfigTest, UnitsOfSizesDurationsAndCounts) {
  const NodeConfig c = ParseOk(
      "kv_cache:\n  host_cache_size: 4096\n  max_tokens: 1500\n  event_buffer_max_size: 64k\n"
      "disk_tier:\n  capacity: 1.5G\ncontrol:\n  max_frame_size: \"64KiB\"\n"
      "  handshake_timeout: 2s\n  idle_timeout: 750\n  request_timeout: \"1h\"\n"
      "shutdown:\n  drain_timeout: 0\n");
  EXPECT_EQ(c.kv_cache.host_cache_size, 4096);
  EXPECT_EQ(c.kv_cache.cache.max_tokens, 1500);
  EXPECT_EQ(c.kv_cache.event_buffer_max_size, 64000);
  EXPECT_EQ(c.disk_tier.capacity, 1'500'000'000);
  EXPECT_EQ(c.control.max_frame_size, 64 << 10);
  EXPECT_EQ(c.control.handshake_timeout, std::chrono::seconds(2));
  EXPECT_EQ(c.control.idle_timeout, std::chrono::milliseconds(750));
  EXPECT_EQ(c.control.request_timeout, std::chrono::hours(1));
  EXPECT_EQ(c.shutdown.drain_timeout, std::chrono::milliseconds(0));
}

TEST(NodeConfigTest, NullWhereTheFieldIsOptional) {
  const NodeConfig c = ParseOk(
      "kv_cache:\n  dtype: fp8_per_tensor\n  max_tokens: 100\n  pool_shares: [1]\n"
      "  fp8_per_tensor_scale: 3\n");
  ASSERT_TRUE(c.kv_cache.cache.max_tokens && c.kv_cache.cache.fp8_per_tensor_scale);
  for (const char* null : {"null", "~", ""}) {
    const std::string text = std::string("kv_cache:\n  max_tokens: ") + null +
                             "\n  pool_shares: " + null + "\n  nvfp4_global_scale: " + null +
                             "\n  nvfp4_expected_amax: " + null +
                             "\n  fp8_per_tensor_scale: " + null + "\n";
    EXPECT_EQ(ParseOk(text), NodeConfig{}) << text;
  }
  EXPECT_EQ(ParseOk("kv_cache:\n  pool_shares: []\n"), NodeConfig{});
  // Not where a value is required.
  EXPECT_EQ(ParseError("kv_cache:\n  tokens_per_block: ~\n"),
            "kvnode.yaml:2: kv_cache.tokens_per_block: expected an integer, got null");
  EXPECT_EQ(ParseError("node_id: null\n"),
            "kvnode.yaml:1: node_id: expected a string, got null (write \"\" for an empty one)");
}
TEST(NodeConfigTest, ModelIsAPresetOrAConfigJson) {
  // A config.json given alone replaces the default preset.
  NodeConfig c = ParseOk("model:\n  hf_config: /m/config.json\n");
  EXPECT_EQ(c.model.preset, "");
  EXPECT_EQ(c.model.hf_config, "/m/config.json");
  c = ParseOk("model:\n  preset: llama-3.2-1b\n");
  EXPECT_EQ(c.model.preset, "llama-3.2-1b");
  EXPECT_EQ(ParseOk("model:\n  preset: Llama-3-8B\n").model.preset, "Llama-3-8B");
  EXPECT_EQ(ParseError("model:\n  preset: qwen2.5-0.5b\n  hf_config: /m/config.json\n"),
            "kvnode.yaml:3: model.hf_config: model.preset 'qwen2.5-0.5b' is given too: give one "
            "of them (preset: \"\" to use hf_config)");
  EXPECT_EQ(ParseError("model:\n  preset: \"\"\n"),
            "kvnode.yaml:2: model.preset: neither model.preset nor model.hf_config is given: "
            "give one");
  EXPECT_THAT(ParseError("\nmodel:\n  preset: llama-4\n"),
              StartsWith("kvnode.yaml:3: model.preset: unknown preset 'llama-4': known presets "
                         "are llama-3-8b, "));
}

TEST(NodeConfigTest, SecretSources) {
  EXPECT_EQ(ParseError("control:\n  secret: 0123456789abcdef\n  secret_file: /s\n"),
            "kvnode.yaml:3: control.secret_file: control.secret is given too: give at most one "
            "of secret, secret_env, secret_file");
  EXPECT_EQ(ParseError("control:\n  secret_env: S\n\n  secret_file: /s\n"),
            "kvnode.yaml:4: control.secret_file: control.secret_env is given too: give at most "
            "one of secret, secret_env, secret_file");
  // The later source in the order secret, secret_env, secret_file is the one named.
  EXPECT_EQ(ParseError("control:\n  secret_env: S\n  secret: 0123456789abcdef\n"),
            "kvnode.yaml:2: control.secret_env: control.secret is given too: give at most one of "
            "secret, secret_env, secret_file");
  EXPECT_EQ(ParseError("control:\n  secret: short\n"),
            "kvnode.yaml:2: control.secret: is 5 bytes; a secret needs at least 16");
  EXPECT_EQ(ParseError("control:\n  secret_env: 1BAD-NAME\n"),
            "kvnode.yaml:2: control.secret_env: '1BAD-NAME' is not an environment variable name");
  // Validate() names the keys too, without a source or line.
  NodeConfig c;
  c.control.secret = "0123456789abcdef";
  c.control.secret_env = "KV_SECRET";
  c.control.secret_file = "/s";
  EXPECT_EQ(c.Validate().message(),
            "control.secret_env: control.secret is given too: give at most one of secret, "
            "secret_env, secret_file");
  c.control.secret.clear();
  EXPECT_EQ(c.Validate().message(),
            "control.secret_file: control.secret_env is given too: give at most one of secret, "
            "secret_env, secret_file");
  c.control.secret_env.clear();
  EXPECT_TRUE(c.Validate().ok());
}

TEST(NodeConfigTest, ValidateNamesTheKeyOfEveryCacheField) {
  NodeConfig c;
  c.kv_cache.cache.tokens_per_block = 3;
  EXPECT_EQ(c.Validate().message(),
            "kv_cache.tokens_per_block: 3 is not a power of two greater than 1");
  c = NodeConfig{};
  c.kv_cache.host_cache_size = -1;
  EXPECT_EQ(c.Validate().message(), "kv_cache.host_cache_size: -1 must not be negative");
  c = NodeConfig{};
  c.disk_tier.capacity = -1;
  c.disk_tier.enabled = true;
  EXPECT_EQ(c.Validate().message(), "disk_tier.capacity: -1 must not be negative");
  c = NodeConfig{};
  c.device = {DeviceSelection::Kind::kCuda, -1};
  EXPECT_EQ(c.Validate().message(), "device: cuda:-1 is not a device index");
  c = NodeConfig{};
  c.shutdown.drain_timeout = std::chrono::milliseconds(-1);
  EXPECT_EQ(c.Validate().message(), "shutdown.drain_timeout: -1ms must not be negative");
}

TEST(NodeConfigTest, EffectiveCacheConfigCarriesTheTierBudgets) {
  NodeConfig c;
  EXPECT_EQ(c.kv_cache.cache.host_budget_bytes, 0);
  EXPECT_EQ(c.EffectiveCacheConfig().host_budget_bytes, 1ll << 30);
  EXPECT_EQ(c.EffectiveCacheConfig().disk_budget_bytes, 10ll << 30);
  c.disk_tier.enabled = false;
  EXPECT_EQ(c.EffectiveCacheConfig().disk_budget_bytes, 0);
  EXPECT_EQ(c.EffectiveCacheConfig().tokens_per_block, c.kv_cache.cache.tokens_per_block);
}

TEST(NodeConfigTest, DeviceSelection) {
  struct Case {
    const char* text;
    DeviceSelection device;
    const char* name;
  };
  const Case cases[] = {
      {"auto", {DeviceSelection::Kind::kAuto, 0}, "auto"},
      {"cpu", {DeviceSelection::Kind::kCpu, 0}, "cpu"},
      {"CPU", {DeviceSelection::Kind::kCpu, 0}, "cpu"},
      {"cuda", {DeviceSelection::Kind::kCuda, 0}, "cuda:0"},
      {"cuda:0", {DeviceSelection::Kind::kCuda, 0}, "cuda:0"},
      {"cuda:7", {DeviceSelection::Kind::kCuda, 7}, "cuda:7"},
      {"cuda:12", {DeviceSelection::Kind::kCuda, 12}, "cuda:12"},
      {"emulated", {DeviceSelection::Kind::kEmulated, 0}, "emulated"},
  };
  for (const Case& c : cases) {
    Result<DeviceSelection> d = ParseDeviceSelection(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.status();
    EXPECT_EQ(*d, c.device) << c.text;
    EXPECT_EQ(d->ToString(), c.name);
    EXPECT_EQ(*ParseDeviceSelection(d->ToString()), *d);
  }
  for (const char* bad : {"", "gpu", "emulated:0", "cuda:", "cuda:-1", "cuda:x", "cuda:1x",
                          "cuda:0:1", "cuda 0", "cuda:99999999999"}) {
    Result<DeviceSelection> d = ParseDeviceSelection(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_TRUE(d.status().IsInvalidArgument());
      EXPECT_THAT(d.status().message(), HasSubstr(std::string("'") + bad + "'"));
    }
  }
  EXPECT_EQ(ParseOk("device: cuda:2\n").device, (DeviceSelection{DeviceSelection::Kind::kCuda, 2}));
  EXPECT_EQ(ParseError("device: cuda:x\n"),
            "kvnode.yaml:1: device: device 'cuda:x': the part after cuda: must be a device index, "
            "e.g. cuda:0");
}

// A scratch directory removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ =
        (std::filesystem::temp_directory_path() / "node_config_test.XXXXXX").string();
    KVMESH_CHECK(mkdtemp(templ.data()) != nullptr) << "mkdtemp " << templ;
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void WriteFile(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(NodeConfigTest, RelativePathsFollowTheFile) {
  const ScratchDir dir;
  const std::filesystem::path etc = dir.path() / "etc";
  std::filesystem::create_directories(etc);
  WriteFile(etc / "kvnode.yaml",
            "data_dir: ../var/node\nmodel:\n  hf_config: models/config.json\n"
            "disk_tier:\n  path: /abs/rocksdb\ncontrol:\n  unix_socket: run/kvnode.sock\n"
            "  secret_file: ./secret\n");
  Result<NodeConfig> c = LoadNodeConfig((etc / "kvnode.yaml").string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_dir, (dir.path() / "var/node").string());
  EXPECT_EQ(c->model.hf_config, (etc / "models/config.json").string());
  EXPECT_EQ(c->disk_tier.path, "/abs/rocksdb");
  EXPECT_EQ(c->control.unix_socket, (etc / "run/kvnode.sock").string());
  EXPECT_EQ(c->control.secret_file, (etc / "secret").string());

  // Defaults follow the file too; empty paths (derived from data_dir) stay empty.
  WriteFile(etc / "minimal.yaml", "node_id: n1\n");
  c = LoadNodeConfig((etc / "minimal.yaml").string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_dir, (etc / ".kvmesh/node").string());
  EXPECT_EQ(c->disk_tier.path, "");
  EXPECT_EQ(c->control.unix_socket, "");

  // Text not from a file: relative to base_dir, or left as written.
  const std::string text = "data_dir: d\nmodel:\n  hf_config: c.json\n";
  EXPECT_EQ(ParseOk(text, "/base").data_dir, "/base/d");
  EXPECT_EQ(ParseOk(text, "/base").model.hf_config, "/base/c.json");
  EXPECT_EQ(ParseOk(text).data_dir, "d");
  EXPECT_EQ(ParseOk(text).model.hf_config, "c.json");
}

TEST(NodeConfigTest, LoadErrorsNameTheFile) {
  const ScratchDir dir;
  const std::string missing = (dir.path() / "missing.yaml").string();
  Result<NodeConfig> c = LoadNodeConfig(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsNotFound()) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr(missing));

  c = LoadNodeConfig(dir.path().string());  // a directory
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIoError) << c.status();

  const std::string bad = (dir.path() / "bad.yaml").string();
  WriteFile(bad, "kv_cache:\n  dtype: fp9\n");
  c = LoadNodeConfig(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), StartsWith(bad + ":2: kv_cache.dtype: unknown cache dtype"));
}

}  // namespace
}  // namespace kvmesh
