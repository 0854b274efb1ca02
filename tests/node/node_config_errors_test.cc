// The errors of ParseNodeConfig: each names the source, the line and the key as a dotted path
// (unknown and duplicate keys, wrong types, bad values, YAML syntax), as node_config.h writes them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <string>
#include <vector>

#include "node/node_config.h"
#include "tests/node/node_config_test_util.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NodeConfigTest, TheHeaderExamplesVerbatim) {
  std::string text;
  for (int line = 1; line < 12; ++line) text += "# line\n";
  EXPECT_EQ(ParseError(text + "kv_cache:\n  tokens_per_block: 48\n"),
            "kvnode.yaml:13: kv_cache.tokens_per_block: 48 is not a power of two greater than 1");
  EXPECT_EQ(ParseError("node_id: a\nkv_cache:\n  tokens_per_blok: 32\n"),
            "kvnode.yaml:3: unknown key 'tokens_per_blok' in kv_cache (did you mean "
            "tokens_per_block?)");
}

TEST(NodeConfigTest, UnknownKeysWithOrWithoutASuggestion) {
  EXPECT_EQ(ParseError("disk_tier:\n  host_cache_size: 1GiB\n"),
            "kvnode.yaml:2: unknown key 'host_cache_size' in disk_tier (did you mean "
            "kv_cache.host_cache_size?)");
  EXPECT_EQ(ParseError("tokens_per_block: 16\n"),
            "kvnode.yaml:1: unknown key 'tokens_per_block' at the top level (did you mean "
            "kv_cache.tokens_per_block?)");
  EXPECT_EQ(ParseError("\n\nkv-cache:\n  dtype: fp8\n"),
            "kvnode.yaml:3: unknown key 'kv-cache' at the top level (did you mean kv_cache?)");
  EXPECT_EQ(ParseError("logging:\n  level: info\n  colour: true\n"),
            "kvnode.yaml:3: unknown key 'colour' in logging (known keys: level, format)");
  EXPECT_EQ(ParseError("control:\n  Secret_Env: X\n"),
            "kvnode.yaml:2: unknown key 'Secret_Env' in control (did you mean secret_env?)");
  // A key that is not a name.
  EXPECT_THAT(ParseError("kv_cache:\n  [a, b]: 1\n"),
              StartsWith("kvnode.yaml:2: a key must be a name, got a list"));
}

TEST(NodeConfigTest, DuplicateKeys) {
  EXPECT_EQ(ParseError("kv_cache:\n  dtype: fp8\n  tokens_per_block: 16\n  dtype: int8\n"),
            "kvnode.yaml:4: duplicate key 'kv_cache.dtype' (first at line 2)");
  EXPECT_EQ(ParseError("device: cpu\nlogging:\n  level: info\ndevice: auto\n"),
            "kvnode.yaml:4: duplicate key 'device' (first at line 1)");
  EXPECT_EQ(ParseError("kv_cache:\n  dtype: fp8\nkv_cache:\n  kv_layout: NHD\n"),
            "kvnode.yaml:3: duplicate key 'kv_cache' (first at line 1)");
}

TEST(NodeConfigTest, WrongTypes) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"kv_cache:\n  tokens_per_block: abc\n",
       "kvnode.yaml:2: kv_cache.tokens_per_block: expected an integer, got 'abc'"},
      {"kv_cache:\n  tokens_per_block: \"32\"\n",
       "kvnode.yaml:2: kv_cache.tokens_per_block: expected an integer, got the string \"32\""},
      {"kv_cache:\n  tokens_per_block: 32.0\n",
       "kvnode.yaml:2: kv_cache.tokens_per_block: expected an integer, got '32.0'"},
      {"kv_cache:\n  tokens_per_block:\n    a: 1\n",
       "kvnode.yaml:2: kv_cache.tokens_per_block: expected an integer, got a map"},
      {"kv_cache:\n  tokens_per_block: 99999999999\n",
       "kvnode.yaml:2: kv_cache.tokens_per_block: 99999999999 is out of range"},
      {"kv_cache:\n  free_gpu_memory_fraction: most\n",
       "kvnode.yaml:2: kv_cache.free_gpu_memory_fraction: expected a finite number, got 'most'"},
      {"kv_cache:\n  enable_block_reuse: yes\n",
       "kvnode.yaml:2: kv_cache.enable_block_reuse: expected true or false, got 'yes'"},
      {"kv_cache:\n  enable_block_reuse: \"true\"\n",
       "kvnode.yaml:2: kv_cache.enable_block_reuse: expected true or false, got the string "
       "\"true\""},
      {"data_dir: [a, b]\n", "kvnode.yaml:1: data_dir: expected a string, got a list"},
      {"kv_cache: 5\n", "kvnode.yaml:1: kv_cache: expected a map of keys, got '5'"},
      {"kv_cache:\n  pool_shares: 0.5\n",
       "kvnode.yaml:2: kv_cache.pool_shares: expected a list of numbers such as [0.25, 0.75], "
       "got '0.5'"},
      {"kv_cache:\n  pool_shares:\n    - 0.5\n    - half\n",
       "kvnode.yaml:4: kv_cache.pool_shares[1]: expected a finite number, got 'half'"},
      {"kv_cache:\n  nvfp4_global_scale: 1e40\n",
       "kvnode.yaml:2: kv_cache.nvfp4_global_scale: 1e40 is out of the range of a 32-bit float"},
      {"- a\n- b\n", "kvnode.yaml:1: expected a map of keys, got a list"},
  };
  for (const Case& c : cases) EXPECT_EQ(ParseError(c.text), c.message) << c.text;
}

