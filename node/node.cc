#include "node/node.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "common/log.h"
#include "common/strings.h"
#include "common/units.h"
#include "kernels/backend.h"
#include "node/attached_pools.h"
#include "node/flush.h"
#include "node/holdings_snapshot.h"
#include "node/secret.h"
#include "pool/block_manager_plan.h"
#include "pool/hf_config.h"
#include "pool/model_presets.h"
#include "pool/primary_memory.h"

namespace kvmesh {
namespace {

constexpr const char* kVersion = "0.1.0";

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "kvnode";
  return buf;
}

// Creates and locks <dir>/LOCK (flock, exclusive, not blocking); writes our pid into it.
Result<int> LockDataDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::FailedPrecondition(
        StrCat("data_dir ", dir, " cannot be created: ", ec.message()));
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::FailedPrecondition(StrCat("data_dir ", dir, " is not a directory"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::FailedPrecondition(
        StrCat("data_dir ", dir, " is not writable: ", std::strerror(errno)));
  }
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::FailedPrecondition(StrCat("data_dir lock ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string holder = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "unknown";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      return Status::FailedPrecondition(
          StrCat("data_dir ", dir, " is held by another kvnode (pid ", holder, ")"));
    }
    return Status::FailedPrecondition(StrCat("data_dir lock ", path, ": ", std::strerror(err)));
  }
  const std::string pid = StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    KVMESH_LOG_WARN("data_dir lock file not written path {} error {}", path, std::strerror(errno));
  }
  return fd;
}

Result<ModelSpec> LoadModel(const ModelSelection& m) {
  Result<ModelSpec> spec =
      m.hf_config.empty() ? ModelPreset(m.preset) : LoadModelSpecFromHfConfig(m.hf_config);
  if (!spec.ok())
    return spec.status().WithContext(m.hf_config.empty() ? "model.preset" : "model.hf_config");
  if (!m.revision.empty()) spec->revision = m.revision;
  return spec;
}

std::string DeviceName(int device) { return StrCat("cuda:", device); }

// The first CUDA device of the pools (rank r on first + r), or -1 for host pools. `auto` takes the
// GPUs when this process sees enough of them for every rank, else the host (said in a log line).
Result<int> ResolveDevice(const DeviceSelection& d, int tp) {
  if (d.kind == DeviceSelection::Kind::kCpu || d.kind == DeviceSelection::Kind::kEmulated) {
    return -1;
  }
  const int count = CudaDeviceCount();
  if (d.kind == DeviceSelection::Kind::kAuto) {
    if (count >= tp) return 0;
    // The pools then take host memory (free_gpu_memory_fraction of it). With some GPUs seen that
    // is a warning; with none it is a CPU host, or a GPU host whose driver is not loaded: the GPU
    // host's config says `device: cuda:N`, which refuses to start then.
    if (count > 0) {
      KVMESH_LOG_WARN(
          "device auto chose cpu: tensor_parallel_size {} needs {} CUDA devices, {} visible; the "
          "pools are in host memory (device: cuda:0 refuses to start instead)",
          tp, tp, count);
    } else {
      KVMESH_LOG_INFO(
          "device auto chose cpu: no CUDA device visible; the pools are in host memory (device: "
          "cuda:0 refuses to start instead)");
    }
    return -1;
  }
  if (d.index + tp > count) {
    const std::string needs = tp == 1 ? StrCat("CUDA device ", d.index)
                                      : StrCat("CUDA devices ", d.index, "..", d.index + tp - 1,
                                               " (one per tensor-parallel rank)");
    return Status::FailedPrecondition(StrCat(
        "device ", d.ToString(), ": needs ", needs, "; this process sees ", count,
        count == 1 ? " device" : " devices", count == 0 ? " (no CUDA driver or no GPU)" : ""));
  }
  return d.index;
}

// The smallest free memory of the ranks' devices: every rank holds pools of the same size.
Result<std::int64_t> DeviceFreeBytes(int first_device, int tp) {
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  for (int r = 0; r < tp; ++r) {
    KVMESH_ASSIGN_OR_RETURN(const PrimaryMemory m, DetectDeviceMemory(first_device + r));
    least = std::min(least, m.free_bytes);
  }
  return least;
}

