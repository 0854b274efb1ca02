#include "node/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/check.h"

namespace kvmesh::metrics {
namespace {

constexpr double kLatencyBuckets[] = {25e-6,  50e-6,  100e-6, 250e-6, 500e-6, 1e-3,
                                      2.5e-3, 5e-3,   10e-3,  25e-3,  50e-3,  100e-3,
                                      250e-3, 500e-3, 1.0,    2.5,    5.0,    10.0};

// Shortest text that reads back as the same double ("0.001", "5e-05", "12", "+Inf", "NaN").
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void AppendEscaped(std::string* out, std::string_view s, bool quote) {
  for (const char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (quote && c == '"') {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

void AppendLabels(std::string* out, const Labels& labels, const char* le = nullptr) {
  if (labels.empty() && le == nullptr) return;
  *out += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) *out += ',';
    first = false;
    *out += name;
    *out += "=\"";
    AppendEscaped(out, value, /*quote=*/true);
    *out += '"';
  }
  if (le != nullptr) {
    if (!first) *out += ',';
    *out += "le=\"";
    *out += le;
    *out += '"';
  }
  *out += '}';
}

Labels Zip(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  Labels l;
  l.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) l.emplace_back(names[i], values[i]);
  return l;
}

template <typename M>
std::unique_ptr<M> MakeChild(const std::vector<double>& /*bounds*/) {
  return std::make_unique<M>();
}
template <>
std::unique_ptr<Histogram> MakeChild<Histogram>(const std::vector<double>& bounds) {
  return std::make_unique<Histogram>(bounds);
}

double ValueOf(const Counter& c) { return static_cast<double>(c.value()); }
double ValueOf(const Gauge& g) { return g.value(); }

}  // namespace

std::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  return IsValidMetricName(name) && name.find(':') == std::string_view::npos &&
         name.substr(0, 2) != "__";
}

std::span<const double> LatencyBuckets() { return kLatencyBuckets; }

// ---- histograms

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds.begin(), bounds.end()),
      counts_(std::make_unique<std::atomic<std::uint64_t>[]>(bounds.size() + 1)) {
  KVMESH_CHECK(!bounds_.empty());
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    KVMESH_CHECK(std::isfinite(bounds_[i]) && (i == 0 || bounds_[i - 1] < bounds_[i]));
  }
}

void Histogram::Observe(double value, std::uint64_t times) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  counts_[static_cast<std::size_t>(it - bounds_.begin())].fetch_add(times,
                                                                    std::memory_order_relaxed);
  count_.fetch_add(times, std::memory_order_relaxed);
  sum_.fetch_add(value * static_cast<double>(times), std::memory_order_relaxed);
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  s.counts.resize(bounds_.size() + 1);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < s.counts.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    total += s.counts[i];
  }
  s.count = total;  // consistent with the buckets, which a scrape compares
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

double HistogramSnapshot::Quantile(double q) const {
  if (count == 0 || counts.empty()) return 0;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(count);
  double below = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const auto in = static_cast<double>(counts[i]);
    if (below + in >= rank && in > 0) {
      if (i == bounds.size()) return bounds.back();  // +Inf bucket
      const double lo = i == 0 ? 0.0 : bounds[i - 1];
      const double hi = bounds[i];
      return lo + (hi - lo) * ((rank - below) / in);
    }
    below += in;
  }
  return bounds.empty() ? 0 : bounds.back();
}

void HistogramSnapshot::Merge(const HistogramSnapshot& other) {
  if (bounds.empty()) {
    *this = other;
    return;
  }
  KVMESH_CHECK(bounds == other.bounds);
  for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  count += other.count;
  sum += other.sum;
}

// ---- families

template <typename M>
Family<M>::Family(std::string name, std::string help, MetricType type,
                  std::vector<std::string> labels, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(labels)),
      bounds_(std::move(bounds)) {}

template <typename M>
M& Family<M>::WithLabels(const std::vector<std::string>& values) {
  KVMESH_CHECK(values.size() == label_names_.size())
      << name_ << ": " << values.size() << " label values for " << label_names_.size() << " labels";
  MutexLock lock(&mu_);
  std::unique_ptr<M>& child = children_[values];
  if (!child) child = MakeChild<M>(bounds_);
  return *child;
}