TEST(NodeConfigTest, BadValuesNameTheKeyAndItsLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"kv_cache:\n  dtype: fp9\n",
       "kvnode.yaml:2: kv_cache.dtype: unknown cache dtype 'fp9': use bf16, fp16, fp8, "
       "fp8_per_tensor, int8 or nvfp4"},
      {"kv_cache:\n  kv_layout: THD\n",
       "kvnode.yaml:2: kv_cache.kv_layout: unknown kv layout 'THD': use HND or NHD"},
      {"kv_cache:\n  eviction_policy: fifo\n",
       "kvnode.yaml:2: kv_cache.eviction_policy: eviction policy 'fifo' is not one of "
       "lru, priority-lru, learned"},
      // kvctl replay's offline optimum needs the future: no node (pool or host tier) can run it.
      {"kv_cache:\n  eviction_policy: optimal\n",
       "kvnode.yaml:2: kv_cache.eviction_policy: eviction policy 'optimal' is not one of "
       "lru, priority-lru, learned"},
      {"device: gpu\n",
       "kvnode.yaml:1: device: device 'gpu' is not one of auto, cpu, cuda, cuda:N, emulated"},
      {"kv_cache:\n  host_cache_size: lots\n",
       "kvnode.yaml:2: kv_cache.host_cache_size: bad byte size 'lots': expected a non-negative "
       "number with an optional unit (e.g. 8GiB)"},
      {"kv_cache:\n  host_cache_size: -1\n",
       "kvnode.yaml:2: kv_cache.host_cache_size: bad byte size '-1': expected a non-negative "
       "number with an optional unit (e.g. 8GiB)"},
      {"control:\n  idle_timeout: 5 minutes\n",
       "kvnode.yaml:2: control.idle_timeout: bad duration '5 minutes': expected a whole number "
       "with a unit ms, s, m or h (500ms, 5s), or milliseconds"},
      {"control:\n  idle_timeout: 1.5s\n",
       "kvnode.yaml:2: control.idle_timeout: bad duration '1.5s': expected a whole number with a "
       "unit ms, s, m or h (500ms, 5s), or milliseconds"},
      {"control:\n  idle_timeout: 99999999999h\n",
       "kvnode.yaml:2: control.idle_timeout: duration '99999999999h' is too long"},
      {"control:\n  request_timeout: 0\n",
       "kvnode.yaml:2: control.request_timeout: 0ms must be positive"},
      {"kv_cache:\n  free_gpu_memory_fraction: 1.5\n",
       "kvnode.yaml:2: kv_cache.free_gpu_memory_fraction: 1.5 must be in (0, 1]"},
      {"kv_cache:\n  max_tokens: 0\n",
       "kvnode.yaml:2: kv_cache.max_tokens: 0 must be positive (leave it unset for no bound)"},
      {"kv_cache:\n  pool_shares:\n    - 1\n    - 0\n",
       "kvnode.yaml:4: kv_cache.pool_shares[1]: 0 must be a finite number greater than 0"},
      {"kv_cache:\n  pool_shares: [0.5, 0.6]\n",
       "kvnode.yaml:2: kv_cache.pool_shares: [0.5, 0.6] sum to 1.1, not 1"},
      {"kv_cache:\n  fp8_per_tensor_scale: 0\n",
       "kvnode.yaml:2: kv_cache.fp8_per_tensor_scale: 0 must be a finite number greater than 0"},
      {"kv_cache:\n  nvfp4_global_scale: 1\n  nvfp4_expected_amax: 2\n",
       "kvnode.yaml:2: kv_cache.nvfp4_global_scale: nvfp4_global_scale and nvfp4_expected_amax "
       "are both given: give one (gs = 448*6/amax)"},
      {"kv_cache:\n  dtype: fp8\n  fp8_per_tensor_scale: 0.5\n",
       "kvnode.yaml:3: kv_cache.fp8_per_tensor_scale: a scale of dtype fp8_per_tensor, and "
       "kv_cache.dtype is fp8 (it would be ignored): remove it, or set dtype: fp8_per_tensor"},
      {"kv_cache:\n  nvfp4_global_scale: 2\n",
       "kvnode.yaml:2: kv_cache.nvfp4_global_scale: a scale of dtype nvfp4, and kv_cache.dtype is "
       "bf16 (it would be ignored): remove it, or set dtype: nvfp4"},
      {"kv_cache:\n  dtype: int8\n  nvfp4_expected_amax: 3\n",
       "kvnode.yaml:3: kv_cache.nvfp4_expected_amax: a scale of dtype nvfp4, and kv_cache.dtype is "
       "int8 (it would be ignored): remove it, or set dtype: nvfp4"},
      {"data_dir: ~/kvmesh\n",
       "kvnode.yaml:1: data_dir: '~/kvmesh': ~ is not expanded in a config: write the path out "
       "(absolute, or relative to the config file's folder)"},
      {"disk_tier:\n  path: $HOME/rocks\n",
       "kvnode.yaml:2: disk_tier.path: '$HOME/rocks': $ is not expanded in a config: write the "
       "path out (absolute, or relative to the config file's folder)"},
      {"control:\n  tcp_listen: \"0.0.0.0:7420\"\ncluster:\n  membership: static\n",
       "kvnode.yaml:3: cluster.advertise: not given, and control.tcp_listen 0.0.0.0:7420 listens "
       "on every interface: the peers would be told 0.0.0.0, which they cannot dial (give this "
       "host's name or address and port)"},
      {"control:\n  tcp_listen: \"127.0.0.1:7420\"\ncluster:\n  membership: static\n"
       "  advertise: \"0.0.0.0:7420\"\n",
       "kvnode.yaml:5: cluster.advertise: '0.0.0.0:7420': host 0.0.0.0 means every interface: "
       "others cannot dial it (give this host's name or address)"},
      {"control:\n  tcp_listen: \"127.0.0.1:7420\"\ncluster:\n  membership: static\n  peers:\n"
       "    - {node_id: a, address: \"127.0.0.1:0\"}\n",
       "kvnode.yaml:6: cluster.peers[0].address: '127.0.0.1:0': port 0 cannot be reached"},
      {"cluster:\n  peers:\n    - {node_id: a, address: \"127.0.0.1:7420\"}\n",
       "kvnode.yaml:2: cluster.peers: listed, but cluster.membership is none: the peers list is "
       "the member list of membership: static only"},
      {"control:\n  tcp_listen: \"127.0.0.1:7420\"\ncluster:\n  membership: etcd\n  etcd:\n"
       "    endpoints: [\"http://127.0.0.1:2379\"]\n",
       "kvnode.yaml:6: cluster.etcd.endpoints[0]: 'http://127.0.0.1:2379': write host:port "
       "without the scheme 'http://'"},
      {"kv_cache:\n  secondary_offload_min_priority: 102\n",
       "kvnode.yaml:2: kv_cache.secondary_offload_min_priority: 102 is not in 0..101 (101: "
       "offload nothing)"},
      {"kv_cache:\n  event_buffer_max_size: 0\n",
       "kvnode.yaml:2: kv_cache.event_buffer_max_size: 0 must be > 0"},
      {"kv_cache:\n  copy_threads: 0\n",
       "kvnode.yaml:2: kv_cache.copy_threads: 0 must be at least 1"},
      {"tensor_parallel_size: 0\n", "kvnode.yaml:1: tensor_parallel_size: 0 must be at least 1"},
      {"data_dir: \"\"\n", "kvnode.yaml:1: data_dir: must not be empty"},
      {"disk_tier:\n  capacity: 0\n",
       "kvnode.yaml:2: disk_tier.capacity: 0 must be > 0 while the disk tier is enabled (or set "
       "disk_tier.enabled: false)"},
      {"disk_tier:\n  durability: fsync\n",
       "kvnode.yaml:2: disk_tier.durability: durability 'fsync': use none, flush or wal"},
      {"disk_tier:\n  on_damage: delete\n",
       "kvnode.yaml:2: disk_tier.on_damage: on_damage 'delete': use move_aside or stay_off"},
      {"disk_tier:\n  flush_interval: 0s\n",
       "kvnode.yaml:2: disk_tier.flush_interval: 0 ms must be > 0"},
      {"disk_tier:\n  write_buffer: 64KiB\n",
       "kvnode.yaml:2: disk_tier.write_buffer: 65536 bytes is less than 256 KiB, the smallest "
       "memtable"},
      {"disk_tier:\n  block_cache: -1\n",
       "kvnode.yaml:2: disk_tier.block_cache: bad byte size '-1': expected a non-negative "
       "number with an optional unit (e.g. 8GiB)"},
      {"disk_tier:\n  background_jobs: 0\n",
       "kvnode.yaml:2: disk_tier.background_jobs: 0 must be at least 1"},
      {"control:\n  tcp_listen: 127.0.0.1\n",
       "kvnode.yaml:2: control.tcp_listen: '127.0.0.1': expected host:port, e.g. 127.0.0.1:7420"},
      {"control:\n  tcp_listen: \"localhost:70000\"\n",
       "kvnode.yaml:2: control.tcp_listen: 'localhost:70000': port '70000' is not a number in "
       "0..65535"},
      {"control:\n  tcp_listen: \":7420\"\n",
       "kvnode.yaml:2: control.tcp_listen: ':7420': the host is missing (0.0.0.0 for every "
       "interface, 127.0.0.1 for loopback)"},
      {"control:\n  tcp_listen: \"::1:7420\"\n",
       "kvnode.yaml:2: control.tcp_listen: '::1:7420': host '::1' is not a host name or address "
       "(IPv6: [::1]:7420)"},
      {"control:\n  max_frame_size: 2GiB\n",
       "kvnode.yaml:2: control.max_frame_size: 2147483648 bytes is not in 1..1GiB"},
      {"control:\n  worker_threads: 0\n",
       "kvnode.yaml:2: control.worker_threads: 0 must be at least 1"},
      {"control:\n  busy_poll_us: 20000\n",
       "kvnode.yaml:2: control.busy_poll_us: 20000 is not in 0..10000 microseconds"},
      {"control:\n  busy_poll_us: -1\n",
       "kvnode.yaml:2: control.busy_poll_us: -1 is not in 0..10000 microseconds"},
      {"peer:\n  busy_poll_us: 10001\n",
       "kvnode.yaml:2: peer.busy_poll_us: 10001 is not in 0..10000 microseconds"},
      {"peer:\n  transfer_lanes: 0\n", "kvnode.yaml:2: peer.transfer_lanes: 0 is not in 1..16"},
      {"peer:\n  transfer_lanes: 17\n", "kvnode.yaml:2: peer.transfer_lanes: 17 is not in 1..16"},
      {"control:\n  max_inflight_total: -3\n",
       "kvnode.yaml:2: control.max_inflight_total: -3 must be at least 1"},
      {"metrics:\n  listen: 9470\n",
       "kvnode.yaml:2: metrics.listen: '9470': expected host:port, e.g. 127.0.0.1:7420"},
      {"metrics:\n  listen: \"localhost:99999\"\n",
       "kvnode.yaml:2: metrics.listen: 'localhost:99999': port '99999' is not a number in "
       "0..65535"},
      {"metrics:\n  lisen: \"127.0.0.1:1\"\n",
       "kvnode.yaml:2: unknown key 'lisen' in metrics (did you mean listen?)"},
      {"logging:\n  level: verbose\n",
       "kvnode.yaml:2: logging.level: 'verbose' is not one of trace, debug, info, warn, error, "
       "off"},
      {"logging:\n  format: xml\n",
       "kvnode.yaml:2: logging.format: 'xml' is not one of text, json"},
  };
  for (const Case& c : cases) EXPECT_EQ(ParseError(c.text), c.message) << c.text;
}

