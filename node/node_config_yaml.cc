// ParseNodeConfig: the YAML form of NodeConfig (node_config.h), read with yaml-cpp.
//
// One table per section lists its keys with the reader of each; a map is read pair by pair, so
// duplicate keys (which yaml-cpp keeps) and unknown keys are seen, and every key's line is
// recorded for the errors of the checks that run after reading (FindConfigProblem).
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <vector>

#include "common/strings.h"
#include "common/units.h"
#include "kernels/kv_format.h"
#include "node/node_config.h"
#include "node/node_config_internal.h"

namespace kvmesh {
namespace {

using node_config_internal::FindConfigProblem;
using node_config_internal::ResolveConfigPaths;

// Far beyond any timeout, and small enough that now() + timeout cannot overflow.
constexpr std::int64_t kMaxDurationMs = std::int64_t{1} << 40;

// The source's name for messages and the line of every key read.
class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source.empty() ? "config" : source) {}

  // "source:line: message", or "source: message" when line is 0.
  [[nodiscard]] Status ErrorAt(int line, std::string_view message) const {
    return line > 0 ? Status::InvalidArgument(StrCat(source_, ":", line, ": ", message))
                    : Status::InvalidArgument(StrCat(source_, ": ", message));
  }
  // "source:line: key: message".
  [[nodiscard]] Status Error(int line, std::string_view key, std::string_view message) const {
    return ErrorAt(line, StrCat(key, ": ", message));
  }

  void Record(const std::string& key, int line) { lines_.emplace(key, line); }
  [[nodiscard]] bool Seen(const std::string& key) const { return lines_.contains(key); }
  // The line of `key`, else of the nearest enclosing key that was written ("kv_cache" for
  // "kv_cache.max_tokens"), else 0.
  [[nodiscard]] int LineOf(std::string key) const {
    while (!key.empty()) {
      if (auto it = lines_.find(key); it != lines_.end()) return it->second;
      const std::size_t cut = key.find_last_of(".[");
      key.resize(cut == std::string::npos ? 0 : cut);
    }
    return 0;
  }

 private:
  std::string source_;
  std::map<std::string, int> lines_;
};

int LineOf(const YAML::Node& node) { return node.Mark().line >= 0 ? node.Mark().line + 1 : 0; }

// "a map", "a list", "null", "'text'" or "the string \"text\"".
std::string Describe(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.Tag() != "?") return StrCat("the string \"", node.Scalar(), "\"");
  return StrCat("'", node.Scalar(), "'");
}

// One key's value being read.
struct Value {
  const YAML::Node& node;
  const std::string& key;  // dotted path: kv_cache.tokens_per_block
  int line;                // of the key (the value's own mark is unreliable for null and aliases)
  Reader& reader;

  [[nodiscard]] Status Fail(std::string_view message) const {
    return reader.Error(line, key, message);
  }
  [[nodiscard]] Status Expected(std::string_view what) const {
    return Fail(StrCat("expected ", what, ", got ", Describe(node)));
  }
};

// Any scalar (quoted or not) into `text`.
Status ScalarText(const Value& v, std::string_view what, std::string* text) {
  if (!v.node.IsScalar()) return v.Expected(what);
  *text = v.node.Scalar();
  return Status::Ok();
}

// An unquoted scalar (numbers and booleans; a quoted "32" is a string, not a number).
Status PlainText(const Value& v, std::string_view what, std::string* text) {
  if (!v.node.IsScalar() || v.node.Tag() != "?") return v.Expected(what);
  *text = v.node.Scalar();
  return Status::Ok();
}

Status ReadString(const Value& v, std::string* out) {
  if (v.node.IsNull()) return v.Fail("expected a string, got null (write \"\" for an empty one)");
  return ScalarText(v, "a string", out);
}

Status ReadBool(const Value& v, bool* out) {
  std::string s;
  KVMESH_RETURN_IF_ERROR(PlainText(v, "true or false", &s));
  if (s == "true" || s == "True" || s == "TRUE") {
    *out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    *out = false;
  } else {
    return v.Expected("true or false");
  }
  return Status::Ok();
}

