#include "store/tiered_replay.h"

#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "common/log.h"
#include "common/strings.h"
#include "store/block_bundle.h"
#include "store/synthetic_block.h"

namespace kvmesh {
namespace {

constexpr std::int64_t kHostSlotAlignment = 64;  // as HostTier pads its slots

Result<std::string> MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/kvmesh-replay-tiers-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return Status::IoError(StrCat("cannot create a temporary directory from ", pattern));
  }
  return pattern;
}

}  // namespace

Result<KvPoolGeometry> ReplayBlockGeometry(std::int32_t tokens_per_block,
                                           std::int64_t block_bytes) {
  const std::int64_t per_dim = 2 * static_cast<std::int64_t>(tokens_per_block);
  if (tokens_per_block < 2 || block_bytes <= 0 || block_bytes % per_dim != 0 ||
      block_bytes / per_dim > (1 << 20)) {
    return Status::InvalidArgument(StrCat("block bytes ", block_bytes,
                                          " is not a positive multiple of 2 x ", tokens_per_block,
                                          " tokens (1 layer, K and V, 1 head, 1 byte each)"));
  }
  KvPoolGeometry g;
  g.dtype = KvDtype::kFP8PerTensor;
  g.layout = KvLayout::kHND;
  g.num_layers = 1;
  g.kv_factor = 2;
  g.num_kv_heads = 1;
  g.tokens_per_block = tokens_per_block;
  g.head_dim = static_cast<std::int32_t>(block_bytes / per_dim);
  return g;
}

Result<std::unique_ptr<TieredReplay>> TieredReplay::Create(const TieredReplayOptions& options) {
  if (options.capacity_blocks < 1) {
    return Status::InvalidArgument(StrCat("a replay with tiers needs a pool capacity (blocks >= 1)",
                                          ", got ", options.capacity_blocks));
  }
  if (options.host_blocks < 0 || options.disk_blocks < 0) {
    return Status::InvalidArgument("tier capacities in blocks must not be negative");
  }
  if (options.host_blocks == 0 && options.disk_blocks == 0) {
    return Status::InvalidArgument("a replay with tiers needs a host tier or a disk tier");
  }
  KVMESH_ASSIGN_OR_RETURN(const KvPoolGeometry geometry,
                          ReplayBlockGeometry(options.tokens_per_block, options.block_bytes));
  KVMESH_ASSIGN_OR_RETURN(const KvPoolLayout layout, MakeKvPoolLayout(geometry));
  KVMESH_ASSIGN_OR_RETURN(const BundleCodec codec, BundleCodec::Create(layout, 1.0f));
  std::unique_ptr<TieredReplay> r(new TieredReplay());
  r->cpu_at_create_ = ThreadCpuSnapshot();
  r->options_ = options;
  r->counts_.geometry = geometry;
  r->counts_.block_bytes = layout.BytesPerBlock();
  r->counts_.bundle_bytes = codec.bundle_bytes();
  r->counts_.host_blocks = options.host_blocks;
  r->counts_.disk_blocks = options.disk_blocks;
  const PoolMemorySpec spec{layout, options.capacity_blocks, 1.0f};
  KVMESH_ASSIGN_OR_RETURN(r->storage_, PoolStorage::Allocate(std::span(&spec, 1)));
  OffloadEngineOptions e;
  e.pools = r->storage_.views();
  const std::int64_t slot =
      (codec.bundle_bytes() + kHostSlotAlignment - 1) / kHostSlotAlignment * kHostSlotAlignment;
  e.host_capacity_bytes = options.host_blocks * slot;
  e.host_memory = HostMemoryKind::kAligned;
  e.host_eviction_policy = options.host_eviction_policy;
  e.copy_threads = options.copy_threads;
  e.offload_min_priority = options.offload_min_priority;
  if (options.disk_blocks > 0) {
    if (options.disk_path.empty()) {
      KVMESH_ASSIGN_OR_RETURN(r->disk_dir_, MakeTempDir());
      r->remove_disk_dir_ = !options.keep_disk;
    } else {
      r->disk_dir_ = options.disk_path;
    }
    RocksDbTierOptions d;
    d.path = r->disk_dir_;
    d.capacity_bytes = options.disk_blocks * codec.bundle_bytes();
    d.durability = options.disk_durability;
    e.disk = d;
    r->counts_.disk_path = r->disk_dir_;
    r->counts_.disk_kept = !r->remove_disk_dir_;
  }
  KVMESH_ASSIGN_OR_RETURN(r->engine_, OffloadEngine::Create(std::move(e)));
  return r;
}

