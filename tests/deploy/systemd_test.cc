// kvnode on a host without containers: `cmake --install` puts the programs and the deployment files
// under a prefix, and deploy/systemd/kvnode.service runs the installed kvnode as the operator's
// steps in docs/kvnode.md set it up. Checked without running systemd: `systemd-analyze verify`
// accepts the unit (with its programs at the test's install prefix) without a warning; the unit
// and the config it names agree (data_dir in the StateDirectory, the socket in the
// RuntimeDirectory, the secret files in /etc/kvmesh, which the unit leaves readable, and a reload
// that sends SIGHUP, which re-reads them); its kvnode flags exist and the config passes
// `kvnode --check-config` (run by nothing before the start: an ExecStartPre= failing would be
// restarted forever); the node tells systemd when it is ready (Type=notify:
// node_kvnode_systemd_test) and the stop timeout leaves time for the shutdown flush.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/deploy/deploy_test_util.h"

namespace {

using kvmesh::deploy_test::DurationSeconds;
using kvmesh::deploy_test::OnPath;
using kvmesh::deploy_test::RunCommand;

namespace fs = std::filesystem;
const fs::path kRoot = KVMESH_SOURCE_DIR;

// The [Service] settings of a unit file: key -> values (a key may repeat).
std::multimap<std::string, std::string> ServiceSettings(const fs::path& unit) {
  std::multimap<std::string, std::string> out;
  std::ifstream in(unit);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line;
      continue;
    }
    const std::size_t eq = line.find('=');
    if (section == "[Service]" && eq != std::string::npos) {
      out.emplace(line.substr(0, eq), line.substr(eq + 1));
    }
  }
  return out;
}

std::string One(const std::multimap<std::string, std::string>& s, const std::string& key) {
  return s.count(key) == 1 ? s.find(key)->second : "";
}

class SystemdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvmesh-systemd-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    prefix_ = tmpl;
  }
  void TearDown() override { fs::remove_all(prefix_); }
  fs::path prefix_;
};

TEST_F(SystemdTest, InstallPutsTheProgramsAndTheDeploymentFilesUnderThePrefix) {
  const auto [code, out] = RunCommand(std::string(KVMESH_CMAKE_COMMAND) + " --install " +
                                      KVMESH_BINARY_DIR + " --prefix " + prefix_.string());
  ASSERT_EQ(code, 0) << out;
  for (const char* f : {"bin/kvnode", "bin/kvctl", "bin/kvmesh-synth"}) {
    EXPECT_EQ(::access((prefix_ / f).c_str(), X_OK), 0) << f;
  }
  for (const char* f : {"kvnode.service", "kvnode.yaml", "kvnode-defaults.yaml",
                        "kvmesh-alerts.yml", "kvmesh-node.json"}) {
    EXPECT_TRUE(fs::exists(prefix_ / "share/kvmesh" / f)) << f;
  }
  // The installed kvnode runs (its libraries found) and prints its default config.
  const auto [help_code, help] =
      RunCommand((prefix_ / "bin/kvnode").string() + " --print-default-config");
  EXPECT_EQ(help_code, 0) << help;
  EXPECT_NE(help.find("data_dir:"), std::string::npos);
}