template <typename Int>
Status ReadInt(const Value& v, Int* out) {
  std::string s;
  KVMESH_RETURN_IF_ERROR(PlainText(v, "an integer", &s));
  std::int64_t x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec == std::errc::result_out_of_range) return v.Fail(StrCat(s, " is out of range"));
  if (ec != std::errc() || end != s.data() + s.size()) return v.Expected("an integer");
  if (x < std::numeric_limits<Int>::min() || x > std::numeric_limits<Int>::max()) {
    return v.Fail(StrCat(s, " is out of range"));
  }
  *out = static_cast<Int>(x);
  return Status::Ok();
}

// A plain finite number of `node` (which may be an element of v's list).
Status ReadDoubleOf(const Value& v, const YAML::Node& node, double* out) {
  const Value of{node, v.key, v.line, v.reader};
  std::string s;
  KVMESH_RETURN_IF_ERROR(PlainText(of, "a number", &s));
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(x)) {
    return of.Expected("a finite number");
  }
  *out = x;
  return Status::Ok();
}

Status ReadDouble(const Value& v, double* out) { return ReadDoubleOf(v, v.node, out); }

// A number or null (nullopt).
Status ReadOptionalFloat(const Value& v, std::optional<float>* out) {
  if (v.node.IsNull()) {
    out->reset();
    return Status::Ok();
  }
  double x = 0;
  KVMESH_RETURN_IF_ERROR(ReadDouble(v, &x));
  if (std::fabs(x) > std::numeric_limits<float>::max()) {
    return v.Fail(StrCat(v.node.Scalar(), " is out of the range of a 32-bit float"));
  }
  *out = static_cast<float>(x);
  return Status::Ok();
}

Status ReadBytes(const Value& v, std::int64_t* out) {
  std::string s;
  KVMESH_RETURN_IF_ERROR(ScalarText(v, "a size (4096, 64KiB, 10GiB)", &s));
  Result<std::int64_t> bytes = ParseBytes(s);
  if (!bytes.ok()) return v.Fail(bytes.status().message());
  *out = *bytes;
  return Status::Ok();
}

Status ReadCount(const Value& v, std::int64_t* out) {
  std::string s;
  KVMESH_RETURN_IF_ERROR(ScalarText(v, "a count (65536, 64k)", &s));
  Result<std::int64_t> count = ParseCount(s);
  if (!count.ok()) return v.Fail(count.status().message());
  *out = *count;
  return Status::Ok();
}

Status ReadOptionalCount(const Value& v, std::optional<std::int64_t>* out) {
  if (v.node.IsNull()) {
    out->reset();
    return Status::Ok();
  }
  std::int64_t x = 0;
  KVMESH_RETURN_IF_ERROR(ReadCount(v, &x));
  *out = x;
  return Status::Ok();
}

// "500ms", "5s", "2m", "1h", or a whole number of milliseconds.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  const char* begin = text.data();
  const char* stop = text.data() + text.size();
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(begin, stop, n);
  const std::string_view unit(end, static_cast<std::size_t>(stop - end));
  std::int64_t scale = 0;
  if (unit.empty() || unit == "ms") scale = 1;
  if (unit == "s") scale = 1000;
  if (unit == "m") scale = 60 * 1000;
  if (unit == "h") scale = 60 * 60 * 1000;
  if (text.empty() || *begin == '-' || scale == 0 ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return Status::InvalidArgument(StrCat(
        "bad duration '", text,
        "': expected a whole number with a unit ms, s, m or h (500ms, 5s), or milliseconds"));
  }
  if (ec == std::errc::result_out_of_range || n > kMaxDurationMs / scale) {
    return Status::InvalidArgument(StrCat("duration '", text, "' is too long"));
  }
  return std::chrono::milliseconds(n * scale);
}

