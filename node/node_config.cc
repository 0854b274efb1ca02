// NodeConfig: the device selection, the checks (NodeConfig::Validate), path resolution and
// LoadNodeConfig. The YAML reader is node_config_yaml.cc.
#include "node/node_config.h"

#include <sys/un.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <tuple>

#include "common/strings.h"
#include "node/node_config_internal.h"
#include "pool/model_presets.h"

namespace kvmesh {
namespace node_config_internal {
namespace {

constexpr std::int64_t kMaxFrameSizeLimit = std::int64_t{1} << 30;
constexpr std::int32_t kMaxBusyPollUs = 10000;
constexpr std::int32_t kMaxTransferLanes = 16;            // TransferEngineOptions::lanes
constexpr int kMaxOffloadMinPriority = kMaxPriority + 1;  // 101: nothing is offloaded
constexpr std::size_t kMinSecretBytes = 16;
// sun_path holds the path and its terminating NUL.
constexpr std::size_t kMaxUnixSocketPath = sizeof(sockaddr_un::sun_path) - 1;

using Problem = std::optional<ConfigProblem>;

Problem At(std::string key, std::string message) {
  return ConfigProblem{std::move(key), std::move(message)};
}

// The CacheConfig field a CacheConfig::Validate message starts with, as a key of the file.
std::string CacheFieldKey(std::string_view field) {
  if (field == "host_budget_bytes") return "kv_cache.host_cache_size";
  if (field == "disk_budget_bytes") return "disk_tier.capacity";
  return StrCat("kv_cache.", field);
}

// CacheConfig::Validate names the field first ("tokens_per_block 3 is not ...",
// "pool_shares[1] 0 must be ..."); the key takes the field's place in the message.
Problem CheckCache(const NodeConfig& c) {
  const Status s = c.EffectiveCacheConfig().Validate();
  if (s.ok()) return std::nullopt;
  const std::string& text = s.message();
  const std::size_t space = text.find(' ');
  const std::string_view field = std::string_view(text).substr(0, space);
  std::string_view rest =
      space == std::string::npos ? "" : std::string_view(text).substr(space + 1);
  const bool names_value = !rest.empty() && !rest.starts_with("and ");
  return At(CacheFieldKey(field), std::string(names_value ? rest : std::string_view(text)));
}

Problem CheckTopLevel(const NodeConfig& c) {
  if (c.data_dir.empty()) return At("data_dir", "must not be empty");
  if (c.device.kind == DeviceSelection::Kind::kCuda && c.device.index < 0) {
    return At("device", StrCat("cuda:", c.device.index, " is not a device index"));
  }
  if (c.tensor_parallel_size < 1) {
    return At("tensor_parallel_size", StrCat(c.tensor_parallel_size, " must be at least 1"));
  }
  return std::nullopt;
}

Problem CheckModel(const ModelSelection& m) {
  if (!m.preset.empty() && !m.hf_config.empty()) {
    return At("model.hf_config", StrCat("model.preset '", m.preset,
                                        "' is given too: give one of them (preset: \"\" to use "
                                        "hf_config)"));
  }
  if (m.preset.empty() && m.hf_config.empty()) {
    return At("model.preset", "neither model.preset nor model.hf_config is given: give one");
  }
  if (!m.preset.empty() && !ModelPreset(m.preset).ok()) {
    return At("model.preset",
              StrCat("unknown preset '", m.preset, "': known presets are ", ListPresets()));
  }
  return std::nullopt;
}

// A scale of another dtype than the one configured would be ignored: refused instead.
Problem CheckScaleDtype(const CacheConfig& c) {
  const auto other = [&](std::string_view key, std::string_view owner) {
    return At(StrCat("kv_cache.", key),
              StrCat("a scale of dtype ", owner, ", and kv_cache.dtype is ", KvDtypeName(c.dtype),
                     " (it would be ignored): remove it, or set dtype: ", owner));
  };
  if (c.dtype != KvDtype::kFP8PerTensor && c.fp8_per_tensor_scale) {
    return other("fp8_per_tensor_scale", "fp8_per_tensor");
  }
  if (c.dtype != KvDtype::kNVFP4 && c.nvfp4_global_scale)
    return other("nvfp4_global_scale", "nvfp4");
  if (c.dtype != KvDtype::kNVFP4 && c.nvfp4_expected_amax) {
    return other("nvfp4_expected_amax", "nvfp4");
  }
  return std::nullopt;
}

Problem CheckKvCache(const NodeConfig& c) {
  if (Problem p = CheckCache(c)) return p;
  if (Problem p = CheckScaleDtype(c.kv_cache.cache)) return p;
  const KvCacheSection& k = c.kv_cache;
  if (k.secondary_offload_min_priority < kMinPriority ||
      k.secondary_offload_min_priority > kMaxOffloadMinPriority) {
    return At("kv_cache.secondary_offload_min_priority",
              StrCat(k.secondary_offload_min_priority, " is not in ", kMinPriority, "..",
                     kMaxOffloadMinPriority, " (", kMaxOffloadMinPriority, ": offload nothing)"));
  }
  if (k.event_buffer_max_size <= 0) {
    return At("kv_cache.event_buffer_max_size", StrCat(k.event_buffer_max_size, " must be > 0"));
  }
  if (k.copy_threads < 1) {
    return At("kv_cache.copy_threads", StrCat(k.copy_threads, " must be at least 1"));
  }
  return std::nullopt;
}

Problem CheckDiskTier(const DiskTierSection& d) {
  if (d.enabled && d.capacity <= 0) {
    return At("disk_tier.capacity", StrCat(d.capacity,
                                           " must be > 0 while the disk tier is enabled (or set "
                                           "disk_tier.enabled: false)"));
  }
  if (d.flush_interval.count() <= 0) {
    return At("disk_tier.flush_interval", StrCat(d.flush_interval.count(), " ms must be > 0"));
  }
  if (d.write_buffer < kMinDiskWriteBuffer) {
    return At("disk_tier.write_buffer",
              StrCat(d.write_buffer, " bytes is less than 256 KiB, the smallest memtable"));
  }
  if (d.block_cache < 0) {
    return At("disk_tier.block_cache", StrCat(d.block_cache, " must be >= 0 (0: none)"));
  }
  if (d.background_jobs < 1) {
    return At("disk_tier.background_jobs", StrCat(d.background_jobs, " must be at least 1"));
  }
  return std::nullopt;
}

bool IsPort(std::string_view s) {
  int port = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), port);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size() && port >= 0 &&
         port <= 65535 && s.size() <= 5;
}

// "" when `s` is host:port ("127.0.0.1:7420", "localhost:0", "[::1]:7420"), else the reason.
std::string HostPortProblem(std::string_view s) {
  const std::size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return "expected host:port, e.g. 127.0.0.1:7420";
  const std::string_view host = s.substr(0, colon);
  const std::string_view port = s.substr(colon + 1);
  if (!IsPort(port)) return StrCat("port '", port, "' is not a number in 0..65535");
  if (host.empty()) {
    return "the host is missing (0.0.0.0 for every interface, 127.0.0.1 for loopback)";
  }
  if (const std::size_t scheme = s.find("://"); scheme != std::string_view::npos) {
    return StrCat("write host:port without the scheme '", s.substr(0, scheme + 3), "'");
  }
  const bool bracketed = host.front() == '[' && host.back() == ']' && host.size() > 2;
  if (!bracketed && host.find_first_of("[]: \t") != std::string_view::npos) {
    return StrCat("host '", host, "' is not a host name or address (IPv6: [::1]:7420)");
  }
  return "";
}

// An address others dial: a host:port, neither port 0 nor an unspecified (every-interface) host.
std::string DialedAddressProblem(std::string_view s) {
  if (std::string why = HostPortProblem(s); !why.empty()) return why;
  const std::string_view host = s.substr(0, s.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host == "[0:0:0:0:0:0:0:0]") {
    return StrCat("host ", host,
                  " means every interface: others cannot dial it (give this host's name or "
                  "address)");
  }
  if (s.ends_with(":0")) return "port 0 cannot be reached";
  return "";
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  for (char ch : s) {
    const bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                    (ch >= '0' && ch <= '9') || ch == '_';
    if (!ok) return false;
  }
  return true;
}

Problem CheckSecret(const ControlSection& c) {
  const std::pair<const char*, const std::string*> sources[] = {
      {"secret", &c.secret}, {"secret_env", &c.secret_env}, {"secret_file", &c.secret_file}};
  const char* first = nullptr;
  for (const auto& [name, value] : sources) {
    if (value->empty()) continue;
    if (first != nullptr) {
      return At(StrCat("control.", name),
                StrCat("control.", first,
                       " is given too: give at most one of secret, secret_env, secret_file"));
    }
    first = name;
  }
  if (!c.secret.empty() && c.secret.size() < kMinSecretBytes) {
    return At("control.secret",
              StrCat("is ", c.secret.size(), " bytes; a secret needs at least ", kMinSecretBytes));
  }
  if (!c.secret_env.empty() && !IsEnvName(c.secret_env)) {
    return At("control.secret_env",
              StrCat("'", c.secret_env, "' is not an environment variable name"));
  }
  return std::nullopt;
}

Problem CheckControl(const NodeConfig& config) {
  const ControlSection& c = config.control;
  const std::string socket =
      c.unix_socket.empty() ? StrCat(config.data_dir, "/kvnode.sock") : c.unix_socket;
  if (socket.size() > kMaxUnixSocketPath) {
    return At("control.unix_socket",
              StrCat("'", socket, "' is ", socket.size(), " bytes, more than the ",
                     kMaxUnixSocketPath, " a Unix socket path may have",
                     c.unix_socket.empty() ? " (the default <data_dir>/kvnode.sock): set it" : ""));
  }
  if (!c.tcp_listen.empty()) {
    if (std::string why = HostPortProblem(c.tcp_listen); !why.empty()) {
      return At("control.tcp_listen", StrCat("'", c.tcp_listen, "': ", why));
    }
  }
  if (Problem p = CheckSecret(c)) return p;
  if (c.max_frame_size <= 0 || c.max_frame_size > kMaxFrameSizeLimit) {
    return At("control.max_frame_size", StrCat(c.max_frame_size, " bytes is not in 1..1GiB"));
  }
  const std::pair<const char*, std::chrono::milliseconds> timeouts[] = {
      {"handshake_timeout", c.handshake_timeout},
      {"idle_timeout", c.idle_timeout},
      {"request_timeout", c.request_timeout}};
  for (const auto& [name, value] : timeouts) {
    if (value.count() <= 0) {
      return At(StrCat("control.", name), StrCat(value.count(), "ms must be positive"));
    }
  }
  const std::pair<const char*, std::int32_t> limits[] = {
      {"max_connections", c.max_connections},
      {"max_inflight_per_connection", c.max_inflight_per_connection},
      {"max_inflight_total", c.max_inflight_total},
      {"io_threads", c.io_threads},
      {"worker_threads", c.worker_threads}};
  for (const auto& [name, value] : limits) {
    if (value < 1) return At(StrCat("control.", name), StrCat(value, " must be at least 1"));
  }
  if (c.busy_poll_us < 0 || c.busy_poll_us > kMaxBusyPollUs) {
    return At("control.busy_poll_us",
              StrCat(c.busy_poll_us, " is not in 0..", kMaxBusyPollUs, " microseconds"));
  }
  return std::nullopt;
}

bool IsOneOf(std::string_view value, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (value == n) return true;
  }
  return false;
}