template <typename M>
FamilySnapshot Family<M>::Collect() const {
  FamilySnapshot f;
  f.name = name_;
  f.help = help_;
  f.type = type_;
  MutexLock lock(&mu_);
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<M, Histogram>) {
      f.histograms.push_back({Zip(label_names_, values), child->Snapshot()});
    } else {
      f.samples.push_back({Zip(label_names_, values), ValueOf(*child)});
    }
  }
  return f;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- registry

void Registry::CheckName(const std::string& name, const std::vector<std::string>& labels) {
  KVMESH_CHECK(IsValidMetricName(name)) << "metric name " << name;
  for (const std::string& l : labels) KVMESH_CHECK(IsValidLabelName(l)) << name << " label " << l;
  KVMESH_CHECK(std::find(names_.begin(), names_.end(), name) == names_.end())
      << "metric " << name << " registered twice";
  names_.push_back(name);
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> labels) {
  MutexLock lock(&mu_);
  CheckName(name, labels);
  counters_.emplace_back(new Family<Counter>(std::move(name), std::move(help), MetricType::kCounter,
                                             std::move(labels), {}));
  return *counters_.back();
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> labels) {
  MutexLock lock(&mu_);
  CheckName(name, labels);
  gauges_.emplace_back(new Family<Gauge>(std::move(name), std::move(help), MetricType::kGauge,
                                         std::move(labels), {}));
  return *gauges_.back();
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<std::string> labels,
                                          std::span<const double> bounds) {
  MutexLock lock(&mu_);
  CheckName(name, labels);
  for (const std::string& l : labels) KVMESH_CHECK(l != "le") << name << ": 'le' is reserved";
  histograms_.emplace_back(
      new Family<Histogram>(std::move(name), std::move(help), MetricType::kHistogram,
                            std::move(labels), std::vector<double>(bounds.begin(), bounds.end())));
  return *histograms_.back();
}

int Registry::AddCollector(Collector collector) {
  MutexLock lock(&mu_);
  const int id = next_collector_++;
  collectors_.emplace(id, std::move(collector));
  return id;
}

void Registry::RemoveCollector(int id) {
  // Waits for a scrape in progress: the collector may be running.
  MutexLock scrape(&scrape_mu_);
  MutexLock lock(&mu_);
  collectors_.erase(id);
}

std::vector<FamilySnapshot> Registry::Collect() const {
  MutexLock scrape(&scrape_mu_);
  std::vector<FamilySnapshot> out;
  std::vector<Collector> collectors;
  {
    MutexLock lock(&mu_);
    for (const auto& f : counters_) out.push_back(f->Collect());
    for (const auto& f : gauges_) out.push_back(f->Collect());
    for (const auto& f : histograms_) out.push_back(f->Collect());
    for (const auto& [id, c] : collectors_) collectors.push_back(c);
  }
  // Without mu_: a collector may take other locks (the block manager's).
  for (const Collector& c : collectors) c(&out);
  std::sort(out.begin(), out.end(),
            [](const FamilySnapshot& a, const FamilySnapshot& b) { return a.name < b.name; });
  return out;
}

std::string Registry::RenderText() const { return RenderFamilies(Collect()); }

std::string RenderFamilies(const std::vector<FamilySnapshot>& families) {
  std::string out;
  out.reserve(families.size() * 256);
  for (const FamilySnapshot& f : families) {
    out += "# HELP ";
    out += f.name;
    out += ' ';
    AppendEscaped(&out, f.help, /*quote=*/false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += MetricTypeName(f.type);
    out += '\n';
    for (const Sample& s : f.samples) {
      out += f.name;
      AppendLabels(&out, s.labels);
      out += ' ';
      out += FormatValue(s.value);
      out += '\n';
    }
    for (const HistogramSample& h : f.histograms) {
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < h.histogram.counts.size(); ++i) {
        cumulative += h.histogram.counts[i];
        const std::string le =
            i < h.histogram.bounds.size() ? FormatValue(h.histogram.bounds[i]) : "+Inf";
        out += f.name;
        out += "_bucket";
        AppendLabels(&out, h.labels, le.c_str());
        out += ' ';
        out += FormatValue(static_cast<double>(cumulative));
        out += '\n';
      }
      out += f.name;
      out += "_sum";
      AppendLabels(&out, h.labels);
      out += ' ';
      out += FormatValue(h.histogram.sum);
      out += '\n';
      out += f.name;
      out += "_count";
      AppendLabels(&out, h.labels);
      out += ' ';
      out += FormatValue(static_cast<double>(h.histogram.count));
      out += '\n';
    }
  }
  return out;
}

}  // namespace kvmesh::metrics