Status ReadDuration(const Value& v, std::chrono::milliseconds* out) {
  std::string s;
  KVMESH_RETURN_IF_ERROR(ScalarText(v, "a duration (500ms, 5s, 2m, 1h)", &s));
  Result<std::chrono::milliseconds> d = ParseDuration(s);
  if (!d.ok()) return v.Fail(d.status().message());
  *out = *d;
  return Status::Ok();
}

// A name through one of the parse functions of the enum (ParseKvDtype, ParseEvictionPolicy, ...).
template <typename T, typename ParseFn>
Status ReadNamed(const Value& v, std::string_view what, ParseFn parse, T* out) {
  std::string s;
  KVMESH_RETURN_IF_ERROR(ScalarText(v, what, &s));
  Result<T> r = parse(s);
  if (!r.ok()) return v.Fail(r.status().message());
  *out = *r;
  return Status::Ok();
}

Status ReadShares(const Value& v, std::vector<double>* out) {
  out->clear();
  if (v.node.IsNull()) return Status::Ok();
  if (!v.node.IsSequence()) return v.Expected("a list of numbers such as [0.25, 0.75]");
  for (std::size_t i = 0; i < v.node.size(); ++i) {
    const YAML::Node element = v.node[i];
    const std::string key = StrCat(v.key, "[", i, "]");
    const int line = LineOf(element) > 0 ? LineOf(element) : v.line;
    v.reader.Record(key, line);
    double share = 0;
    KVMESH_RETURN_IF_ERROR(ReadDoubleOf(Value{element, key, line, v.reader}, element, &share));
    out->push_back(share);
  }
  return Status::Ok();
}

using FieldReader = Status (*)(const Value&, NodeConfig&);
struct Field {
  std::string_view name;
  FieldReader read;
};
struct Section {
  std::string_view name;
  std::span<const Field> fields;
};

// The schema: every key of every section, in the order of configs/kvnode.yaml.
const Field kTopLevelFields[] = {
    {"node_id", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.node_id); }},
    {"data_dir", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.data_dir); }},
    {"device",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "a device (auto, cpu, cuda:N, emulated)", ParseDeviceSelection,
                        &c.device);
     }},
    {"tensor_parallel_size",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.tensor_parallel_size); }},
};

const Field kModelFields[] = {
    {"preset", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.model.preset); }},
    {"hf_config", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.model.hf_config); }},
    {"revision", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.model.revision); }},
};

const Field kKvCacheFields[] = {
    {"dtype",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "a cache dtype", ParseKvDtype, &c.kv_cache.cache.dtype);
     }},
    {"kv_layout",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "HND or NHD", ParseKvLayout, &c.kv_cache.cache.kv_layout);
     }},
    {"tokens_per_block",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.kv_cache.cache.tokens_per_block); }},
    {"free_gpu_memory_fraction",
     [](const Value& v, NodeConfig& c) {
       return ReadDouble(v, &c.kv_cache.cache.free_gpu_memory_fraction);
     }},
    {"max_tokens",
     [](const Value& v, NodeConfig& c) {
       return ReadOptionalCount(v, &c.kv_cache.cache.max_tokens);
     }},
    {"pool_shares",
     [](const Value& v, NodeConfig& c) { return ReadShares(v, &c.kv_cache.cache.pool_shares); }},
    {"enable_block_reuse",
     [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.kv_cache.enable_block_reuse); }},
    {"enable_partial_reuse",
     [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.kv_cache.enable_partial_reuse); }},
    {"eviction_policy",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "learned, priority-lru or lru", ParseEvictionPolicy,
                        &c.kv_cache.eviction_policy);
     }},
    {"host_cache_size",
     [](const Value& v, NodeConfig& c) { return ReadBytes(v, &c.kv_cache.host_cache_size); }},
    {"secondary_offload_min_priority",
     [](const Value& v, NodeConfig& c) {
       return ReadInt(v, &c.kv_cache.secondary_offload_min_priority);
     }},
    {"event_buffer_max_size",
     [](const Value& v, NodeConfig& c) { return ReadCount(v, &c.kv_cache.event_buffer_max_size); }},
    {"copy_threads",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.kv_cache.copy_threads); }},
    {"nvfp4_global_scale",
     [](const Value& v, NodeConfig& c) {
       return ReadOptionalFloat(v, &c.kv_cache.cache.nvfp4_global_scale);
     }},
    {"nvfp4_expected_amax",
     [](const Value& v, NodeConfig& c) {
       return ReadOptionalFloat(v, &c.kv_cache.cache.nvfp4_expected_amax);
     }},
    {"fp8_per_tensor_scale",
     [](const Value& v, NodeConfig& c) {
       return ReadOptionalFloat(v, &c.kv_cache.cache.fp8_per_tensor_scale);
     }},
};