Problem CheckMetrics(const MetricsSection& m) {
  if (m.listen.empty()) return std::nullopt;
  if (std::string why = HostPortProblem(m.listen); !why.empty()) {
    return At("metrics.listen", StrCat("'", m.listen, "': ", why));
  }
  return std::nullopt;
}

Problem CheckShutdownAndLogging(const NodeConfig& c) {
  if (c.peer.enabled && c.peer.fetch_deadline.count() <= 0) {
    return At("peer.fetch_deadline", StrCat(c.peer.fetch_deadline.count(), "ms must be positive"));
  }
  if (c.peer.busy_poll_us < 0 || c.peer.busy_poll_us > kMaxBusyPollUs) {
    return At("peer.busy_poll_us",
              StrCat(c.peer.busy_poll_us, " is not in 0..", kMaxBusyPollUs, " microseconds"));
  }
  if (c.peer.transfer_lanes < 1 || c.peer.transfer_lanes > kMaxTransferLanes) {
    return At("peer.transfer_lanes",
              StrCat(c.peer.transfer_lanes, " is not in 1..", kMaxTransferLanes));
  }
  if (c.peer.enabled && c.peer.staging_size <= 0) {
    return At("peer.staging_size", StrCat(c.peer.staging_size, " must be positive"));
  }
  if (c.peer.enabled && c.control.tcp_listen.empty()) {
    return At("peer.enabled", "peers need control.tcp_listen (they connect over TCP)");
  }
  if (c.shutdown.drain_timeout.count() < 0) {
    return At("shutdown.drain_timeout",
              StrCat(c.shutdown.drain_timeout.count(), "ms must not be negative"));
  }
  if (!IsOneOf(c.logging.level, {"trace", "debug", "info", "warn", "error", "off"})) {
    return At("logging.level",
              StrCat("'", c.logging.level, "' is not one of trace, debug, info, warn, error, off"));
  }
  if (!IsOneOf(c.logging.format, {"text", "json"})) {
    return At("logging.format", StrCat("'", c.logging.format, "' is not one of text, json"));
  }
  return std::nullopt;
}