TEST_F(SystemdTest, TheUnitAndItsConfigAgreeAndSystemdAcceptsTheUnit) {
  const fs::path unit = kRoot / "deploy/systemd/kvnode.service";
  const auto s = ServiceSettings(unit);
  EXPECT_EQ(One(s, "Type"), "notify");
  EXPECT_EQ(One(s, "RestartPreventExitStatus"), "2");  // a bad config: restarts fail the same way
  EXPECT_GE(DurationSeconds(One(s, "TimeoutStopSec")), 60);
  // RestartPreventExitStatus applies to the main process only: a bad config failing an
  // ExecStartPre (kvnode --check-config, exit 2) would be restarted every RestartSec, forever.
  EXPECT_EQ(s.count("ExecStartPre"), 0u)
      << "RestartPreventExitStatus=2 does not cover ExecStartPre=; kvnode checks its config itself";
  const std::string exec = One(s, "ExecStart");
  const std::string bin = "/usr/local/bin/kvnode";
  ASSERT_TRUE(exec.starts_with(bin + " ")) << exec;

  // Every flag of the lines that run kvnode is one kvnode has; the config they name is the
  // installed example, and it loads.
  const auto [help_code, help] = RunCommand(std::string(KVMESH_KVNODE_PATH) + " --help");
  ASSERT_EQ(help_code, 0) << help;
  for (const auto& [key, value] : s) {
    if (key != "ExecStart" && key != "ExecStartPre") continue;
    std::stringstream words(value);
    std::vector<std::string> argv;
    for (std::string w; words >> w;) argv.push_back(w);
    ASSERT_EQ(argv.front(), bin) << key;
    for (std::size_t i = 1; i < argv.size(); ++i) {
      if (!argv[i].starts_with("--")) continue;
      EXPECT_NE(help.find(argv[i]), std::string::npos) << key << ": kvnode has no flag " << argv[i];
      if (argv[i] == "--config" || argv[i] == "--check-config") {
        ASSERT_LT(i + 1, argv.size());
        EXPECT_EQ(argv[i + 1], "/etc/kvmesh/kvnode.yaml") << key;
      }
    }
  }
  const fs::path config_file = kRoot / "deploy/systemd/kvnode.yaml";
  // --check-config reads the secret file as the start would: the installed config with its
  // /etc/kvmesh/secret here in the test's folder (mode 0600, as the unit's comment asks).
  std::string installed;
  {
    std::ifstream in(config_file);
    std::stringstream all;
    all << in.rdbuf();
    installed = all.str();
  }
  const std::string etc_secret = "/etc/kvmesh/secret";
  const fs::path here_secret = prefix_ / "secret";
  { std::ofstream(here_secret) << "a-secret-of-more-than-16-bytes\n"; }
  fs::permissions(here_secret, fs::perms::owner_read | fs::perms::owner_write);
  for (std::size_t at = installed.find(etc_secret); at != std::string::npos;
       at = installed.find(etc_secret, at + here_secret.string().size())) {
    installed.replace(at, etc_secret.size(), here_secret.string());
  }
  const fs::path checked_file = prefix_ / "kvnode.yaml";
  { std::ofstream(checked_file) << installed; }
  const auto [check_code, check] =
      RunCommand(std::string(KVMESH_KVNODE_PATH) + " --check-config " + checked_file.string());
  EXPECT_EQ(check_code, 0) << check;
  // Without the secret file (a host not provisioned yet) the check fails as the start would:
  // exit 1, which the unit restarts.
  fs::remove(here_secret);
  const auto [missing_code, missing] =
      RunCommand(std::string(KVMESH_KVNODE_PATH) + " --check-config " + checked_file.string());
  EXPECT_EQ(missing_code, 1) << missing;
  EXPECT_NE(missing.find(here_secret.string()), std::string::npos) << missing;

  // The directories and the credential systemd makes are where the config looks.
  const YAML::Node config = YAML::LoadFile(config_file.string());
  EXPECT_EQ(config["data_dir"].as<std::string>(), "/var/lib/" + One(s, "StateDirectory"));
  EXPECT_EQ(fs::path(config["control"]["unix_socket"].as<std::string>()).parent_path(),
            fs::path("/run") / One(s, "RuntimeDirectory"));
  // The secret files are read again on SIGHUP (systemctl reload): not systemd credentials, which
  // are fixed for the life of the service.
  EXPECT_EQ(One(s, "ExecReload"), "/bin/kill -HUP $MAINPID");
  for (const char* key : {"secret_file", "second_secret_file"}) {
    EXPECT_TRUE(config["control"][key].as<std::string>().starts_with("/etc/kvmesh/")) << key;
  }
  EXPECT_EQ(s.count("LoadCredential"), 0u);

  // systemd's own check, with the programs where the test installed them: no warning at all
  // (an unknown key or a bad value is only a warning to systemd).
  const std::string analyze = OnPath("systemd-analyze");
  ASSERT_FALSE(analyze.empty()) << "no systemd-analyze (Debian systemd): run scripts/bootstrap";
  const auto [install_code, install] =
      RunCommand(std::string(KVMESH_CMAKE_COMMAND) + " --install " + KVMESH_BINARY_DIR +
                 " --prefix " + prefix_.string());
  ASSERT_EQ(install_code, 0) << install;
  std::ifstream in(unit);
  std::stringstream text;
  text << in.rdbuf();
  const fs::path copy = prefix_ / "kvnode.service";
  std::ofstream(copy) << std::regex_replace(text.str(), std::regex(bin),
                                            (prefix_ / "bin/kvnode").string());
  const auto [verify_code, verify] = RunCommand(analyze + " verify " + copy.string());
  EXPECT_EQ(verify_code, 0) << verify;
  EXPECT_EQ(verify, "") << "systemd-analyze verify warns";
}

}  // namespace