Result<std::int64_t> HostFreeBytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return Status::IoError(StrCat("cannot read /proc/meminfo: ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  KVMESH_ASSIGN_OR_RETURN(const PrimaryMemory m, ParseMeminfo(text.str()));
  return m.free_bytes;
}

std::string LayerRange(const std::vector<std::int32_t>& layers) {
  if (layers.empty()) return "-";
  bool contiguous = true;
  for (std::size_t i = 1; i < layers.size(); ++i) contiguous &= layers[i] == layers[i - 1] + 1;
  if (contiguous) return StrCat(layers.front(), "-", layers.back());
  return StrCat(layers.size(), " layers");
}

// The node's secrets from the config's sources: the one it presents and accepts, and the second
// one it also accepts (control.second_secret_file; a missing or empty file: none). Their warnings
// (a file readable by others) are logged here.
struct NodeSecrets {
  LoadedSecret secret;
  std::optional<LoadedSecret> second;
};

Result<NodeSecrets> LoadNodeSecrets(const ControlSection& c) {
  NodeSecrets s;
  KVMESH_ASSIGN_OR_RETURN(s.secret, LoadSecret({c.secret, c.secret_env, c.secret_file}));
  if (!c.second_secret_file.empty()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(c.second_secret_file, ec);
    if (!ec && size > 0) {
      Result<LoadedSecret> second = LoadSecret({"", "", c.second_secret_file});
      if (!second.ok()) return second.status().WithContext("control.second_secret_file");
      s.second = *std::move(second);
    }
  }
  for (const LoadedSecret* loaded : {&s.secret, s.second ? &*s.second : nullptr}) {
    if (loaded != nullptr && !loaded->warning.empty()) KVMESH_LOG_WARN("{}", loaded->warning);
  }
  return s;
}

ControlServerOptions ServerOptions(const NodeConfig& c, std::string node_id,
                                   const NodeSecrets& secrets, std::string unix_socket) {
  ControlServerOptions o;
  o.node_id = std::move(node_id);
  o.secret = secrets.secret.secret;
  if (secrets.second) o.second_secret = secrets.second->secret;
  o.unix_socket = std::move(unix_socket);
  o.tcp_listen = c.control.tcp_listen;
  o.max_frame_size = static_cast<std::uint32_t>(c.control.max_frame_size);
  o.handshake_timeout = c.control.handshake_timeout;
  o.idle_timeout = c.control.idle_timeout;
  o.request_timeout = c.control.request_timeout;
  o.max_connections = c.control.max_connections;
  o.max_inflight_per_connection = c.control.max_inflight_per_connection;
  o.max_inflight_total = c.control.max_inflight_total;
  o.io_threads = c.control.io_threads;
  o.worker_threads = c.control.worker_threads;
  o.busy_poll = std::chrono::microseconds(c.control.busy_poll_us);
  return o;
}

}  // namespace

Status CheckConfigForStart(const NodeConfig& c) {
  KVMESH_ASSIGN_OR_RETURN(const ModelSpec model, LoadModel(c.model));
  KVMESH_ASSIGN_OR_RETURN(const ModelSpec rank_model, RankModelSpec(model, c.tensor_parallel_size));
  // Memory as no bound (1 PiB free): what the config alone decides.
  constexpr std::int64_t kNoBound = std::int64_t{1} << 50;
  return BuildPoolPlan(rank_model, c.EffectiveCacheConfig(), kNoBound).status();
}

RocksDbTierOptions DiskTierOptions(const NodeConfig& c) {
  const DiskTierSection& k = c.disk_tier;
  RocksDbTierOptions d;
  d.path = k.path.empty() ? c.data_dir + "/rocksdb" : k.path;
  d.capacity_bytes = k.capacity;
  d.durability = k.durability;
  d.flush_after_ms = k.flush_interval.count();
  d.wal_sync = k.wal_sync;
  d.on_damage = k.on_damage;
  d.verify_block_checksums = k.verify_checksums;
  d.use_direct_io = k.direct_io;
  d.write_buffer_bytes = k.write_buffer;
  d.block_cache_bytes = k.block_cache;
  d.max_background_jobs = k.background_jobs;
  return d;
}