TieredReplay::~TieredReplay() {
  engine_.reset();  // drains and closes RocksDB before its directory goes
  if (remove_disk_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(disk_dir_, ec);
    if (ec) KVMESH_LOG_WARN("cannot remove {} error {}", disk_dir_, ec.message());
  }
}

std::int64_t TieredReplay::OnPoolMiss(const ReplayMiss& miss) {
  KVMESH_CHECK(miss.missed.size() == miss.missed_blocks.size())
      << miss.missed.size() << " missed ids, " << miss.missed_blocks.size() << " blocks";
  const KvPoolView& view = storage_.view(0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t held = engine_->CountHeld(miss.missed);
  const auto t1 = std::chrono::steady_clock::now();
  OnboardResult onboard;
  if (held > 0) {
    std::vector<BlockId> blocks;
    blocks.reserve(static_cast<std::size_t>(held));
    for (std::int64_t i = 0; i < held; ++i) {
      blocks.push_back(BlockId{miss.missed_blocks[static_cast<std::size_t>(i)]});
    }
    onboard = engine_->Onboard(miss.missed.first(static_cast<std::size_t>(held)), blocks);
  }
  const auto t2 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < onboard.restored; ++i) {
    const auto k = static_cast<std::size_t>(i);
    ++counts_.verified_blocks;
    if (!SyntheticBlockMatches(view, miss.missed_blocks[k], miss.missed[k])) {
      ++counts_.mismatched_blocks;
    }
    ++(onboard.sources[k] == KvTier::kDisk ? counts_.disk_hit_blocks : counts_.host_hit_blocks);
  }
  const auto t3 = std::chrono::steady_clock::now();
  for (std::size_t k = static_cast<std::size_t>(onboard.restored); k < miss.missed.size(); ++k) {
    FillSyntheticBlock(view, miss.missed_blocks[k], miss.missed[k]);  // "recomputed"
    ++counts_.recomputed_blocks;
  }
  const auto t4 = std::chrono::steady_clock::now();
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  counts_.lookup_s += secs(t0, t1);
  counts_.onboard_s += secs(t1, t2);
  counts_.check_s += secs(t2, t3);
  counts_.recompute_s += secs(t3, t4);
  return onboard.restored;
}

TieredReplayStats TieredReplay::Finish() {
  const auto t0 = std::chrono::steady_clock::now();
  engine_->Drain();
  const auto t1 = std::chrono::steady_clock::now();
  if (engine_->disk() != nullptr) {
    const Status st = engine_->disk()->Flush();
    if (!st.ok()) KVMESH_LOG_WARN("replay disk tier flush failed error {}", st.ToString());
  }
  counts_.drain_s = std::chrono::duration<double>(t1 - t0).count();
  counts_.flush_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  counts_.thread_cpu_s = CpuByThreadName(cpu_at_create_, ThreadCpuSnapshot());
  return stats();
}

TieredReplayStats TieredReplay::stats() const {
  TieredReplayStats s = counts_;
  s.offload = engine_->stats();
  return s;
}

Result<TieredReplayResult> ReplayTraceWithTiers(std::span<const TraceRequest> trace,
                                                const ReplayConfig& config,
                                                TieredReplayOptions tiers,
                                                SignalFlush* signal_flush) {
  if (!config.capacity_blocks) {
    return Status::InvalidArgument("a replay with tiers needs a pool capacity (capacity_blocks)");
  }
  tiers.capacity_blocks = *config.capacity_blocks;
  tiers.tokens_per_block = config.tokens_per_block;
  const auto created = std::chrono::steady_clock::now();
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<TieredReplay> hooks, TieredReplay::Create(tiers));
  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - created).count();
  RocksDbTier* disk = hooks->engine().disk();
  if (signal_flush != nullptr && disk != nullptr) signal_flush->Register(disk);
  ReplayConfig c = config;
  c.tier_hooks = hooks.get();
  TieredReplayResult out;
  Result<ReplayResult> replay = ReplayTrace(trace, c);  // the manager is gone after this
  if (replay.ok()) {
    out.replay = std::move(*replay);
    out.tiers = hooks->Finish();
    out.tiers.setup_s = setup_s;
  }
  if (signal_flush != nullptr && disk != nullptr) signal_flush->Unregister(disk);
  if (!replay.ok()) return replay.status();
  return out;
}

}  // namespace kvmesh