Problem CheckStaticPeers(const ClusterSection& c) {
  for (std::size_t i = 0; i < c.peers.size(); ++i) {
    const StaticPeer& p = c.peers[i];
    const std::string key = StrCat("cluster.peers[", i, "]");
    if (p.node_id.empty()) return At(key + ".node_id", "must not be empty");
    if (std::string why = DialedAddressProblem(p.address); !why.empty()) {
      return At(key + ".address", StrCat("'", p.address, "': ", why));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (c.peers[j].node_id == p.node_id) {
        return At(key + ".node_id",
                  StrCat("'", p.node_id, "' is listed twice (also cluster.peers[", j, "])"));
      }
    }
  }
  return std::nullopt;
}

Problem CheckEtcd(const ClusterSection& c) {
  const EtcdSection& e = c.etcd;
  if (c.membership == MembershipKind::kEtcd && e.endpoints.empty()) {
    return At("cluster.etcd.endpoints", "must list at least one host:port with membership: etcd");
  }
  for (std::size_t i = 0; i < e.endpoints.size(); ++i) {
    if (std::string why = HostPortProblem(e.endpoints[i]); !why.empty()) {
      return At(StrCat("cluster.etcd.endpoints[", i, "]"), StrCat("'", e.endpoints[i], "': ", why));
    }
  }
  if (e.lease_ttl_s < 2 || e.lease_ttl_s > 3600) {
    return At("cluster.etcd.lease_ttl_s", StrCat(e.lease_ttl_s, " is not in 2..3600 seconds"));
  }
  if (e.prefix.empty() || e.prefix.back() != '/') {
    return At("cluster.etcd.prefix", StrCat("'", e.prefix, "' must end with '/'"));
  }
  if (e.poll_interval.count() <= 0) {
    return At("cluster.etcd.poll_interval", StrCat(e.poll_interval.count(), "ms must be positive"));
  }
  return std::nullopt;
}