Result<std::unique_ptr<Node>> Node::Start(const NodeConfig& config) {
  std::unique_ptr<Node> node(new Node());
  Status st = node->Open(config);
  if (!st.ok()) {
    node->shut_down_ = true;  // nothing to drain: tear down what was built
    return st;
  }
  return node;
}

Status Node::Open(const NodeConfig& config) {
  KVMESH_RETURN_IF_ERROR(config.Validate());
  config_ = config;
  const NodeConfig& c = config_;
  KVMESH_ASSIGN_OR_RETURN(first_device_, ResolveDevice(c.device, c.tensor_parallel_size));
  const bool emulated = c.device.kind == DeviceSelection::Kind::kEmulated;
  description_.node_id = c.node_id.empty() ? HostName() : c.node_id;
  description_.version = kVersion;
  description_.device =
      emulated ? "emulated" : (first_device_ >= 0 ? DeviceName(first_device_) : "cpu");
  description_.data_dir = c.data_dir;
  description_.unix_socket =
      c.control.unix_socket.empty() ? c.data_dir + "/kvnode.sock" : c.control.unix_socket;
  description_.enable_block_reuse = c.kv_cache.enable_block_reuse;

  KVMESH_ASSIGN_OR_RETURN(lock_fd_, LockDataDir(c.data_dir));
  KVMESH_ASSIGN_OR_RETURN(const NodeSecrets secrets, LoadNodeSecrets(c.control));
  secret_origin_ = secrets.secret.origin;
  if (secrets.second) secret_origin_ += ", and a second one from " + secrets.second->origin;
  presented_secret_ = std::make_shared<PresentedSecret>(secrets.secret.secret);
  // The listeners first: a socket or port in use is refused before anything slow is done.
  KVMESH_ASSIGN_OR_RETURN(
      server_, ControlServer::Bind(
                   ServerOptions(c, description_.node_id, secrets, description_.unix_socket)));
  description_.tcp_listen = server_->tcp_address();
  metrics_ = std::make_unique<NodeMetrics>();
  KVMESH_RETURN_IF_ERROR(StartMetrics());

  KVMESH_ASSIGN_OR_RETURN(const ModelSpec model, LoadModel(c.model));
  KVMESH_ASSIGN_OR_RETURN(const ModelSpec rank_model, RankModelSpec(model, c.tensor_parallel_size));
  description_.model_name = model.name;
  description_.model_revision = model.revision;
  description_.num_layers = model.num_layers();
  description_.num_attention_heads = model.num_attention_heads;
  const LayerSpec& l0 = model.layers.front();
  model_summary_ =
      StrCat(model.name, ": ", model.num_layers(), " layers, ", model.num_attention_heads, " q / ",
             l0.num_kv_heads, " kv heads, head_dim ", l0.head_dim);

  // Each rank's pools get the free memory of one rank: its own device's, or a share of the host's.
  std::int64_t rank_free_bytes = 0;
  if (first_device_ >= 0) {
    KVMESH_ASSIGN_OR_RETURN(rank_free_bytes,
                            DeviceFreeBytes(first_device_, c.tensor_parallel_size));
  } else {
    KVMESH_ASSIGN_OR_RETURN(const std::int64_t free_bytes, HostFreeBytes());
    rank_free_bytes = free_bytes / c.tensor_parallel_size;
  }
  const CacheConfig cache = c.EffectiveCacheConfig();
  KVMESH_ASSIGN_OR_RETURN(plan_, BuildPoolPlan(rank_model, cache, rank_free_bytes));
  description_.dtype = std::string(KvDtypeName(cache.dtype));
  description_.kv_layout = std::string(KvLayoutName(cache.kv_layout));
  if (first_device_ >= 0) {
    KVMESH_ASSIGN_OR_RETURN(pools_,
                            NodePools::CreateDevice(plan_, c.tensor_parallel_size, first_device_));
  } else if (emulated) {
    emulated_device_ = std::make_unique<EmulatedDevice>();
    KVMESH_ASSIGN_OR_RETURN(
        pools_, NodePools::CreateEmulated(plan_, c.tensor_parallel_size, emulated_device_.get()));
  } else {
    KVMESH_ASSIGN_OR_RETURN(pools_, NodePools::CreateHost(plan_, c.tensor_parallel_size,
                                                          /*prefault=*/false));
  }

  TieredCacheOptions t;
  t.manager = FromPoolPlan(plan_);
  t.manager.pools = pools_.ManagerPools();
  if (c.tensor_parallel_size > 1) {
    t.manager.key_namespace.pool_group += StrCat("/tp", c.tensor_parallel_size);
  }
  t.manager.eviction_policy = c.kv_cache.eviction_policy;
  t.manager.event_capacity = static_cast<std::size_t>(c.kv_cache.event_buffer_max_size);
  t.manager.enable_partial_reuse = c.kv_cache.enable_partial_reuse;
  copy_pool_ = std::make_unique<ThreadPool>(c.kv_cache.copy_threads, "kvm-block-copy");
  t.env.pool_memory = pools_.views();
  t.env.copy_executor = copy_pool_.get();
  t.offload.host_capacity_bytes = c.kv_cache.host_cache_size;
  t.offload.host_prefault = false;
  t.offload.host_eviction_policy = c.kv_cache.eviction_policy;  // one key for the pools and host
  t.offload.offload_min_priority = c.kv_cache.secondary_offload_min_priority;
  t.offload.copy_threads = c.kv_cache.copy_threads;
  t.offload.on_copy = [m = metrics_.get()](CopyDirection d, KvTier tier, std::int64_t blocks,
                                           std::int64_t bytes, std::int64_t ns) {
    m->ObserveCopy(d, tier, blocks, bytes, ns);
  };
  if (pools_.on_device()) {
    // Host code never touches device pools: every tier copy stages through pinned host memory
    // with the CUDA block copy on copy streams of the pools' devices (store/device_staging.h).
    DevicePoolsOptions d;
    for (const RankPool& p : pools_.pools()) d.device.push_back(p.device);
    if (emulated_device_ != nullptr) {
      d.make_backend = emulated_device_->BackendFactory();
      d.staging_memory = HostMemoryKind::kAligned;  // nothing to pin for
    } else {
      d.make_backend = [](int device) { return MakeCudaBackend(device); };
    }
    t.offload.device_pools = std::move(d);
  }
  if (c.disk_tier.enabled) {
    t.offload.disk = DiskTierOptions(c);
  }
  Result<std::unique_ptr<TieredCache>> created = TieredCache::Create(std::move(t));
  if (!created.ok()) return created.status().WithContext("tiers");
  cache_ = std::move(created).value();
  const OffloadStats os = cache_->engine().stats();
  description_.host_tier_capacity = os.has_host ? os.host.capacity_bytes : 0;
  description_.disk_tier_capacity = os.has_disk ? os.disk.capacity_bytes : 0;
  disk_entries_at_start_ = os.has_disk ? os.disk.entries : 0;

  const bool clustered = c.cluster.membership != MembershipKind::kNone;
  // One member table: membership writes it; the directory, peer sessions and fetch read it.
  if (clustered || c.peer.enabled) peers_ = std::make_unique<PeerTable>(description_.node_id);
  if (clustered) KVMESH_RETURN_IF_ERROR(CreateDirectory().WithContext("cluster"));
  if (c.peer.enabled) KVMESH_RETURN_IF_ERROR(StartPeers().WithContext("peer"));
  StartServices();
  KVMESH_RETURN_IF_ERROR(StartMembership().WithContext("cluster"));
  return Status::Ok();
}

