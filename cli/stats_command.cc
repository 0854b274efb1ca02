// kvctl stats: what a running node did — hit rates per tier, evictions, offload/onboard/spill
// bytes and rates, request and copy latency percentiles from the node's histograms — since it
// started, or over an interval (--interval S: two snapshots S seconds apart, the difference)
// (docs/kvctl.md). --json: kvmesh.stats/1.
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

using Json = nlohmann::json;

struct StatsOptions {
  NodeConnectionFlags node;
  double interval_s = 0;
  bool json = false;
};

// The q-quantile by linear interpolation inside its bucket (as PromQL's histogram_quantile).
double Quantile(const rpc::HistogramData& h, double q) {
  std::uint64_t count = 0;
  for (const std::uint64_t c : h.counts()) count += c;
  if (count == 0 || h.bounds().empty()) return 0;
  const double rank = q * static_cast<double>(count);
  double below = 0;
  for (int i = 0; i < h.counts_size(); ++i) {
    const auto in = static_cast<double>(h.counts(i));
    if (in > 0 && below + in >= rank) {
      if (i == h.bounds_size()) return h.bounds(h.bounds_size() - 1);
      const double lo = i == 0 ? 0.0 : h.bounds(i - 1);
      return lo + (h.bounds(i) - lo) * ((rank - below) / in);
    }
    below += in;
  }
  return h.bounds(h.bounds_size() - 1);
}

void Subtract(const rpc::HistogramData& before, rpc::HistogramData* h) {
  if (before.counts_size() != h->counts_size()) return;
  for (int i = 0; i < h->counts_size(); ++i) h->set_counts(i, h->counts(i) - before.counts(i));
  h->set_count(h->count() - before.count());
  h->set_sum(h->sum() - before.sum());
}

// `now` minus `before`: every counter and histogram over the interval.
void Difference(const rpc::StatsResponse& before, rpc::StatsResponse* now) {
  const auto sub = [](std::int64_t a, std::int64_t b) { return a - b; };
  now->set_admissions(sub(now->admissions(), before.admissions()));
  now->set_input_blocks(sub(now->input_blocks(), before.input_blocks()));
  now->set_pool_hit_blocks(sub(now->pool_hit_blocks(), before.pool_hit_blocks()));
  now->set_host_hit_blocks(sub(now->host_hit_blocks(), before.host_hit_blocks()));
  now->set_disk_hit_blocks(sub(now->disk_hit_blocks(), before.disk_hit_blocks()));
  now->set_remote_hit_blocks(sub(now->remote_hit_blocks(), before.remote_hit_blocks()));
  now->set_missed_blocks(sub(now->missed_blocks(), before.missed_blocks()));
  now->set_evicted_blocks(sub(now->evicted_blocks(), before.evicted_blocks()));
  now->set_host_evictions(sub(now->host_evictions(), before.host_evictions()));
  now->set_disk_evictions(sub(now->disk_evictions(), before.disk_evictions()));
  now->set_engine_checks(sub(now->engine_checks(), before.engine_checks()));
  now->set_engine_check_failures(sub(now->engine_check_failures(), before.engine_check_failures()));
  for (int i = 0; i < now->copies_size() && i < before.copies_size(); ++i) {
    rpc::CopyStats* c = now->mutable_copies(i);
    const rpc::CopyStats& b = before.copies(i);
    c->set_blocks(c->blocks() - b.blocks());
    c->set_bytes(c->bytes() - b.bytes());
    c->set_copy_s(c->copy_s() - b.copy_s());
    Subtract(b.latency(), c->mutable_latency());
  }
  for (int i = 0; i < now->apis_size() && i < before.apis_size(); ++i) {
    now->mutable_apis(i)->set_errors(now->apis(i).errors() - before.apis(i).errors());
    Subtract(before.apis(i).latency(), now->mutable_apis(i)->mutable_latency());
  }
}

// Every tier's hits: pool, host, disk and remote (fetched from a peer).
std::int64_t HitBlocks(const rpc::StatsResponse& s) {
  return s.pool_hit_blocks() + s.host_hit_blocks() + s.disk_hit_blocks() + s.remote_hit_blocks();
}

