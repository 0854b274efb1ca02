// docker-compose.yml: it parses; the services the kvmesh image runs use only kvnode flags that
// `kvnode --help` lists; every config mounted for --config exists in the tree and passes
// `kvnode --check-config`; each such node keeps its data_dir on a named volume and has a stop
// grace period long enough for its shutdown flush; each cluster node has the peer engine on (over
// TCP); the etcd and Prometheus services are there.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <string>

#include "tests/deploy/deploy_test_util.h"

namespace {

using kvmesh::deploy_test::DurationSeconds;
using kvmesh::deploy_test::RunCommand;

const std::filesystem::path kRoot = KVMESH_SOURCE_DIR;

TEST(ComposeTest, DurationSecondsReadsComposeAndSystemdDurations) {
  EXPECT_EQ(DurationSeconds("2m"), 120);
  EXPECT_EQ(DurationSeconds("1m30s"), 90);
  EXPECT_EQ(DurationSeconds("10s"), 10);
  EXPECT_EQ(DurationSeconds("1h"), 3600);
  EXPECT_EQ(DurationSeconds("2min"), 120);
  EXPECT_EQ(DurationSeconds("1min 30s"), 90);
  EXPECT_EQ(DurationSeconds("10"), -1);
  EXPECT_EQ(DurationSeconds("2x"), -1);
  EXPECT_EQ(DurationSeconds("2 minutes"), -1);
  EXPECT_EQ(DurationSeconds(""), -1);
}

TEST(ComposeTest, KvnodeServicesUseRealFlagsAndLoadableConfigs) {
  const YAML::Node compose = YAML::LoadFile((kRoot / "docker-compose.yml").string());
  const YAML::Node services = compose["services"];
  ASSERT_TRUE(services.IsMap());
  for (const char* needed : {"etcd", "prometheus", "prefill", "decode", "cache"}) {
    EXPECT_TRUE(services[needed].IsDefined()) << needed;
  }
  const auto [help_code, help] = RunCommand(std::string(KVMESH_KVNODE_PATH) + " --help");
  ASSERT_EQ(help_code, 0) << help;
  int kvnodes = 0;
  for (auto it = services.begin(); it != services.end(); ++it) {
    const std::string name = it->first.as<std::string>();
    const YAML::Node s = it->second;
    if (!s["image"].IsDefined() || s["image"].as<std::string>() != "kvmesh:latest") continue;
    ++kvnodes;
    ASSERT_TRUE(s["build"].IsDefined()) << name << ": the kvmesh image is built by the Dockerfile";
    ASSERT_TRUE(s["command"].IsSequence()) << name;
    // Mounted files: container path -> host path.
    std::map<std::string, std::string> mounts;
    for (const YAML::Node& v : s["volumes"]) {
      const std::string spec = v.as<std::string>();
      const std::size_t a = spec.find(':');
      const std::size_t b = spec.find(':', a + 1);
      mounts[spec.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1)] =
          spec.substr(0, a);
    }
    const YAML::Node cmd = s["command"];
    for (std::size_t i = 0; i < cmd.size(); ++i) {
      const std::string arg = cmd[i].as<std::string>();
      if (!arg.starts_with("--")) continue;
      EXPECT_NE(help.find(arg), std::string::npos) << name << ": kvnode has no flag " << arg;
      if (arg != "--config" && arg != "--check-config") continue;
      ASSERT_LT(i + 1, cmd.size()) << name << ": " << arg << " needs a file";
      const std::string target = cmd[i + 1].as<std::string>();
      ASSERT_TRUE(mounts.contains(target)) << name << ": " << target << " is not mounted";
      const std::filesystem::path host = kRoot / mounts[target];
      ASSERT_TRUE(std::filesystem::exists(host)) << host;
      const auto [code, out] =
          RunCommand(std::string(KVMESH_KVNODE_PATH) + " --check-config " + host.string());
      EXPECT_EQ(code, 0) << name << ": " << out;
      // The node's data_dir (its disk tier) outlives the container: a named volume.
      const YAML::Node config = YAML::LoadFile(host.string());
      ASSERT_TRUE(config["data_dir"].IsDefined()) << name;
      const std::string data_dir = config["data_dir"].as<std::string>();
      ASSERT_TRUE(mounts.contains(data_dir))
          << name << ": data_dir " << data_dir << " is not a volume";
      EXPECT_TRUE(compose["volumes"][mounts[data_dir]].IsDefined())
          << name << ": " << mounts[data_dir] << " is not a named volume";
      // A cluster node moves blocks (fetch, handoff) only with the peer engine on; over TCP,
      // since shared memory does not reach across containers.
      if (config["cluster"].IsDefined()) {
        EXPECT_TRUE(config["peer"]["enabled"].IsDefined() && config["peer"]["enabled"].as<bool>())
            << name << ": a cluster node without peer.enabled moves no block";
        EXPECT_EQ(config["peer"]["ucx_tls"].as<std::string>(""), "tcp") << name;
      }
    }
    // Docker's default stop grace period, 10 s, would SIGKILL the node during its drain and the
    // shutdown flush (docs/kvnode.md, Stopping).
    ASSERT_TRUE(s["stop_grace_period"].IsDefined()) << name;
    EXPECT_GE(DurationSeconds(s["stop_grace_period"].as<std::string>()), 60) << name;
  }
  EXPECT_EQ(kvnodes, 3);
  const std::filesystem::path dockerfile = kRoot / "Dockerfile";
  ASSERT_TRUE(std::filesystem::exists(dockerfile));
}

TEST(ComposeTest, CheckConfigRefusesABrokenConfig) {
  const std::filesystem::path bad =
      std::filesystem::temp_directory_path() / ("kvmesh-compose-bad-" + std::to_string(::getpid()));
  {
    std::FILE* f = std::fopen(bad.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("cluster:\n  membership: zookeeper\n", f);
    std::fclose(f);
  }
  const auto [code, out] =
      RunCommand(std::string(KVMESH_KVNODE_PATH) + " --check-config " + bad.string());
  std::filesystem::remove(bad);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("cluster.membership"), std::string::npos) << out;
}

}  // namespace