const Field kDiskTierFields[] = {
    {"enabled", [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.disk_tier.enabled); }},
    {"path", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.disk_tier.path); }},
    {"capacity", [](const Value& v, NodeConfig& c) { return ReadBytes(v, &c.disk_tier.capacity); }},
    {"durability",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "none, flush or wal", ParseDiskDurability, &c.disk_tier.durability);
     }},
    {"flush_interval",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.disk_tier.flush_interval); }},
    {"wal_sync", [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.disk_tier.wal_sync); }},
    {"on_damage",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "move_aside or stay_off", ParseDiskDamagePolicy, &c.disk_tier.on_damage);
     }},
    {"verify_checksums",
     [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.disk_tier.verify_checksums); }},
    {"direct_io",
     [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.disk_tier.direct_io); }},
    {"write_buffer",
     [](const Value& v, NodeConfig& c) { return ReadBytes(v, &c.disk_tier.write_buffer); }},
    {"block_cache",
     [](const Value& v, NodeConfig& c) { return ReadBytes(v, &c.disk_tier.block_cache); }},
    {"background_jobs",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.disk_tier.background_jobs); }},
};

const Field kControlFields[] = {
    {"unix_socket",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.control.unix_socket); }},
    {"tcp_listen",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.control.tcp_listen); }},
    {"secret", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.control.secret); }},
    {"secret_env",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.control.secret_env); }},
    {"secret_file",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.control.secret_file); }},
    {"second_secret_file",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.control.second_secret_file); }},
    {"max_frame_size",
     [](const Value& v, NodeConfig& c) { return ReadBytes(v, &c.control.max_frame_size); }},
    {"handshake_timeout",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.control.handshake_timeout); }},
    {"idle_timeout",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.control.idle_timeout); }},
    {"request_timeout",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.control.request_timeout); }},
    {"max_connections",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.control.max_connections); }},
    {"max_inflight_per_connection",
     [](const Value& v, NodeConfig& c) {
       return ReadInt(v, &c.control.max_inflight_per_connection);
     }},
    {"max_inflight_total",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.control.max_inflight_total); }},
    {"io_threads", [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.control.io_threads); }},
    {"worker_threads",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.control.worker_threads); }},
    {"busy_poll_us",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.control.busy_poll_us); }},
};

const Field kMetricsFields[] = {
    {"listen", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.metrics.listen); }},
};

const Field kShutdownFields[] = {
    {"drain_timeout",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.shutdown.drain_timeout); }},
    {"flush_to_disk",
     [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.shutdown.flush_to_disk); }},
};

const Field kPeerFields[] = {
    {"enabled", [](const Value& v, NodeConfig& c) { return ReadBool(v, &c.peer.enabled); }},
    {"fetch_deadline",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.peer.fetch_deadline); }},
    {"staging_size",
     [](const Value& v, NodeConfig& c) { return ReadBytes(v, &c.peer.staging_size); }},
    {"ucx_tls", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.peer.ucx_tls); }},
    {"ucx_net_devices",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.peer.ucx_net_devices); }},
    {"busy_poll_us",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.peer.busy_poll_us); }},
    {"transfer_lanes",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.peer.transfer_lanes); }},
};

const Field kLoggingFields[] = {
    {"level", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.logging.level); }},
    {"format", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.logging.format); }},
};