Problem CheckCluster(const NodeConfig& config) {
  const ClusterSection& c = config.cluster;
  if (!c.advertise.empty()) {
    if (std::string why = DialedAddressProblem(c.advertise); !why.empty()) {
      return At("cluster.advertise", StrCat("'", c.advertise, "': ", why));
    }
  }
  if (c.membership != MembershipKind::kNone && config.control.tcp_listen.empty()) {
    return At("cluster.membership",
              StrCat(MembershipKindName(c.membership),
                     " needs control.tcp_listen: peers reach each other over TCP"));
  }
  const std::string_view listen = config.control.tcp_listen;
  const std::string_view listen_host = listen.substr(0, listen.rfind(':'));
  if (c.membership != MembershipKind::kNone && c.advertise.empty() &&
      (listen_host == "0.0.0.0" || listen_host == "[::]")) {
    return At("cluster.advertise",
              StrCat("not given, and control.tcp_listen ", listen,
                     " listens on every interface: the peers would be told ", listen_host,
                     ", which they cannot dial (give this host's name or address and port)"));
  }
  if (Problem p = CheckStaticPeers(c)) return p;
  if (!c.peers.empty() && c.membership != MembershipKind::kStatic) {
    return At("cluster.peers",
              StrCat("listed, but cluster.membership is ", MembershipKindName(c.membership),
                     ": the peers list is the member list of membership: static only"));
  }
  if (Problem p = CheckEtcd(c)) return p;
  const DirectorySection& d = c.directory;
  if (d.batch_ms < 1 || d.batch_ms > 60000) {
    return At("cluster.directory.batch_ms", StrCat(d.batch_ms, " is not in 1..60000"));
  }
  if (d.lookup_timeout.count() <= 0) {
    return At("cluster.directory.lookup_timeout",
              StrCat(d.lookup_timeout.count(), "ms must be positive"));
  }
  if (d.max_batch_events < 1 || d.max_batch_events > (1 << 20)) {
    return At("cluster.directory.max_batch_events",
              StrCat(d.max_batch_events, " is not in 1..1048576"));
  }
  if (d.resync_interval.count() != 0 &&
      (d.resync_interval.count() < 100 || d.resync_interval.count() > 3600 * 1000)) {
    return At("cluster.directory.resync_interval",
              StrCat(d.resync_interval.count(), "ms is not 0 (off) or in 100ms..1h"));
  }
  return std::nullopt;
}