Status Node::StartPeers() {
  const PeerSection& c = config_.peer;
  std::vector<BundleCodec> codecs;
  PeerSessionsOptions o;
  o.self_id = description_.node_id;
  o.secret = presented_secret_;
  o.namespace_digest = NamespaceDigest(cache_->manager().config().key_namespace);
  KeyNamespace other_ns = cache_->manager().config().key_namespace;
  other_ns.layout = other_ns.layout == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
  o.other_order_namespace_digest = NamespaceDigest(other_ns);
  for (const RankPool& p : pools_.pools()) {
    KVMESH_ASSIGN_OR_RETURN(BundleCodec codec, BundleCodec::Create(p.layout, p.pool_scale));
    o.fingerprints.push_back(codec.fingerprint());
    const KvLayout other = p.layout.order() == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
    o.other_order_fingerprints.push_back(FingerprintOf(WithOrder(p.layout, other), p.pool_scale));
    o.staging_slot_bytes =
        std::max(o.staging_slot_bytes, static_cast<std::uint64_t>(codec.bundle_bytes()));
    codecs.push_back(std::move(codec));
  }
  o.staging_slots = static_cast<std::uint32_t>(
      std::max<std::int64_t>(static_cast<std::int64_t>(codecs.size()),
                             c.staging_size / static_cast<std::int64_t>(o.staging_slot_bytes)));
  o.request_timeout = c.fetch_deadline;
  o.connect_timeout = c.fetch_deadline;
  o.transfer.ucx.tls = c.ucx_tls;
  o.transfer.ucx.net_devices = c.ucx_net_devices;
  o.transfer.busy_poll = std::chrono::microseconds(c.busy_poll_us);
  o.transfer.lanes = static_cast<std::uint32_t>(c.transfer_lanes);
  // The pools' memory, registered once: a holder sends pooled blocks straight from it and a
  // fetch lands in it. Not device pools: Debian's UCX has no CUDA transport, so their blocks are
  // staged through host memory (OffloadEngine::ReadBlock / WriteBlock) and travel through the
  // registered staging slots.
  for (const KvPoolView& v : pools_.on_device() ? std::vector<KvPoolView>{} : pools_.views()) {
    for (int k = 0; k < kNumKvComponents; ++k) {
      const PagedTensorLayout& l = v.layout.components[k];
      if (!l.present() || v.base[k] == nullptr) continue;
      o.pool_memory.emplace_back(static_cast<std::byte*>(v.base[k]),
                                 static_cast<std::size_t>(l.BytesPerBlock() * v.num_blocks));
    }
  }
  const std::uint32_t lanes = o.transfer.lanes;
  const std::uint32_t staging_slots = o.staging_slots;
  KVMESH_ASSIGN_OR_RETURN(peer_sessions_, PeerSessions::Create(std::move(o), peers_.get()));
  KVMESH_LOG_INFO("peer data path started transfer_lanes {} ucx_tls {} staging_slots {}", lanes,
                  c.ucx_tls.empty() ? "(ucx default)" : c.ucx_tls, staging_slots);
  block_source_ = std::make_unique<CacheBlockSource>(cache_.get(), pools_.views(), codecs);
  peer_service_ = std::make_unique<PeerService>(PeerServiceOptions{}, peer_sessions_.get(),
                                                block_source_.get(), codecs);
  // In a cluster the directory says who holds a prefix; without one, every known peer is asked.
  PrefixLocator* locator = directory_.get();
  if (locator == nullptr) {
    locator_ = std::make_unique<AskPeersLocator>(peers_.get(), peer_sessions_.get());
    locator = locator_.get();
  }
  RemoteFetchOptions f;
  f.deadline = c.fetch_deadline;
  handoff_sender_ =
      std::make_unique<HandoffSender>(cache_.get(), peer_sessions_.get(), description_.tcp_listen);
  handoff_receiver_ = std::make_unique<HandoffReceiver>(cache_.get(), peer_sessions_.get(),
                                                        peers_.get(), pools_.views(), codecs);
  peer_service_->SetHandoff(handoff_receiver_.get());
  fetcher_ = std::make_unique<RemoteFetcher>(f, cache_.get(), peer_sessions_.get(), locator,
                                             pools_.views(), std::move(codecs));
  return Status::Ok();
}

