// deploy/prometheus/kvmesh-alerts.yml, the alerting rules an operator loads into Prometheus:
// promtool (Debian `prometheus`) accepts them and passes their unit tests (kvmesh-alerts.test.yml),
// every alert has a case there, and docker-compose's Prometheus loads them (its prometheus.yml,
// laid out with its mounts as in the container, passes `promtool check config`). That every metric
// they select exists on a real node, and that none fires on a healthy one, is
// node_prometheus_scrape_test.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <string>

#include "tests/deploy/deploy_test_util.h"

namespace {

using kvmesh::deploy_test::RunCommand;

namespace fs = std::filesystem;
const fs::path kRoot = KVMESH_SOURCE_DIR;
const fs::path kRules = kRoot / "deploy/prometheus/kvmesh-alerts.yml";

std::string Promtool() { return kvmesh::deploy_test::OnPath("promtool"); }

TEST(AlertRulesTest, PromtoolAcceptsTheRulesAndPassesTheirUnitTests) {
  const std::string promtool = Promtool();
  ASSERT_FALSE(promtool.empty())
      << "no promtool on PATH (Debian prometheus): run scripts/bootstrap";
  const auto [check_code, check] = RunCommand(promtool + " check rules " + kRules.string());
  EXPECT_EQ(check_code, 0) << check;
  // promtool resolves the test file's rule_files from its own folder.
  const auto [test_code, test] = RunCommand("cd " + kRules.parent_path().string() + " && " +
                                            promtool + " test rules kvmesh-alerts.test.yml");
  EXPECT_EQ(test_code, 0) << test;
  EXPECT_NE(test.find("SUCCESS"), std::string::npos) << test;
}

TEST(AlertRulesTest, EveryAlertHasAUnitTestThatSeesItFire) {
  std::set<std::string> alerts;
  for (const YAML::Node& group : YAML::LoadFile(kRules.string())["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      ASSERT_TRUE(rule["alert"].IsDefined()) << "only alerting rules here";
      EXPECT_TRUE(rule["labels"]["severity"].IsDefined()) << rule["alert"].as<std::string>();
      EXPECT_TRUE(rule["annotations"]["summary"].IsDefined()) << rule["alert"].as<std::string>();
      EXPECT_TRUE(alerts.insert(rule["alert"].as<std::string>()).second)
          << "two alerts named " << rule["alert"].as<std::string>();
    }
  }
  EXPECT_GE(alerts.size(), 15u);
  std::set<std::string> fired;  // alerts some case expects to fire
  const YAML::Node tests =
      YAML::LoadFile((kRoot / "deploy/prometheus/kvmesh-alerts.test.yml").string())["tests"];
  for (const YAML::Node& t : tests) {
    for (const YAML::Node& a : t["alert_rule_test"]) {
      if (a["exp_alerts"].size() > 0) fired.insert(a["alertname"].as<std::string>());
    }
  }
  for (const std::string& a : alerts) EXPECT_TRUE(fired.contains(a)) << "no case fires " << a;
}

// docker-compose's Prometheus: prometheus.yml names the rules in rule_files, the service mounts
// them where it looks, and promtool accepts the config with the mounted files in place.
TEST(AlertRulesTest, ComposePrometheusLoadsTheRules) {
  const std::string promtool = Promtool();
  ASSERT_FALSE(promtool.empty())
      << "no promtool on PATH (Debian prometheus): run scripts/bootstrap";
  const YAML::Node service =
      YAML::LoadFile((kRoot / "docker-compose.yml").string())["services"]["prometheus"];
  ASSERT_TRUE(service.IsMap());
  char tmpl[] = "/tmp/kvmesh-alert-rules-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const fs::path etc = dir / "etc/prometheus";
  fs::create_directories(etc);
  std::set<std::string> mounted;
  for (const YAML::Node& v : service["volumes"]) {
    const std::string spec = v.as<std::string>();
    const std::size_t a = spec.find(':');
    const std::size_t b = spec.find(':', a + 1);
    const std::string target = spec.substr(a + 1, b == std::string::npos ? b : b - a - 1);
    if (!target.starts_with("/etc/prometheus/")) continue;
    const fs::path host = kRoot / spec.substr(0, a);
    ASSERT_TRUE(fs::exists(host)) << spec;
    fs::copy_file(host, dir / target.substr(1));
    mounted.insert(target);
  }
  ASSERT_TRUE(mounted.contains("/etc/prometheus/prometheus.yml"));
  const YAML::Node config = YAML::LoadFile((etc / "prometheus.yml").string());
  ASSERT_TRUE(config["rule_files"].IsSequence()) << "prometheus.yml loads no rules";
  bool has_alerts = false;
  for (const YAML::Node& f : config["rule_files"]) {
    const fs::path p = f.as<std::string>();
    const std::string target = p.is_absolute() ? p.string() : "/etc/prometheus/" + p.string();
    EXPECT_TRUE(mounted.contains(target)) << target << " is not mounted";
    has_alerts = has_alerts || fs::path(target).filename() == "kvmesh-alerts.yml";
  }
  EXPECT_TRUE(has_alerts);
  const auto [code, out] =
      RunCommand(promtool + " check config " + (etc / "prometheus.yml").string());
  EXPECT_EQ(code, 0) << out;
  std::size_t rules = 0;
  for (const YAML::Node& group : YAML::LoadFile(kRules.string())["groups"]) {
    rules += group["rules"].size();
  }
  EXPECT_NE(out.find("SUCCESS: " + std::to_string(rules) + " rules found"), std::string::npos)
      << out;
  fs::remove_all(dir);
}

}  // namespace