// A path written with ~ or $VAR: neither is expanded (the config is no shell), and the file would
// be looked for, or the directory made, under a folder literally named so.
Problem CheckPaths(const NodeConfig& c) {
  const std::pair<const char*, const std::string*> paths[] = {
      {"data_dir", &c.data_dir},
      {"model.hf_config", &c.model.hf_config},
      {"disk_tier.path", &c.disk_tier.path},
      {"control.unix_socket", &c.control.unix_socket},
      {"control.secret_file", &c.control.secret_file},
      {"control.second_secret_file", &c.control.second_secret_file}};
  for (const auto& [key, path] : paths) {
    for (const auto& part : std::filesystem::path(*path)) {
      const std::string name = part.string();
      if (name.starts_with("~") || name.find('$') != std::string::npos) {
        return At(key, StrCat("'", *path, "': ", name.starts_with("~") ? "~" : "$",
                              " is not expanded in a config: write the path out (absolute, or "
                              "relative to the config file's folder)"));
      }
    }
  }
  return std::nullopt;
}

std::string Resolved(const std::filesystem::path& base, const std::string& path) {
  if (path.empty()) return path;
  const std::filesystem::path p(path);
  if (p.is_absolute()) return path;
  return (base / p).lexically_normal().string();
}

}  // namespace

std::optional<ConfigProblem> FindConfigProblem(const NodeConfig& config) {
  if (Problem p = CheckTopLevel(config)) return p;
  if (Problem p = CheckModel(config.model)) return p;
  if (Problem p = CheckKvCache(config)) return p;
  if (Problem p = CheckDiskTier(config.disk_tier)) return p;
  if (Problem p = CheckControl(config)) return p;
  if (Problem p = CheckMetrics(config.metrics)) return p;
  if (Problem p = CheckShutdownAndLogging(config)) return p;
  if (Problem p = CheckPaths(config)) return p;
  return CheckCluster(config);
}

void ResolveConfigPaths(const std::string& base_dir, NodeConfig* config) {
  if (base_dir.empty()) return;
  const std::filesystem::path base(base_dir);
  for (std::string* path : {&config->data_dir, &config->model.hf_config, &config->disk_tier.path,
                            &config->control.unix_socket, &config->control.secret_file,
                            &config->control.second_secret_file}) {
    *path = Resolved(base, *path);
  }
}

}  // namespace node_config_internal

std::string DeviceSelection::ToString() const {
  switch (kind) {
    case Kind::kAuto: return "auto";
    case Kind::kCpu: return "cpu";
    case Kind::kCuda: return StrCat("cuda:", index);
    case Kind::kEmulated: return "emulated";
  }
  return "unknown";
}