// A list of strings (cluster.etcd.endpoints).
Status ReadStringList(const Value& v, std::vector<std::string>* out) {
  out->clear();
  if (v.node.IsNull()) return Status::Ok();
  if (!v.node.IsSequence()) return v.Expected("a list of strings such as [\"127.0.0.1:2379\"]");
  for (std::size_t i = 0; i < v.node.size(); ++i) {
    const YAML::Node element = v.node[i];
    const std::string key = StrCat(v.key, "[", i, "]");
    const int line = LineOf(element) > 0 ? LineOf(element) : v.line;
    v.reader.Record(key, line);
    std::string text;
    KVMESH_RETURN_IF_ERROR(ReadString(Value{element, key, line, v.reader}, &text));
    out->push_back(std::move(text));
  }
  return Status::Ok();
}

// cluster.peers: a list of {node_id, address} maps; any other key is an error.
Status ReadPeers(const Value& v, std::vector<StaticPeer>* out) {
  out->clear();
  if (v.node.IsNull()) return Status::Ok();
  if (!v.node.IsSequence()) {
    return v.Expected("a list of {node_id, address} maps");
  }
  for (std::size_t i = 0; i < v.node.size(); ++i) {
    const YAML::Node element = v.node[i];
    const std::string key = StrCat(v.key, "[", i, "]");
    const int line = LineOf(element) > 0 ? LineOf(element) : v.line;
    v.reader.Record(key, line);
    if (!element.IsMap()) return v.reader.Error(line, key, "expected a map {node_id, address}");
    StaticPeer peer;
    for (auto it = element.begin(); it != element.end(); ++it) {
      const YAML::Node name_node = it->first;
      const YAML::Node value = it->second;
      const int at = LineOf(name_node) > 0 ? LineOf(name_node) : line;
      const std::string name = name_node.IsScalar() ? name_node.Scalar() : "";
      const std::string field = StrCat(key, ".", name);
      v.reader.Record(field, at);
      const Value fv{value, field, at, v.reader};
      if (name == "node_id") {
        KVMESH_RETURN_IF_ERROR(ReadString(fv, &peer.node_id));
      } else if (name == "address") {
        KVMESH_RETURN_IF_ERROR(ReadString(fv, &peer.address));
      } else {
        return v.reader.ErrorAt(
            at, StrCat("unknown key '", name, "' in ", key, " (known keys: node_id, address)"));
      }
    }
    out->push_back(std::move(peer));
  }
  return Status::Ok();
}

const Field kClusterFields[] = {
    {"advertise",
     [](const Value& v, NodeConfig& c) { return ReadString(v, &c.cluster.advertise); }},
    {"membership",
     [](const Value& v, NodeConfig& c) {
       return ReadNamed(v, "none, static or etcd", ParseMembershipKind, &c.cluster.membership);
     }},
    {"peers", [](const Value& v, NodeConfig& c) { return ReadPeers(v, &c.cluster.peers); }},
};

const Field kEtcdFields[] = {
    {"endpoints",
     [](const Value& v, NodeConfig& c) { return ReadStringList(v, &c.cluster.etcd.endpoints); }},
    {"lease_ttl_s",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.cluster.etcd.lease_ttl_s); }},
    {"prefix", [](const Value& v, NodeConfig& c) { return ReadString(v, &c.cluster.etcd.prefix); }},
    {"poll_interval",
     [](const Value& v, NodeConfig& c) { return ReadDuration(v, &c.cluster.etcd.poll_interval); }},
};

const Field kDirectoryFields[] = {
    {"batch_ms",
     [](const Value& v, NodeConfig& c) { return ReadInt(v, &c.cluster.directory.batch_ms); }},
    {"lookup_timeout",
     [](const Value& v, NodeConfig& c) {
       return ReadDuration(v, &c.cluster.directory.lookup_timeout);
     }},
    {"max_batch_events",
     [](const Value& v, NodeConfig& c) {
       return ReadInt(v, &c.cluster.directory.max_batch_events);
     }},
    {"resync_interval",
     [](const Value& v, NodeConfig& c) {
       return ReadDuration(v, &c.cluster.directory.resync_interval);
     }},
};