// The prefix directory and the cluster service (before the peer data path, whose fetcher locates
// blocks through the directory); membership starts once the node serves (StartMembership).
Status Node::CreateDirectory() {
  const ClusterSection& c = config_.cluster;
  BlockManager* manager = &cache_->manager();
  TieredCache* cache = cache_.get();
  directory_ = std::make_unique<PrefixDirectory>(
      c.directory, peers_.get(),
      [manager](std::uint64_t from, std::size_t max) { return manager->PollEvents(from, max); },
      MakePeerDirectoryTransport(description_.node_id, presented_secret_),
      [cache] { return HoldingsSnapshot(*cache); });
  cluster_ = std::make_unique<ClusterService>(directory_.get(), peers_.get(), cache_.get(),
                                              AdvertisedAddress());
  return Status::Ok();
}

std::string Node::AdvertisedAddress() const {
  const std::string& advertise = config_.cluster.advertise;
  return advertise.empty() ? server_->tcp_address() : advertise;
}

Status Node::StartMembership() {
  const ClusterSection& c = config_.cluster;
  if (c.membership == MembershipKind::kNone) return Status::Ok();
  BlockManager* manager = &cache_->manager();
  PeerInfo self;
  self.node_id = description_.node_id;
  self.control_address = AdvertisedAddress();
  self.namespace_digest_hex = NamespaceDigest(manager->config().key_namespace).ToHex();
  KVMESH_ASSIGN_OR_RETURN(membership_, Membership::Start(c, std::move(self), peers_.get()));
  KVMESH_LOG_INFO("cluster membership {} members {}", MembershipKindName(c.membership),
                  peers_->Snapshot().size() + 1);
  return Status::Ok();
}

