// A real Prometheus server (Debian `prometheus`, scripts/bootstrap installs it) scrapes a real
// kvnode every second on loopback, and the test asks Prometheus — through its own HTTP API, the
// client operators use — for every metric the Grafana dashboard (deploy/grafana/kvmesh-node.json)
// queries: each selector of each panel's `expr` and of the templating queries must match series
// (/api/v1/series), every label a panel groups by must be on them, the metric's type must be what
// the query assumes (/api/v1/metadata: `_total` a counter, `_bucket` a histogram, the rest gauges),
// and the whole expression must evaluate to a non-empty vector (/api/v1/query). The same
// Prometheus loads the alerting rules (deploy/prometheus/kvmesh-alerts.yml): the metrics they
// select must exist likewise, and none may fire on this healthy node. Prometheus runs
// in the test's scratch directory on a free port and is stopped by its PID when the test ends, also
// when it fails (ChildProcess).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

using Json = nlohmann::json;
using Steady = std::chrono::steady_clock;

std::string PrometheusPath() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::filesystem::path p = std::filesystem::path(d) / "prometheus";
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      constexpr std::string_view kHex = "0123456789ABCDEF";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A Prometheus API call: the `data` of a successful answer, or a string saying what went wrong.
Json Api(int port, const std::string& path, const std::string& param, const std::string& value) {
  const auto body = node_test::HttpGet(port, StrCat(path, "?", param, "=", UrlEncode(value)));
  if (!body) return Json("no answer");
  const Json j = Json::parse(*body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return Json(*body);
  return j["data"];
}

// Every PromQL expression of the dashboard: the panels' target `expr`s and the templating queries
// (label_values(metric, label) becomes the selector `metric` and a required label).
struct DashboardQuery {
  std::string where;  // panel title
  std::string expr;
  std::set<std::string> labels;  // grouped by, matched on or asked for
};

void CollectExprs(const Json& j, const std::string& title, std::vector<DashboardQuery>& out) {
  if (j.is_object()) {
    const std::string t =
        j.contains("title") && j["title"].is_string() ? j["title"].get<std::string>() : title;
    for (const auto& [k, v] : j.items()) {
      if (k == "expr" && v.is_string()) out.push_back({t, v.get<std::string>(), {}});
      CollectExprs(v, t, out);
    }
  } else if (j.is_array()) {
    for (const Json& v : j) CollectExprs(v, title, out);
  }
}

std::vector<DashboardQuery> DashboardQueries(const Json& dashboard) {
  std::vector<DashboardQuery> out;
  CollectExprs(dashboard["panels"], "", out);
  static const std::regex label_values(R"(label_values\(\s*(\w+)\s*,\s*(\w+)\s*\))");
  for (const Json& v : dashboard["templating"]["list"]) {
    if (v.value("type", "") != "query") continue;
    const std::string q =
        v["query"].is_object() ? v["query"].value("query", "") : v.value("query", "");
    std::smatch m;
    if (std::regex_search(q, m, label_values)) {
      out.push_back({"variable " + v.value("name", ""), m[1].str(), {m[2].str()}});
    }
  }
  // Grafana's variables as a user would have them: every instance, a 5 s rate window.
  for (DashboardQuery& q : out) {
    q.expr = std::regex_replace(q.expr, std::regex(R"(\$__rate_interval|\$__interval)"), "5s");
    q.expr = std::regex_replace(q.expr, std::regex(R"(\$instance)"), ".+");
    static const std::regex by(R"(\b(?:by|without|on|ignoring)\s*\(([^)]*)\))");
    for (auto it = std::sregex_iterator(q.expr.begin(), q.expr.end(), by);
         it != std::sregex_iterator(); ++it) {
      std::stringstream names((*it)[1].str());
      for (std::string n; std::getline(names, n, ',');) {
        n = std::regex_replace(n, std::regex(R"(\s+)"), "");
        if (!n.empty()) q.labels.insert(n);
      }
    }
  }
  return out;
}

// The metric selectors of an expression: `name{matchers}` or a bare name. Every metric of ours is
// kvmesh_* or process_*, so a name with one of those prefixes not followed by `(` is a selector.
std::vector<std::pair<std::string, std::string>> Selectors(const std::string& expr) {
  static const std::regex sel(R"(\b((?:kvmesh|process)_[a-zA-Z0-9_:]*)\s*(\{[^}]*\})?)");
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), sel); it != std::sregex_iterator();
       ++it) {
    const auto after = static_cast<std::size_t>(it->position(0) + it->length(0));
    if (after < expr.size() && expr[after] == '(') continue;
    out.emplace_back((*it)[1].str(), (*it)[0].str());
  }
  return out;
}