double Fraction(std::int64_t a, std::int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

Json Derived(const rpc::StatsResponse& s, double seconds) {
  Json j;
  j["seconds"] = seconds;
  j["hit_rate"] = Fraction(HitBlocks(s), s.input_blocks());
  j["by_tier"] = {{"pool", Fraction(s.pool_hit_blocks(), s.input_blocks())},
                  {"host", Fraction(s.host_hit_blocks(), s.input_blocks())},
                  {"disk", Fraction(s.disk_hit_blocks(), s.input_blocks())},
                  {"remote", Fraction(s.remote_hit_blocks(), s.input_blocks())},
                  {"miss", Fraction(s.missed_blocks(), s.input_blocks())}};
  Json apis = Json::array();
  for (const rpc::ApiStats& a : s.apis()) {
    apis.push_back({{"api", a.api()},
                    {"requests", a.latency().count()},
                    {"errors", a.errors()},
                    {"per_s", seconds > 0 ? static_cast<double>(a.latency().count()) / seconds : 0},
                    {"p50_s", Quantile(a.latency(), 0.5)},
                    {"p90_s", Quantile(a.latency(), 0.9)},
                    {"p99_s", Quantile(a.latency(), 0.99)}});
  }
  j["apis"] = apis;
  Json copies = Json::array();
  for (const rpc::CopyStats& c : s.copies()) {
    copies.push_back(
        {{"direction", c.direction()},
         {"tier", c.tier()},
         {"blocks", c.blocks()},
         {"bytes", c.bytes()},
         {"bytes_per_s", seconds > 0 ? static_cast<double>(c.bytes()) / seconds : 0},
         {"copy_bytes_per_s", c.copy_s() > 0 ? static_cast<double>(c.bytes()) / c.copy_s() : 0},
         {"p50_s", Quantile(c.latency(), 0.5)},
         {"p99_s", Quantile(c.latency(), 0.99)}});
  }
  j["copies"] = copies;
  return j;
}

void PrintTable(const rpc::StatsResponse& s, double seconds, bool interval) {
  std::printf("%s %.1f s\n", interval ? "interval   " : "uptime     ", seconds);
  const std::int64_t in = s.input_blocks();
  std::printf(
      "hits        %s of %lld block positions (%lld admissions): pool %s, host %s, disk "
      "%s, remote %s, miss %s\n",
      Percent(Fraction(HitBlocks(s), in)).c_str(), static_cast<long long>(in),
      static_cast<long long>(s.admissions()), Percent(Fraction(s.pool_hit_blocks(), in)).c_str(),
      Percent(Fraction(s.host_hit_blocks(), in)).c_str(),
      Percent(Fraction(s.disk_hit_blocks(), in)).c_str(),
      Percent(Fraction(s.remote_hit_blocks(), in)).c_str(),
      Percent(Fraction(s.missed_blocks(), in)).c_str());
  std::printf(
      "evictions   pool %lld, host tier %lld, disk tier %lld; not offloaded: %lld below the "
      "offload priority, %lld clean\n",
      static_cast<long long>(s.evicted_blocks()), static_cast<long long>(s.host_evictions()),
      static_cast<long long>(s.disk_evictions()),
      static_cast<long long>(s.offload_skipped_priority()),
      static_cast<long long>(s.offload_skipped_clean()));
  std::printf("checks      %lld engine checks, %lld failed; %lld corrupt tier reads\n",
              static_cast<long long>(s.engine_checks()),
              static_cast<long long>(s.engine_check_failures()),
              static_cast<long long>(s.onboard_corrupt()));
  std::printf("\n");
  Table copies({"COPY", "TIER", "BLOCKS", "BYTES", "PER SECOND", "COPY RATE", "P50", "P99"},
               {false, false, true, true, true, true, true, true});
  for (const rpc::CopyStats& c : s.copies()) {
    copies.AddRow({c.direction(), c.tier(), StrCat(c.blocks()), FormatBytes(c.bytes()),
                   FormatRate(static_cast<double>(c.bytes()), seconds),
                   FormatRate(static_cast<double>(c.bytes()), c.copy_s()),
                   FormatSeconds(Quantile(c.latency(), 0.5)),
                   FormatSeconds(Quantile(c.latency(), 0.99))});
  }
  copies.Print();
  std::printf("\n");
  Table apis({"API", "REQUESTS", "ERRORS", "PER SECOND", "P50", "P90", "P99"},
             {false, true, true, true, true, true, true});
  for (const rpc::ApiStats& a : s.apis()) {
    if (a.latency().count() == 0 && a.errors() == 0) continue;
    apis.AddRow(
        {a.api(), StrCat(a.latency().count()), StrCat(a.errors()),
         FormatFixed(seconds > 0 ? static_cast<double>(a.latency().count()) / seconds : 0, 1),
         FormatSeconds(Quantile(a.latency(), 0.5)), FormatSeconds(Quantile(a.latency(), 0.9)),
         FormatSeconds(Quantile(a.latency(), 0.99))});
  }
  apis.Print();
  std::printf(
      "\nnow         %lld connections, %lld requests in flight, %lld refused by the in-flight "
      "limits\n",
      static_cast<long long>(s.connections()), static_cast<long long>(s.inflight()),
      static_cast<long long>(s.requests_rejected()));
}

Result<rpc::StatsResponse> Snapshot(NodeClient& c) {
  rpc::Request req;
  req.mutable_stats();
  KVMESH_ASSIGN_OR_RETURN(rpc::Response r, c.Call(std::move(req)));
  return std::move(*r.mutable_stats());
}

Status Run(const StatsOptions& o) {
  if (o.interval_s < 0 || o.interval_s > 3600) {
    return Status::InvalidArgument(StrCat("--interval ", o.interval_s, " is not within 0..3600 s"));
  }
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  KVMESH_ASSIGN_OR_RETURN(rpc::StatsResponse s, Snapshot(*c));
  double seconds = s.uptime_s();
  if (o.interval_s > 0) {
    const rpc::StatsResponse before = s;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    KVMESH_ASSIGN_OR_RETURN(s, Snapshot(*c));
    seconds = s.uptime_s() - before.uptime_s();
    Difference(before, &s);
  }
  if (o.json) {
    Json j;
    j["interval"] = o.interval_s > 0;
    j["stats"] = ProtoToJson(s);
    j["derived"] = Derived(s, seconds);
    PrintDocument("kvmesh.stats/1", j);
  } else {
    PrintTable(s, seconds, o.interval_s > 0);
  }
  return Status::Ok();
}

}  // namespace

void RegisterStatsCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<StatsOptions>();
  CLI::App* cmd =
      app.add_subcommand("stats",
                         "a running node's hit rates per tier, evictions, copy traffic and latency "
                         "percentiles");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("--interval", o->interval_s,
                  "seconds between two snapshots: report their difference (default: since start)");
  cmd->add_flag("--json", o->json, "print kvmesh.stats/1 JSON");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