void Node::StopCluster() {
  if (membership_ != nullptr) membership_->Stop();  // leave first: peers stop routing here
  if (directory_ != nullptr) directory_->Stop();
}

Status Node::StartMetrics() {
  metrics_->registry().AddCollector(
      [](std::vector<metrics::FamilySnapshot>* out) { CollectProcessMetrics(out); });
  sources_.description = &description_;
  sources_.server = server_.get();
  sources_.started = std::chrono::steady_clock::now();
  sources_.readiness = [this] { return readiness(); };
  node_collector_ = metrics_->registry().AddCollector(
      [this](std::vector<metrics::FamilySnapshot>* out) { CollectNodeMetrics(sources_, out); });
  if (config_.metrics.listen.empty()) return Status::Ok();
  MetricsHttpOptions o;
  o.listen = config_.metrics.listen;
  KVMESH_ASSIGN_OR_RETURN(metrics_http_,
                          MetricsHttpServer::Start(
                              o, [m = metrics_.get()] { return m->registry().RenderText(); },
                              [this] { return readiness(); }));
  description_.metrics_listen = metrics_http_->address();
  return Status::Ok();
}

void Node::StartServices() {
  OperatorContext oc;
  oc.description = &description_;
  oc.plan = &plan_;
  oc.pools = &pools_;
  oc.cache = cache_.get();
  oc.metrics = metrics_.get();
  oc.server = server_.get();
  oc.eviction_policy = std::string(EvictionPolicyName(config_.kv_cache.eviction_policy));
  oc.offload_min_priority = config_.kv_cache.secondary_offload_min_priority;
  operator_ = std::make_unique<OperatorService>(std::move(oc));
  service_ = std::make_unique<EngineService>(description_, cache_.get(), &pools_);
  service_->SetServer(server_.get());
  service_->SetMetrics(metrics_.get());
  service_->SetOperator(operator_.get());
  service_->SetPeer(peer_service_.get(), fetcher_.get());
  service_->SetCluster(cluster_.get());
  service_->SetHandoff(handoff_sender_.get(), peers_.get());
  // The scrape-time families read the cache from now on (they run on the metrics thread).
  metrics_->registry().RemoveCollector(node_collector_);
  sources_.cache = cache_.get();
  sources_.pools = &pools_;
  sources_.directory = directory_.get();
  sources_.peers = peers_.get();
  sources_.fetcher = fetcher_.get();
  sources_.peer_service = peer_service_.get();
  sources_.handoff_sender = handoff_sender_.get();
  sources_.handoff_receiver = handoff_receiver_.get();
  node_collector_ = metrics_->registry().AddCollector(
      [this](std::vector<metrics::FamilySnapshot>* out) { CollectNodeMetrics(sources_, out); });
  server_->Serve(service_.get());
  serving_.store(true);
}

void Node::ResetPeers() {
  fetcher_.reset();
  handoff_sender_.reset();
  handoff_receiver_.reset();
  locator_.reset();
  peer_service_.reset();
  block_source_.reset();
  peer_sessions_.reset();  // the engine: cancels and completes every operation first
}

