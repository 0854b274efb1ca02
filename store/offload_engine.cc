#include "store/offload_engine.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/strings.h"
#include "store/offload_engine_internal.h"

namespace kvmesh {
using offload_internal::NanosSince;
using offload_internal::SteadyClock;

namespace {
// Offloads a worker takes from the queue at a time (at most).
constexpr std::size_t kOffloadBatch = 32;
// Spills the spill thread writes in one RocksDB write: as many as fit in this many bundle bytes
// (at least one). 1 MiB is 247 bundles of 4 KiB blocks (one write instead of 247: a write
// group, a memtable insert pass and a thread wake each) and one bundle of 1 MiB blocks.
constexpr std::int64_t kSpillBatchBytes = 1 << 20;
}  // namespace

Result<std::unique_ptr<OffloadEngine>> OffloadEngine::Create(OffloadEngineOptions options) {
  if (options.pools.empty()) return Status::InvalidArgument("offload engine: no pools");
  for (std::size_t p = 0; p < options.pools.size(); ++p) {
    const KvPoolView& v = options.pools[p];
    if (v.num_blocks <= 0 || v.base[0] == nullptr) {
      return Status::InvalidArgument(StrCat("offload engine: pool ", p, " has no memory"));
    }
  }
  if (options.offload_min_priority < kTierMinPriority ||
      options.offload_min_priority > kTierMaxPriority + 1) {
    return Status::InvalidArgument(StrCat("offload_min_priority ", options.offload_min_priority,
                                          " is outside 0..", kTierMaxPriority + 1));
  }
  if (options.copy_threads < 0) {
    return Status::InvalidArgument(StrCat("copy_threads ", options.copy_threads, " is negative"));
  }
  if (options.host_capacity_bytes < 0) {
    return Status::InvalidArgument(
        StrCat("host_capacity_bytes ", options.host_capacity_bytes, " is negative"));
  }
  if (options.device_pools) {
    if (options.device_pools->device.size() != options.pools.size()) {
      return Status::InvalidArgument(StrCat("offload engine: device_pools.device has ",
                                            options.device_pools->device.size(), " entries for ",
                                            options.pools.size(), " pools"));
    }
    if (!options.device_pools->make_backend) {
      return Status::InvalidArgument("offload engine: device_pools.make_backend is empty");
    }
  }
  std::unique_ptr<OffloadEngine> engine(new OffloadEngine(std::move(options)));
  KVMESH_RETURN_IF_ERROR(engine->Open());
  return engine;
}

OffloadEngine::OffloadEngine(OffloadEngineOptions options)
    : options_(std::move(options)), counters_(std::make_unique<Counters>()) {
  for (const KvPoolView& v : options_.pools) block_bytes_.push_back(v.layout.BytesPerBlock());
  const CopyObserver& o = options_.on_copy;
  counters_->offload.Bind(o, CopyDirection::kOffload,
                          options_.host_capacity_bytes > 0 ? KvTier::kHost : KvTier::kDisk);
  counters_->spill.Bind(o, CopyDirection::kSpill, KvTier::kDisk);
  counters_->onboard_host.Bind(o, CopyDirection::kOnboard, KvTier::kHost);
  counters_->onboard_disk.Bind(o, CopyDirection::kOnboard, KvTier::kDisk);
}

Status OffloadEngine::Open() {
  for (const KvPoolView& v : options_.pools) {
    KVMESH_ASSIGN_OR_RETURN(BundleCodec codec, BundleCodec::Create(v.layout, v.pool_scale));
    codecs_.push_back(std::move(codec));
  }
  if (options_.device_pools) {
    // A lease per worker, one for a caller's onboard or ReadBlock, one for the listener.
    KVMESH_ASSIGN_OR_RETURN(staging_, DeviceStaging::Create(options_.pools, *options_.device_pools,
                                                            options_.copy_threads + 2));
  }
  if (options_.disk) {
    RocksDbTierOptions d = *options_.disk;
    d.pools.clear();
    for (int p = 0; p < num_pools(); ++p) {
      d.pools.push_back({TierPoolId{p}, options_.pools[p].layout, options_.pools[p].pool_scale});
    }
    KVMESH_ASSIGN_OR_RETURN(disk_, RocksDbTier::Open(std::move(d)));
  }
  const int workers = options_.copy_threads;
  spill_pool_ =
      std::make_unique<ThreadPool>(workers > 0 ? 1 : 0, "kvm-spill", ThreadPool::Kind::kBackground);
  // Background: an eviction's copy is queued under the manager's lock, and the thread that
  // queued it (an admission) should keep its core rather than yield it to the copy worker.
  copy_pool_ =
      std::make_unique<ThreadPool>(workers, "kvm-tier-copy", ThreadPool::Kind::kBackground);
  if (options_.host_capacity_bytes > 0) {
    HostTierOptions h;
    h.capacity_bytes = options_.host_capacity_bytes;
    h.memory = options_.host_memory;
    h.prefault = options_.host_prefault;
    h.eviction_policy = options_.host_eviction_policy;
    for (int p = 0; p < num_pools(); ++p) {
      h.pools.push_back(
          {TierPoolId{p}, options_.pools[p].layout, options_.pools[p].pool_scale, 0.0});
    }
    if (disk_) h.on_evict = [this](const EvictedBundle& victim) { return Spill(victim); };
    KVMESH_ASSIGN_OR_RETURN(host_, HostTier::Create(std::move(h)));
  }
  return Status::Ok();
}

OffloadEngine::~OffloadEngine() {
  Drain();
  copy_pool_.reset();
  spill_pool_.reset();
  host_.reset();
  disk_.reset();
  staging_.reset();
}

void OffloadEngine::Started(std::int64_t n) { in_flight_.fetch_add(n, std::memory_order_relaxed); }

void OffloadEngine::Finished(std::int64_t n) {
  if (in_flight_.fetch_sub(n, std::memory_order_acq_rel) != n) return;
  MutexLock lock(&drain_mu_);  // a Drain that saw a count above 0 is waiting, or not yet
  drain_cv_.notify_all();
}

void OffloadEngine::Drain() {
  MutexLock lock(&drain_mu_);
  AwaitCondition(drain_cv_, drain_mu_,
                 [this]() { return in_flight_.load(std::memory_order_acquire) == 0; });
}

bool OffloadEngine::IsClean(const EvictedBlock& block) {
  const TierPoolId pool{block.pool.value};
  return (host_ && host_->Contains(pool, block.content_id)) ||
         (disk_ && disk_->Contains(pool, block.content_id));
}

void OffloadEngine::CopyOut(const EvictedBlock& block, const KvPoolView& src,
                            std::int64_t src_block, std::int64_t extra_ns) {
  const int p = block.pool.value;
  const auto start = SteadyClock::now();
  const Status st = top()->Put(TierPoolId{p}, block.content_id, src, src_block, block.priority);
  if (st.ok()) {
    counters_->offload.Add(block_bytes_[p], NanosSince(start) + extra_ns);
  } else {
    counters_->offload_failed.fetch_add(1, std::memory_order_relaxed);
    KVMESH_LOG_DEBUG("offload failed pool {} id {} error {}", p, block.content_id.ToHex(),
                     st.ToString());
  }
}

void OffloadEngine::CopyOutNow(const EvictedBlock& block) {
  if (!staging_) {
    CopyOut(block, options_.pools[block.pool.value], block.block.value);
    return;
  }
  PendingOffload one{block, MoveOutTicket()};  // no ticket: the caller reuses the block after
  CopyOutStaged(std::span(&one, 1));
}

void OffloadEngine::CopyOutStaged(std::span<PendingOffload> batch) {
  const auto np = static_cast<std::size_t>(num_pools());
  DeviceStaging::Lease lease = staging_->Acquire();
  const auto capacity = static_cast<std::size_t>(lease.capacity());
  std::vector<std::vector<BlockCopyPair>> pairs(np);  // [pool]: device block → staging block
  std::vector<std::int64_t> slot(batch.size());       // each block's staging block
  std::vector<Status> copied(np);
  std::vector<std::int64_t> share_ns(np);  // a pool's staging copy time per block
  std::size_t begin = 0;
  while (begin < batch.size()) {
    // As many blocks as the area holds of each pool.
    for (auto& v : pairs) v.clear();
    std::size_t end = begin;
    for (; end < batch.size(); ++end) {
      const auto p = static_cast<std::size_t>(batch[end].block.pool.value);
      if (pairs[p].size() == capacity) break;
      slot[end] = static_cast<std::int64_t>(pairs[p].size());
      pairs[p].push_back({batch[end].block.block.value, slot[end]});
    }
    for (std::size_t p = 0; p < np; ++p) {
      if (pairs[p].empty()) continue;
      const auto start = SteadyClock::now();
      copied[p] = lease.ToHost(static_cast<int>(p), pairs[p]);
      share_ns[p] = NanosSince(start) / static_cast<std::int64_t>(pairs[p].size());
      if (!copied[p].ok()) {
        KVMESH_LOG_WARN("offload staging copy failed pool {} blocks {} error {}", p,
                        pairs[p].size(), copied[p].ToString());
      }
    }
    // The bytes are in host memory (or their copy failed and nothing is put): the device blocks
    // may be reused from now on.
    for (std::size_t i = begin; i < end; ++i) batch[i].ticket.Complete();
    for (std::size_t i = begin; i < end; ++i) {
      const auto p = static_cast<std::size_t>(batch[i].block.pool.value);
      if (copied[p].ok()) {
        CopyOut(batch[i].block, lease.view(static_cast<int>(p)), slot[i], share_ns[p]);
      } else {
        counters_->offload_failed.fetch_add(1, std::memory_order_relaxed);
      }
    }
    begin = end;
  }
}

Result<HostBlock> OffloadEngine::ReadBlock(int pool, std::int64_t block) {
  if (pool < 0 || pool >= num_pools()) {
    return Status::InvalidArgument(StrCat("read block: pool ", pool, " of ", num_pools()));
  }
  const KvPoolView& view = options_.pools[static_cast<std::size_t>(pool)];
  if (block < 0 || block >= view.num_blocks) {
    return Status::InvalidArgument(
        StrCat("read block: block ", block, " of pool ", pool, " (", view.num_blocks, " blocks)"));
  }
  if (!staging_) return HostBlock(view, block);  // the pool itself: no copy
  DeviceStaging::Lease lease = staging_->Acquire();
  const BlockCopyPair pair{block, 0};
  KVMESH_RETURN_IF_ERROR(lease.ToHost(pool, std::span(&pair, 1)));
  const KvPoolView& staged = lease.view(pool);
  return HostBlock(staged, 0, std::move(lease));
}

Status OffloadEngine::WriteBlock(int pool, std::int64_t block,
                                 const std::function<Status(const KvPoolView&, std::int64_t)>& fill,
                                 const DeviceStaging::PartOf& part) {
  if (pool < 0 || pool >= num_pools()) {
    return Status::InvalidArgument(StrCat("write block: pool ", pool, " of ", num_pools()));
  }
  const KvPoolView& view = options_.pools[static_cast<std::size_t>(pool)];
  if (block < 0 || block >= view.num_blocks) {
    return Status::InvalidArgument(
        StrCat("write block: block ", block, " of pool ", pool, " (", view.num_blocks, " blocks)"));
  }
  if (!staging_) return fill(view, block);  // the pool itself
  DeviceStaging::Lease lease = staging_->Acquire();
  KVMESH_RETURN_IF_ERROR(fill(lease.view(pool), 0));
  if (part) return lease.ToDevicePart(pool, 0, block, part);
  const BlockCopyPair pair{0, block};
  return lease.ToDevice(pool, std::span(&pair, 1));
}

Status OffloadEngine::CopyPoolBlocks(const BlockCopyArgs& args) {
  if (staging_) return staging_->CopyBlocks(args);
  return cpu::BlockCopy(args, nullptr);
}

bool OffloadEngine::ShouldCopy(const EvictedBlock& block) {
  counters_->evictions_seen.fetch_add(1, std::memory_order_relaxed);
  if (top() == nullptr) return false;
  if (block.priority < options_.offload_min_priority) {
    counters_->skipped_priority.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (IsClean(block)) {
    counters_->skipped_clean.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void OffloadEngine::OnEvict(const EvictedBlock& block) {
  const auto start = SteadyClock::now();
  if (ShouldCopy(block)) CopyOutNow(block);  // the bytes are intact only during this call
  counters_->listener_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
}

void OffloadEngine::OnEvictDeferrable(const EvictedBlock& block, MoveOutTicket& ticket) {
  const auto start = SteadyClock::now();
  if (options_.copy_threads == 0) {
    OnEvict(block);  // synchronous: the ticket is left, the slot is reused when this returns
  } else if (ShouldCopy(block)) {
    bool start_drainer = false;
    Started();
    {
      MutexLock lock(&queue_mu_);
      offload_queue_.push_back({block, std::move(ticket)});
      if (drainers_ < options_.copy_threads) {
        ++drainers_;
        start_drainer = true;
      }
    }
    if (start_drainer) copy_pool_->Submit([this] { DrainOffloads(); });
  }
  counters_->listener_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
}

void OffloadEngine::DrainOffloads() {
  std::vector<PendingOffload> batch;
  for (;;) {
    {
      MutexLock lock(&queue_mu_);
      if (offload_queue_.empty()) {
        --drainers_;
        return;
      }
      // Share the queue with the other drainers, up to a batch each.
      const std::size_t n = std::clamp<std::size_t>(
          offload_queue_.size() / static_cast<std::size_t>(drainers_), 1, kOffloadBatch);
      for (std::size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(offload_queue_.front()));
        offload_queue_.pop_front();
      }
    }
    RunOffloads(batch);
  }
}

void OffloadEngine::RunOffloads(std::vector<PendingOffload>& batch) {
  if (staging_) {
    CopyOutStaged(batch);
  } else {
    for (PendingOffload& p : batch) {
      CopyOut(p.block, options_.pools[p.block.pool.value], p.block.block.value);
      p.ticket.Complete();  // the block may be reused from now on
    }
  }
  Finished(static_cast<std::int64_t>(batch.size()));
  batch.clear();
}

bool OffloadEngine::HelpMoveOut() {
  std::vector<PendingOffload> batch;
  {
    MutexLock lock(&queue_mu_);
    if (offload_queue_.empty()) return false;
    // A worker's share: the waiting thread is one more drainer.
    const std::size_t n = std::clamp<std::size_t>(
        offload_queue_.size() / static_cast<std::size_t>(drainers_ + 1), 1, kOffloadBatch);
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(offload_queue_.front()));
      offload_queue_.pop_front();
    }
  }
  counters_->offload_helped.fetch_add(static_cast<std::int64_t>(batch.size()),
                                      std::memory_order_relaxed);
  RunOffloads(batch);
  return true;
}

Status OffloadEngine::Spill(const EvictedBundle& victim) {
  if (disk_->Contains(victim.pool, victim.id)) {
    counters_->spill_skipped_clean.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  const std::int64_t bytes = block_bytes_[victim.pool.value];
  if (options_.copy_threads == 0) {
    const auto start = SteadyClock::now();
    Status st = disk_->PutBundle(victim.pool, victim.id, victim.bundle, victim.priority);
    if (st.ok()) {
      counters_->spill.Add(bytes, NanosSince(start));
    } else {
      counters_->spill_failed.fetch_add(1, std::memory_order_relaxed);
    }
    return st;
  }
  // Staged, so that the host slot can be reused at once and no disk I/O runs in HostTier::Put.
  auto staged =
      std::make_shared<std::vector<std::byte>>(victim.bundle.begin(), victim.bundle.end());
  const auto size = static_cast<std::int64_t>(staged->size());
  bool start_drainer = false;
  Started();
  {
    MutexLock lock(&spill_mu_);
    AwaitCondition(spill_cv_, spill_mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
      return spill_queued_bytes_ == 0 ||
             spill_queued_bytes_ + size <= options_.max_spill_queue_bytes;
    });
    spill_queued_bytes_ += size;
    staged_[{victim.pool.value, victim.id}] = staged;
    spill_queue_.push_back({victim.pool, victim.id, victim.priority, std::move(staged)});
    start_drainer = !spill_draining_;
    spill_draining_ = true;
  }
  if (start_drainer) spill_pool_->Submit([this] { DrainSpills(); });
  return Status::Ok();
}

void OffloadEngine::DrainSpills() {
  std::vector<PendingSpill> batch;
  std::vector<RocksDbTier::BundlePut> puts;
  std::vector<Status> out;
  for (;;) {
    {
      MutexLock lock(&spill_mu_);
      if (spill_queue_.empty()) {
        spill_draining_ = false;
        return;
      }
      std::int64_t bytes = 0;
      while (!spill_queue_.empty() && (batch.empty() || bytes < kSpillBatchBytes)) {
        bytes += static_cast<std::int64_t>(spill_queue_.front().bundle->size());
        batch.push_back(std::move(spill_queue_.front()));
        spill_queue_.pop_front();
      }
    }
    puts.clear();
    for (const PendingSpill& s : batch) {
      puts.push_back({s.pool, s.id, std::span<const std::byte>(*s.bundle), s.priority});
    }
    out.assign(batch.size(), Status::Ok());
    const auto start = SteadyClock::now();
    disk_->PutBundles(puts, out);
    const std::int64_t share_ns = NanosSince(start) / static_cast<std::int64_t>(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (out[i].ok()) {
        counters_->spill.Add(block_bytes_[batch[i].pool.value], share_ns);
      } else {
        counters_->spill_failed.fetch_add(1, std::memory_order_relaxed);
        KVMESH_LOG_DEBUG("spill failed pool {} id {} error {}", batch[i].pool.value,
                         batch[i].id.ToHex(), out[i].ToString());
      }
    }
    {
      MutexLock lock(&spill_mu_);
      for (const PendingSpill& s : batch) {
        spill_queued_bytes_ -= static_cast<std::int64_t>(s.bundle->size());
        auto it = staged_.find({s.pool.value, s.id});
        if (it != staged_.end() && it->second == s.bundle) staged_.erase(it);  // RocksDB has it
      }
      spill_cv_.notify_all();
    }
    Finished(static_cast<std::int64_t>(batch.size()));
    batch.clear();
  }
}

std::shared_ptr<const std::vector<std::byte>> OffloadEngine::Staged(TierPoolId pool,
                                                                    const ContentId& id) {
  MutexLock lock(&spill_mu_);
  auto it = staged_.find({pool.value, id});
  return it == staged_.end() ? nullptr : it->second;
}

std::int64_t OffloadEngine::CountHeld(std::span<const ContentId> ids, std::vector<KvTier>* tiers) {
  const auto start = SteadyClock::now();
  std::int64_t n = 0;
  for (const ContentId& id : ids) {
    bool all = true;
    bool all_in_host = true;  // host tier or spill staging
    for (int p = 0; p < num_pools() && all; ++p) {
      const TierPoolId pool{p};
      const bool in_host_tier = host_ && host_->Contains(pool, id);
      const bool on_disk = !in_host_tier && disk_ && disk_->Contains(pool, id);
      // Staged: not yet in RocksDB (one lock, taken only for blocks no tier's index holds).
      const bool staged = !in_host_tier && !on_disk && disk_ && Staged(pool, id) != nullptr;
      all = in_host_tier || on_disk || staged;
      all_in_host = all_in_host && (in_host_tier || staged);
    }
    if (!all) break;
    ++n;
    if (tiers != nullptr) tiers->push_back(all_in_host ? KvTier::kHost : KvTier::kDisk);
  }
  counters_->lookup_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
  return n;
}
HostTier::RestorePins OffloadEngine::PinHostCopies(std::span<const ContentId> ids) {
  HostTier::RestorePins pins;
  if (host_ == nullptr) return pins;
  for (int p = 0; p < num_pools(); ++p) host_->PinForRestore(TierPoolId{p}, ids, pins);
  return pins;
}

OffloadStats OffloadEngine::stats() const {
  OffloadStats s;
  const Counters& c = *counters_;
  const auto ld = [](const std::atomic<std::int64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  s.offload = c.offload.Load();
  s.spill = c.spill.Load();
  s.onboard_host = c.onboard_host.Load();
  s.onboard_disk = c.onboard_disk.Load();
  s.evictions_seen = ld(c.evictions_seen);
  s.skipped_priority = ld(c.skipped_priority);
  s.skipped_clean = ld(c.skipped_clean);
  s.offload_failed = ld(c.offload_failed);
  s.spill_skipped_clean = ld(c.spill_skipped_clean);
  s.spill_failed = ld(c.spill_failed);
  s.onboard_missing = ld(c.onboard_missing);
  s.onboard_corrupt = ld(c.onboard_corrupt);
  s.onboard_failed = ld(c.onboard_failed);
  s.listener_s = static_cast<double>(ld(c.listener_ns)) * 1e-9;
  s.lookup_s = static_cast<double>(ld(c.lookup_ns)) * 1e-9;
  s.offload_helped = ld(c.offload_helped);
  s.copies_in_flight = in_flight_.load(std::memory_order_relaxed);
  s.has_host = host_ != nullptr;
  s.has_disk = disk_ != nullptr;
  if (host_) s.host = host_->stats();
  if (disk_) s.disk = disk_->stats();
  return s;
}

}  // namespace kvmesh