std::string ExpectedType(const std::string& name) {
  if (name.ends_with("_bucket") || name.ends_with("_count") || name.ends_with("_sum")) {
    return "histogram";
  }
  if (name.ends_with("_total")) return "counter";
  return "gauge";
}

std::string MetadataName(const std::string& name) {
  for (const char* s : {"_bucket", "_count", "_sum"}) {
    if (name.ends_with(s)) return name.substr(0, name.size() - std::string_view(s).size());
  }
  return name;
}

// Load that gives every labelled family the series the dashboard shows: an admission that stores
// blocks, a cached one, an engine report, and one request that fails (errors by API and code).
void DriveTraffic(const KvnodeProcess& node) {
  auto c = node.Connect("prometheus-test");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<Token> prompt(100);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>(i * 7 + 1);
  for (std::uint64_t id : {1, 2}) {
    ASSERT_TRUE((*c)->Admit(id, prompt).ok());
    ASSERT_TRUE((*c)->StoreFullBlocks(id).ok());
    ASSERT_TRUE((*c)->Release(id).ok());
  }
  EXPECT_FALSE((*c)->Release(999).ok());  // an unknown request: kvmesh_request_errors_total
  ASSERT_TRUE((*c)->Lookup(prompt).ok());
}

TEST(PrometheusScrapeTest, EveryMetricTheDashboardQueriesExistsInPrometheus) {
  const std::string prometheus = PrometheusPath();
  ASSERT_FALSE(prometheus.empty()) << "no prometheus on PATH: run scripts/bootstrap";
  std::ifstream in(std::filesystem::path(KVMESH_SOURCE_DIR) / "deploy/grafana/kvmesh-node.json");
  const Json dashboard = Json::parse(in, nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded());
  const std::vector<DashboardQuery> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 20u);

  ScratchDir dir;
  // A one-member cluster with the peer data path on, so that the Cluster row's families exist:
  // static membership that lists only this node, the prefix directory, remote fetch.
  auto node = KvnodeProcess::Start(
      dir.path(), TestConfig(dir.path(), 4096, "8MiB", "64MiB",
                             "peer:\n  enabled: true\n  ucx_tls: tcp\n  ucx_net_devices: lo\n"
                             "cluster:\n  membership: static\n  peers:\n"
                             "    - {node_id: test-node, address: \"127.0.0.1:1\"}\n"));
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string& metrics = (*node)->metrics_address();
  ASSERT_FALSE(metrics.empty());
  DriveTraffic(**node);

  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::filesystem::path config = dir.path() / "prometheus.yml";
  const std::filesystem::path rules =
      std::filesystem::path(KVMESH_SOURCE_DIR) / "deploy/prometheus/kvmesh-alerts.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "rule_files:\n  - '" << rules.string() << "'\n"
                        << "scrape_configs:\n  - job_name: kvnode\n    static_configs:\n"
                        << "      - targets: ['" << metrics << "']\n";
  auto prom = ChildProcess::Spawn(
      prometheus,
      {"--config.file=" + config.string(), "--storage.tsdb.path=" + (dir.path() / "tsdb").string(),
       StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"},
      dir.path() / "prometheus");
  ASSERT_TRUE(prom.ok()) << prom.status();
  // Ready, then scraped at least three times (a rate over 5 s needs two samples).
  const auto deadline = Steady::now() + std::chrono::seconds(30);
  bool scraped = false;
  while (!scraped && Steady::now() < deadline && (*prom)->running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const Json r =
        Api(port, "/api/v1/query", "query", "count_over_time(up{job=\"kvnode\"}[1m]) >= 3");
    scraped = r.is_object() && !r["result"].empty();
  }
  ASSERT_TRUE(scraped) << "prometheus did not scrape the node: " << (*prom)->Stderr();
  const Json up = Api(port, "/api/v1/query", "query", "up{job=\"kvnode\"}");
  ASSERT_TRUE(up.is_object());
  ASSERT_EQ(up["result"].size(), 1u);
  EXPECT_EQ(up["result"][0]["value"][1], "1");

  std::set<std::string> checked;
  for (const DashboardQuery& q : queries) {
    SCOPED_TRACE(q.where + ": " + q.expr);
    const auto selectors = Selectors(q.expr);
    EXPECT_FALSE(selectors.empty());
    std::set<std::string> labels_seen;
    for (const auto& [name, selector] : selectors) {
      const Json series = Api(port, "/api/v1/series", "match%5B%5D", selector);
      ASSERT_TRUE(series.is_array()) << selector << ": " << series;
      EXPECT_FALSE(series.empty()) << "no series in prometheus for " << selector;
      for (const Json& s : series) {
        for (const auto& [label, value] : s.items()) labels_seen.insert(label);
      }
      const Json meta = Api(port, "/api/v1/metadata", "metric", MetadataName(name));
      ASSERT_TRUE(meta.is_object()) << meta;
      ASSERT_TRUE(meta.contains(MetadataName(name))) << "no metadata for " << name;
      EXPECT_EQ(meta[MetadataName(name)][0]["type"], ExpectedType(name)) << name;
      checked.insert(name);
    }
    for (const std::string& label : q.labels) {
      EXPECT_EQ(labels_seen.count(label), 1u) << "no series has the label " << label;
    }
    const Json result = Api(port, "/api/v1/query", "query", q.expr);
    ASSERT_TRUE(result.is_object()) << result;
    EXPECT_FALSE(result["result"].empty()) << "the query has no result";
  }
  EXPECT_GE(checked.size(), 25u);

  // The alerting rules (deploy/prometheus/kvmesh-alerts.yml; their own unit tests are
  // deploy_alert_rules_test), loaded by this Prometheus: every metric they select has series of
  // the type the rule assumes, each rule evaluates without error, and none fires on this healthy
  // node (a rule that is always true would).
  Json alert_rules;
  for (const auto until = Steady::now() + std::chrono::seconds(20); Steady::now() < until;) {
    const Json groups = Api(port, "/api/v1/rules", "type", "alert");
    ASSERT_TRUE(groups.is_object()) << groups;
    alert_rules = Json::array();
    bool evaluated = true;
    for (const Json& g : groups["groups"]) {
      for (const Json& r : g["rules"]) {
        alert_rules.push_back(r);
        evaluated = evaluated && r.value("health", "") != "unknown";
      }
    }
    if (evaluated && !alert_rules.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_GE(alert_rules.size(), 15u) << "prometheus did not load " << rules;
  for (const Json& r : alert_rules) {
    const std::string name = r.value("name", "");
    const std::string query = r.value("query", "");
    SCOPED_TRACE("alert " + name + ": " + query);
    EXPECT_EQ(r.value("health", ""), "ok") << r.value("lastError", "");
    EXPECT_NE(r.value("state", ""), "firing") << r.dump();
    for (const auto& [metric, selector] : Selectors(query)) {
      const Json series = Api(port, "/api/v1/series", "match%5B%5D", selector);
      ASSERT_TRUE(series.is_array()) << selector << ": " << series;
      EXPECT_FALSE(series.empty()) << "no series in prometheus for " << selector;
      const Json meta = Api(port, "/api/v1/metadata", "metric", MetadataName(metric));
      ASSERT_TRUE(meta.is_object() && meta.contains(MetadataName(metric)))
          << "no metadata for " << metric;
      EXPECT_EQ(meta[MetadataName(metric)][0]["type"], ExpectedType(metric)) << metric;
    }
  }
  // Stopped by its PID; a clean exit on SIGTERM.
  (*prom)->Signal(SIGTERM);
  const auto st = (*prom)->Wait(std::chrono::seconds(20));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->exited && st->code == 0) << (*prom)->Stderr();
}

}  // namespace
}  // namespace kvmesh::node_test