Readiness Node::readiness() const {
  if (draining_.load()) return Readiness::kDraining;
  return serving_.load() ? Readiness::kServing : Readiness::kStarting;
}

std::string Node::tcp_address() const { return server_ ? server_->tcp_address() : ""; }

std::string Node::Summary() const {
  const NodeConfig& c = config_;
  std::ostringstream s;
  s << "kvnode " << description_.node_id << " (pid " << ::getpid() << ", version " << kVersion
    << ")\n";
  s << "  model      " << model_summary_ << "\n";
  if (pools_.emulated()) {
    s << "  device     emulated (a test device): pools in memory the node's own code cannot read, "
         "every copy staged as on a GPU; engines map it as host memory, CPU backend\n";
  } else if (pools_.on_device()) {
    s << "  device     " << description_.device
      << ": pools in device memory (CUDA IPC), CUDA kernels";
    for (std::size_t r = 0; r < pools_.devices().size(); ++r) {
      const CudaDeviceInfo& d = pools_.devices()[r];
      s << (r == 0 ? "\n             " : ", ") << "rank " << r << " cuda:" << d.ordinal << " "
        << d.name << " " << CudaUuidString(d.uuid);
    }
    s << "\n";
  } else {
    s << "  device     cpu: pools in host shared memory (memfd), CPU backend\n";
  }
  s << "  cache      " << description_.dtype << " " << description_.kv_layout << ", "
    << plan_.cache.tokens_per_block << " tokens per block, tensor_parallel_size "
    << c.tensor_parallel_size << ", eviction " << EvictionPolicyName(c.kv_cache.eviction_policy)
    << (c.kv_cache.enable_block_reuse ? "" : ", block reuse off") << "\n";
  s << "  budget     " << FormatBytes(plan_.budget_bytes) << " per rank ("
    << (plan_.limited_by_max_tokens() ? "max_tokens" : "free_gpu_memory_fraction of free memory")
    << ")\n";
  for (const RankPool& p : pools_.pools()) {
    s << "  pool " << p.index << "     " << p.name << ": " << p.num_blocks << " blocks x "
      << FormatBytes(p.layout.BytesPerBlock()) << " = "
      << FormatBytes(p.num_blocks * p.layout.BytesPerBlock()) << ", layers " << LayerRange(p.layers)
      << "\n";
  }
  const OffloadStats os = cache_->engine().stats();
  s << "  host tier  "
    << (os.has_host ? StrCat(FormatBytes(os.host.capacity_bytes),
                             cache_->engine().host()->pinned() ? " pinned" : " aligned",
                             " host memory, offload at priority >= ",
                             c.kv_cache.secondary_offload_min_priority)
                    : std::string("none"))
    << "\n";
  s << "  disk tier  "
    << (os.has_disk ? StrCat(FormatBytes(os.disk.capacity_bytes), " RocksDB at ",
                             c.disk_tier.path.empty() ? c.data_dir + "/rocksdb" : c.disk_tier.path,
                             ", ", disk_entries_at_start_, " blocks from earlier runs")
                    : std::string("none"))
    << "\n";
  s << "  listen     unix " << description_.unix_socket;
  if (!tcp_address().empty()) s << ", tcp " << tcp_address();
  s << "\n  metrics    "
    << (description_.metrics_listen.empty()
            ? std::string("off")
            : StrCat("http://", description_.metrics_listen, "/metrics (/healthz, /readyz)"));
  s << "\n  secret     from " << secret_origin_ << "\n";
  if (c.cluster.membership != MembershipKind::kNone) {
    s << "  cluster    " << MembershipKindName(c.cluster.membership) << " membership";
    if (c.cluster.membership == MembershipKind::kEtcd) {
      s << " at " << StrJoin(c.cluster.etcd.endpoints, ", ") << " (lease "
        << c.cluster.etcd.lease_ttl_s << " s)";
    }
    s << ", " << peers_->Snapshot().size() << " peers now, advertised as " << AdvertisedAddress()
      << ", directory batch " << c.cluster.directory.batch_ms << " ms\n";
  }
  if (c.peer.enabled) {
    s << "  peer       UCX "
      << (c.peer.ucx_tls.empty() ? "(UCX_TLS: UCX's choice)" : "UCX_TLS " + c.peer.ucx_tls)
      << (c.peer.ucx_net_devices.empty() ? "" : " on " + c.peer.ucx_net_devices) << ", staging "
      << FormatBytes(c.peer.staging_size) << " each way, fetch deadline "
      << c.peer.fetch_deadline.count() << " ms\n";
  } else if (c.cluster.membership != MembershipKind::kNone) {
    s << "  peer       off (peer.enabled: false): the directory is shared, no block moves\n";
  }
  return s.str();
}