// A name with a dot is a map inside the section before its last dot ("cluster.etcd").
const Section kSections[] = {
    {"model", kModelFields},
    {"kv_cache", kKvCacheFields},
    {"disk_tier", kDiskTierFields},
    {"control", kControlFields},
    {"metrics", kMetricsFields},
    {"shutdown", kShutdownFields},
    {"peer", kPeerFields},
    {"logging", kLoggingFields},
    {"cluster", kClusterFields},
    {"cluster.etcd", kEtcdFields},
    {"cluster.directory", kDirectoryFields},
};

// The map a section's key sits in: "" for the top level, "cluster" for "cluster.etcd".
std::string_view ParentOf(std::string_view section) {
  const std::size_t dot = section.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : section.substr(0, dot);
}

// Lower case with '-' as '_': how a near miss is compared.
std::string Normalized(std::string_view s) {
  std::string n = AsciiLower(s);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

// Edit distance with adjacent transpositions (optimal string alignment).
std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Every key of the schema as (its map: "" for the top level, its path).
std::vector<std::pair<std::string, std::string>> AllKeys() {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const Field& f : kTopLevelFields) keys.emplace_back("", std::string(f.name));
  for (const Section& s : kSections) {
    keys.emplace_back(std::string(ParentOf(s.name)), std::string(s.name));
    for (const Field& f : s.fields) keys.emplace_back(s.name, StrCat(s.name, ".", f.name));
  }
  return keys;
}

std::string_view LastComponent(std::string_view path) {
  const std::size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// "unknown key 'tokens_per_blok' in kv_cache (did you mean tokens_per_block?)": a near miss in
// the same map first, then the same or a near name elsewhere, else the keys of the map.
std::string UnknownKeyMessage(std::string_view name, std::string_view section) {
  const std::string wanted = Normalized(name);
  const std::size_t threshold = std::max<std::size_t>(1, std::min<std::size_t>(3, name.size() / 3));
  const auto keys = AllKeys();
  std::string best;
  std::size_t best_distance = threshold + 1;
  std::vector<std::string> here;
  for (const bool same_map : {true, false}) {
    for (const auto& [map, path] : keys) {
      if ((map == section) != same_map) continue;
      if (same_map) here.emplace_back(LastComponent(path));
      const std::size_t d = EditDistance(wanted, LastComponent(path));
      if (d < best_distance) {
        best_distance = d;
        best = same_map ? std::string(LastComponent(path)) : path;
      }
    }
    if (!best.empty()) break;
  }
  const std::string where = section.empty() ? " at the top level" : StrCat(" in ", section);
  if (!best.empty()) {
    return StrCat("unknown key '", name, "'", where, " (did you mean ", best, "?)");
  }
  return StrCat("unknown key '", name, "'", where, " (known keys: ", StrJoin(here, ", "), ")");
}

const Field* FindField(std::span<const Field> fields, std::string_view name) {
  for (const Field& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The section `name` inside the map `parent` ("" for the top level).
const Section* FindSection(std::string_view parent, std::string_view name) {
  const std::string full = parent.empty() ? std::string(name) : StrCat(parent, ".", name);
  for (const Section& s : kSections) {
    if (s.name == full) return &s;
  }
  return nullptr;
}

// Reads the pairs of `map` (the top level when section is ""): a section's own fields, or at the
// top level the top-level fields and the sections.
Status ReadMap(const YAML::Node& map, std::string_view section, std::span<const Field> fields,
               Reader& reader, NodeConfig& config) {
  std::map<std::string, int> first_line;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies: the iterator yields a temporary pair of handles.
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const int line = LineOf(key_node);
    if (!key_node.IsScalar()) {
      return reader.ErrorAt(line, StrCat("a key must be a name, got ", Describe(key_node)));
    }
    const std::string& name = key_node.Scalar();
    const std::string key = section.empty() ? name : StrCat(section, ".", name);
    if (auto [seen, inserted] = first_line.emplace(name, line); !inserted) {
      return reader.ErrorAt(line,
                            StrCat("duplicate key '", key, "' (first at line ", seen->second, ")"));
    }
    if (const Field* f = FindField(fields, name)) {
      reader.Record(key, line);
      KVMESH_RETURN_IF_ERROR(f->read(Value{value, key, line, reader}, config));
      continue;
    }
    const Section* s = FindSection(section, name);
    if (s == nullptr) return reader.ErrorAt(line, UnknownKeyMessage(name, section));
    reader.Record(key, line);
    if (value.IsNull()) continue;  // every key commented out: all defaults
    if (!value.IsMap()) {
      return reader.Error(line, key, StrCat("expected a map of keys, got ", Describe(value)));
    }
    KVMESH_RETURN_IF_ERROR(ReadMap(value, s->name, s->fields, reader, config));
  }
  return Status::Ok();
}

// Where each document of a YAML stream starts (the mark of its first node), without building it.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;

  void OnDocumentStart(const YAML::Mark& /*mark*/) override { first_ = true; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { Node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t /*anchor*/) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                const std::string& /*value*/) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/,
                       YAML::anchor_t /*anchor*/, YAML::EmitterStyle::value /*style*/) override {
    Node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t /*anchor*/,
                  YAML::EmitterStyle::value /*style*/) override {
    Node(mark);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark) {
    if (first_) starts.push_back(mark);
    first_ = false;
  }
  bool first_ = false;
};

