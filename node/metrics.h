// Metrics: a small thread-safe registry of counters, gauges and histograms with labels, rendered
// in the Prometheus text exposition format 0.0.4 (served by node/metrics_http.h).
//
// Two kinds of metric live in a Registry:
//   - owned metrics (AddCounter, AddGauge, AddHistogram): a family with fixed label names whose
//     children (one per label values) are created on first use and live as long as the registry.
//     Updating a child is lock-free (relaxed atomics); finding a child takes the family's mutex,
//     so hot paths look a child up once and keep the reference;
//   - collectors (AddCollector): functions that produce whole families at scrape time, for values
//     that already exist elsewhere (the block manager's, the tiers' and the control server's
//     statistics, /proc/self).
// Names follow Prometheus conventions: base units (_bytes, _seconds), counters end in _total;
// metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* — checked at
// registration (KVMESH_CHECK: names are constants of the program, not input).
//
// Histograms have fixed upper bounds (sorted, finite; +Inf is implicit); Observe finds the bucket
// by binary search and adds with atomics. A snapshot's counts are per bucket (not cumulative);
// HistogramSnapshot::Quantile interpolates linearly inside the bucket, as PromQL's
// histogram_quantile does.
//
// Exposition: families sorted by name, each with `# HELP` and `# TYPE` once; label values escaped
// (\\, \", \n); histograms as _bucket{le=...} (cumulative, le="+Inf" last), _sum and _count.
//
// Thread safety: thread-safe. Collectors run on the scraping thread, one scrape at a time; a
// collector must stay valid until RemoveCollector returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"

namespace kvmesh::metrics {

enum class MetricType : std::uint8_t { kCounter, kGauge, kHistogram };
std::string_view MetricTypeName(MetricType type);  // "counter", "gauge", "histogram"

// Label name → value, in the family's label order.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Inc(std::int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  [[nodiscard]] double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

struct HistogramSnapshot {
  std::vector<double> bounds;         // upper bounds, +Inf not included
  std::vector<std::uint64_t> counts;  // per bucket, bounds.size() + 1 (the last is +Inf)
  std::uint64_t count = 0;
  double sum = 0;

  // The q-quantile (0 <= q <= 1) by linear interpolation inside its bucket; the last finite
  // bound when it falls in +Inf; 0 without observations.
  [[nodiscard]] double Quantile(double q) const;
  // Adds another snapshot with the same bounds.
  void Merge(const HistogramSnapshot& other);
};

class Histogram {
 public:
  // REQUIRES: bounds sorted ascending, finite, not empty.
  explicit Histogram(std::span<const double> bounds);
  // `times` observations of `value` (a batch of equal shares).
  void Observe(double value, std::uint64_t times = 1);
  [[nodiscard]] HistogramSnapshot Snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // [bounds_.size() + 1]
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Bucket bounds for latencies in seconds: 25 us to 10 s, about three per decade.
std::span<const double> LatencyBuckets();

// One sample of a gauge or counter family; a histogram's child.
struct Sample {
  Labels labels;
  double value = 0;
};
struct HistogramSample {
  Labels labels;
  HistogramSnapshot histogram;
};

// A family as collected for one scrape.
struct FamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;              // counter, gauge
  std::vector<HistogramSample> histograms;  // histogram
};

// A family of owned metrics of type M with fixed label names.
template <typename M>
class Family {
 public:
  // The child with these label values (created on first use). REQUIRES: one value per label.
  M& WithLabels(const std::vector<std::string>& values);
  M& Get() { return WithLabels({}); }
  [[nodiscard]] FamilySnapshot Collect() const;

 private:
  friend class Registry;
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> labels,
         std::vector<double> bounds);

  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histograms
  mutable Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_ KVMESH_GUARDED_BY(mu_);
};

using Collector = std::function<void(std::vector<FamilySnapshot>*)>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Families live as long as the registry; a name is registered once (KVMESH_CHECK).
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> labels = {}) KVMESH_EXCLUDES(mu_);
  Family<Gauge>& AddGauge(std::string name, std::string help, std::vector<std::string> labels = {})
      KVMESH_EXCLUDES(mu_);
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> labels, std::span<const double> bounds)
      KVMESH_EXCLUDES(mu_);

  // Returns an id for RemoveCollector.
  int AddCollector(Collector collector) KVMESH_EXCLUDES(mu_);
  void RemoveCollector(int id) KVMESH_EXCLUDES(mu_);

  // Every family, owned and collected, sorted by name.
  [[nodiscard]] std::vector<FamilySnapshot> Collect() const KVMESH_EXCLUDES(mu_, scrape_mu_);
  // Collect() in the text exposition format 0.0.4.
  [[nodiscard]] std::string RenderText() const KVMESH_EXCLUDES(mu_, scrape_mu_);

 private:
  void CheckName(const std::string& name, const std::vector<std::string>& labels)
      KVMESH_REQUIRES(mu_);

  mutable Mutex scrape_mu_;  // one scrape at a time (collectors need not be reentrant)
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Family<Counter>>> counters_ KVMESH_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_ KVMESH_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_ KVMESH_GUARDED_BY(mu_);
  std::vector<std::string> names_ KVMESH_GUARDED_BY(mu_);
  std::map<int, Collector> collectors_ KVMESH_GUARDED_BY(mu_);
  int next_collector_ KVMESH_GUARDED_BY(mu_) = 1;
};

// The text format of a list of families (sorted by the caller). Exposed for tests.
std::string RenderFamilies(const std::vector<FamilySnapshot>& families);
// True when `name` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*).
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

}  // namespace kvmesh::metrics