Status Node::ReloadSecrets() {
  Result<NodeSecrets> secrets = LoadNodeSecrets(config_.control);
  if (!secrets.ok()) {
    KVMESH_LOG_ERROR("secrets not reloaded, the ones in use stay: {}", secrets.status().ToString());
    return secrets.status();
  }
  server_->SetSecrets(secrets->secret.secret, secrets->second ? secrets->second->secret : "");
  presented_secret_->Set(secrets->secret.secret);
  KVMESH_LOG_INFO("secrets reloaded: presenting and accepting the secret from {}; {}",
                  secrets->secret.origin,
                  secrets->second ? "also accepting a second one from " + secrets->second->origin
                                  : std::string("no second secret"));
  return Status::Ok();
}

ShutdownReport Node::Shutdown(const std::function<void(std::string_view what)>& progress) {
  ShutdownReport r;
  if (shut_down_) return r;
  shut_down_ = true;
  const auto tell = [&](std::string_view what) {
    if (progress) progress(what);
  };
  const auto start = std::chrono::steady_clock::now();
  KVMESH_LOG_INFO("shutdown started drain_timeout_ms {}", config_.shutdown.drain_timeout.count());
  tell("shutting down: draining requests in flight");
  draining_.store(true);
  StopCluster();
  server_->StopAccepting();
  r.drained = server_->WaitIdle(start + config_.shutdown.drain_timeout);
  if (!r.drained) KVMESH_LOG_WARN("shutdown drain deadline passed with requests in flight");
  const std::int64_t released_before = service_->released_on_close();
  server_->Stop();  // closes connections; their sequences are released
  r.released_sequences = service_->released_on_close() - released_before;
  if (config_.shutdown.flush_to_disk) {
    // Every connection is closed: nothing writes the pools any more.
    tell("shutting down: flushing cached blocks to the disk tier");
    const FlushCounts f = FlushToDiskTier(
        *cache_, {.min_priority = config_.kv_cache.secondary_offload_min_priority,
                  .full = FullDiskTier::kEndsTheFlush,
                  .on_progress = [&](const FlushCounts& done, std::int64_t to_write) {
                    tell(StrCat("shutting down: flushing to the disk tier, ", done.written, " of ",
                                to_write, " blocks written"));
                  }});
    r.flushed_blocks = f.written;
    r.flush_failures = f.failures;
    r.flush_skipped_full = f.not_fitting;
  }
  tell("shutting down: closing the tiers");
  metrics_http_.reset();
  metrics_->registry().RemoveCollector(node_collector_);
  service_.reset();
  membership_.reset();
  operator_.reset();
  server_.reset();
  ResetPeers();  // the fetcher locates through the directory: before it
  cluster_.reset();
  directory_.reset();
  peers_.reset();
  cache_.reset();  // drains copies, closes RocksDB
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KVMESH_LOG_INFO(
      "shutdown done released {} flushed {} flush_failures {} not_flushed_disk_full {} seconds "
      "{:.3f}",
      r.released_sequences, r.flushed_blocks, r.flush_failures, r.flush_skipped_full, r.seconds);
  return r;
}

Node::~Node() {
  if (!shut_down_) Shutdown();
  metrics_http_.reset();
  server_.reset();
  service_.reset();
  membership_.reset();
  operator_.reset();
  ResetPeers();
  cluster_.reset();
  directory_.reset();
  peers_.reset();
  cache_.reset();
  copy_pool_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace kvmesh