TEST(NodeConfigTest, EdgesOfTheAcceptedRanges) {
  EXPECT_EQ(ParseOk("kv_cache:\n  secondary_offload_min_priority: 101\n")
                .kv_cache.secondary_offload_min_priority,
            101);
  EXPECT_EQ(ParseOk("kv_cache:\n  secondary_offload_min_priority: 0\n")
                .kv_cache.secondary_offload_min_priority,
            0);
  EXPECT_THAT(ParseError("kv_cache:\n  secondary_offload_min_priority: -1\n"),
              StartsWith("kvnode.yaml:2: kv_cache.secondary_offload_min_priority: -1 is not in"));
  EXPECT_EQ(ParseOk("disk_tier:\n  enabled: false\n  capacity: 0\n").disk_tier.capacity, 0);
  EXPECT_EQ(ParseOk("control:\n  tcp_listen: \"\"\n").control.tcp_listen, "");
  EXPECT_EQ(ParseOk("control:\n  tcp_listen: \"[::1]:7420\"\n").control.tcp_listen, "[::1]:7420");
  EXPECT_EQ(ParseOk("control:\n  max_frame_size: 1GiB\n").control.max_frame_size, 1 << 30);
  EXPECT_EQ(ParseOk("metrics:\n  listen: \"\"\n").metrics.listen, "");
  EXPECT_EQ(ParseOk("metrics:\n  listen: \"[::1]:0\"\n").metrics.listen, "[::1]:0");
  EXPECT_EQ(ParseOk("kv_cache:\n  enable_block_reuse: False\n").kv_cache.enable_block_reuse, false);
}