Result<DeviceSelection> ParseDeviceSelection(std::string_view text) {
  const std::string s = AsciiLower(text);
  if (s == "auto") return DeviceSelection{DeviceSelection::Kind::kAuto, 0};
  if (s == "cpu") return DeviceSelection{DeviceSelection::Kind::kCpu, 0};
  if (s == "cuda") return DeviceSelection{DeviceSelection::Kind::kCuda, 0};
  if (s == "emulated") return DeviceSelection{DeviceSelection::Kind::kEmulated, 0};
  if (s.starts_with("cuda:")) {
    const std::string_view digits = std::string_view(s).substr(5);
    std::int32_t index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && digits.front() != '-' && ec == std::errc() &&
        end == digits.data() + digits.size()) {
      return DeviceSelection{DeviceSelection::Kind::kCuda, index};
    }
    return Status::InvalidArgument(
        StrCat("device '", text, "': the part after cuda: must be a device index, e.g. cuda:0"));
  }
  return Status::InvalidArgument(
      StrCat("device '", text, "' is not one of auto, cpu, cuda, cuda:N, emulated"));
}

Result<MembershipKind> ParseMembershipKind(std::string_view text) {
  if (text == "none") return MembershipKind::kNone;
  if (text == "static") return MembershipKind::kStatic;
  if (text == "etcd") return MembershipKind::kEtcd;
  return Status::InvalidArgument(StrCat("'", text, "' is not one of none, static, etcd"));
}

std::string_view MembershipKindName(MembershipKind kind) {
  switch (kind) {
    case MembershipKind::kNone: return "none";
    case MembershipKind::kStatic: return "static";
    case MembershipKind::kEtcd: return "etcd";
  }
  return "unknown";
}

Status NodeConfig::Validate() const {
  if (auto p = node_config_internal::FindConfigProblem(*this)) {
    return Status::InvalidArgument(StrCat(p->key, ": ", p->message));
  }
  return Status::Ok();
}

bool operator==(const KvCacheSection& a, const KvCacheSection& b) {
  // A field added to CacheConfig changes its size: compare it here, give it a key (the tables of
  // node_config_yaml.cc, configs/kvnode.yaml), then update the size.
  static_assert(sizeof(CacheConfig) == 96,
                "CacheConfig changed: compare the new field below and give it a config key");
  const auto cache = [](const CacheConfig& c) {
    return std::tie(c.dtype, c.kv_layout, c.tokens_per_block, c.free_gpu_memory_fraction,
                    c.max_tokens, c.pool_shares, c.host_budget_bytes, c.disk_budget_bytes,
                    c.nvfp4_global_scale, c.nvfp4_expected_amax, c.fp8_per_tensor_scale);
  };
  const auto section = [](const KvCacheSection& k) {
    return std::tie(k.enable_block_reuse, k.enable_partial_reuse, k.eviction_policy,
                    k.host_cache_size, k.secondary_offload_min_priority, k.event_buffer_max_size,
                    k.copy_threads);
  };
  return cache(a.cache) == cache(b.cache) && section(a) == section(b);
}

CacheConfig NodeConfig::EffectiveCacheConfig() const {
  CacheConfig c = kv_cache.cache;
  c.host_budget_bytes = kv_cache.host_cache_size;
  c.disk_budget_bytes = disk_tier.enabled ? disk_tier.capacity : 0;
  return c;
}

Result<NodeConfig> LoadNodeConfig(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) {
    const int err = errno;
    const std::string what = StrCat("cannot open config ", path, ": ", std::strerror(err));
    return err == ENOENT ? Status::NotFound(what) : Status::IoError(what);
  }
  std::string text;
  char buffer[1 << 14];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get()) != 0) {
    return Status::IoError(StrCat("cannot read config ", path, ": ", std::strerror(errno)));
  }
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return Status::IoError(StrCat("config ", path, ": ", ec.message()));
  return ParseNodeConfig(text, path, absolute.parent_path().string());
}

}  // namespace kvmesh