// The one document of the text (null when there is none). Not YAML::LoadAll: yaml-cpp 0.7 (Debian
// 12) loops on a token that no node starts with, such as a ',' outside brackets (the text ","):
// each document it reads there is an empty one that does not consume the token, and LoadAll
// appends them without end, allocating until the process dies (yaml-cpp issue 1040, fixed after
// 0.8; found by fuzz/node_config). So the stream is read for at most two documents, and a second
// one that starts where the first did is that token, reported as invalid YAML.
Result<YAML::Node> LoadOneDocument(const std::string& text, const Reader& reader) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts events;
    for (int i = 0; i < 2 && parser.HandleNextDocument(events); ++i) {
    }
    if (events.starts.size() > 1) {
      const YAML::Mark& second = events.starts[1];
      const int line = second.line >= 0 ? second.line + 1 : 0;
      if (second.pos == events.starts[0].pos) {
        const auto at = static_cast<std::size_t>(std::max(second.pos, 0));
        return reader.ErrorAt(line, StrCat("invalid YAML: unexpected '",
                                           at < text.size() ? text.substr(at, 1) : "", "'"));
      }
      return reader.ErrorAt(line, "a second YAML document (after ---): a config is one document");
    }
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return reader.ErrorAt(e.mark.line >= 0 ? e.mark.line + 1 : 0, StrCat("invalid YAML: ", e.msg));
  }
}

Status ReadDocument(std::string_view yaml_text, Reader& reader, NodeConfig& config) {
  KVMESH_ASSIGN_OR_RETURN(const YAML::Node document,
                          LoadOneDocument(std::string(yaml_text), reader));
  if (!document.IsDefined() || document.IsNull()) return Status::Ok();
  if (!document.IsMap()) {
    return reader.ErrorAt(LineOf(document),
                          StrCat("expected a map of keys, got ", Describe(document)));
  }
  return ReadMap(document, "", kTopLevelFields, reader, config);
}

}  // namespace

Result<NodeConfig> ParseNodeConfig(std::string_view yaml_text, std::string_view source,
                                   const std::string& base_dir) {
  Reader reader(source);
  NodeConfig config;
  KVMESH_RETURN_IF_ERROR(ReadDocument(yaml_text, reader, config));
  // model: preset | hf_config — a config.json given alone replaces the default preset.
  if (!config.model.hf_config.empty() && !reader.Seen("model.preset")) config.model.preset.clear();
  ResolveConfigPaths(base_dir, &config);
  if (auto problem = FindConfigProblem(config)) {
    return reader.Error(reader.LineOf(problem->key), problem->key, problem->message);
  }
  return config;
}

}  // namespace kvmesh