TEST(NodeConfigTest, YamlSyntaxErrorsGiveTheirLine) {
  EXPECT_THAT(ParseError("node_id: a\nkv_cache:\n  pool_shares: [0.5, 0.5\n  dtype: fp8\n"),
              StartsWith("kvnode.yaml:"));
  EXPECT_THAT(ParseError("node_id: a\nkv_cache:\n  pool_shares: [0.5, 0.5\n  dtype: fp8\n"),
              HasSubstr("invalid YAML: "));
  EXPECT_EQ(ParseError("node_id: a\n  device: cpu\n"),
            "kvnode.yaml:2: invalid YAML: illegal map value");
  EXPECT_EQ(ParseError("node_id: a\n\tdevice: cpu\n"),
            "kvnode.yaml:2: invalid YAML: illegal tab when looking for indentation");
  EXPECT_EQ(ParseError("node_id: a\n---\nnode_id: b\n"),
            "kvnode.yaml:3: a second YAML document (after ---): a config is one document");
}

TEST(NodeConfigTest, AStrayCommaIsInvalidYamlNotAnEndlessLoop) {
  // yaml-cpp 0.7's LoadAll looped forever, allocating, on these (found by fuzz/node_config,
  // fuzz/regressions/node_config/stray_comma.yaml). Run on a thread so that the loop, should it
  // come back, fails the test after 20 s instead of hanging it.
  auto parse_all = [] {
    std::vector<std::string> errors;
    for (const char* text : {",", ", x", "# comment\n,\n", "node_id: a\n---\n,\n", "--- ,"}) {
      errors.push_back(ParseError(text));
    }
    return errors;
  };
  std::future<std::vector<std::string>> done = std::async(std::launch::async, parse_all);
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::cerr << "ParseNodeConfig did not return within 20 s on a stray ','\n";
    std::abort();  // the thread cannot be stopped
  }
  const std::vector<std::string> errors = done.get();
  EXPECT_EQ(errors[0], "kvnode.yaml:1: invalid YAML: unexpected ','");
  EXPECT_EQ(errors[1], "kvnode.yaml:1: invalid YAML: unexpected ','");
  EXPECT_EQ(errors[2], "kvnode.yaml:2: invalid YAML: unexpected ','");
  EXPECT_EQ(errors[3],
            "kvnode.yaml:3: a second YAML document (after ---): a config is one document");
  EXPECT_EQ(errors[4], "kvnode.yaml:1: invalid YAML: unexpected ','");
  // A document of comments only is still an empty config, and a single '---' an empty document.
  EXPECT_TRUE(ParseNodeConfig("# nothing\n", "kvnode.yaml").ok());
  EXPECT_TRUE(ParseNodeConfig("---\n", "kvnode.yaml").ok());
}

TEST(NodeConfigTest, AProblemWithAKeyNotWrittenHasTheLineOfItsSectionOrNone) {
  const std::string long_dir(120, 'd');
  // The default socket <data_dir>/kvnode.sock is too long: no control section in the text.
  EXPECT_EQ(ParseError("data_dir: /" + long_dir + "\n"),
            "kvnode.yaml: control.unix_socket: '/" + long_dir + "/kvnode.sock' is " +
                std::to_string(long_dir.size() + 13) +
                " bytes, more than the 107 a Unix socket path may have (the default "
                "<data_dir>/kvnode.sock): set it");
  EXPECT_THAT(ParseError("data_dir: /" + long_dir + "\ncontrol:\n  io_threads: 2\n"),
              StartsWith("kvnode.yaml:2: control.unix_socket: '/"));
  EXPECT_TRUE(ParseNodeConfig("data_dir: /" + long_dir + "\ncontrol:\n  unix_socket: /run/k.sock\n",
                              "kvnode.yaml")
                  .ok());
}

}  // namespace
}  // namespace kvmesh
