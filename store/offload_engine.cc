#include "store/offload_engine.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::int64_t NanosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count();
}

struct TrafficCounters {
  std::atomic<std::int64_t> blocks{0}, bytes{0}, ns{0};
  const CopyObserver* observer = nullptr;  // the options' on_copy, when set
  CopyDirection direction = CopyDirection::kOffload;
  KvTier tier = KvTier::kHost;
  void Bind(const CopyObserver& o, CopyDirection d, KvTier t) {
    observer = o ? &o : nullptr;
    direction = d;
    tier = t;
  }
  void Add(std::int64_t n_bytes, std::int64_t n_ns) { Add(1, n_bytes, n_ns); }
  // n_blocks copied in one go (a restore range): the observer sees them as one copy.
  void Add(std::int64_t n_blocks, std::int64_t n_bytes, std::int64_t n_ns) {
    blocks.fetch_add(n_blocks, std::memory_order_relaxed);
    bytes.fetch_add(n_bytes, std::memory_order_relaxed);
    ns.fetch_add(n_ns, std::memory_order_relaxed);
    if (observer != nullptr) (*observer)(direction, tier, n_bytes, n_ns);
  }
  [[nodiscard]] TierTraffic Load() const {
    TierTraffic t;
    t.blocks = blocks.load(std::memory_order_relaxed);
    t.bytes = bytes.load(std::memory_order_relaxed);
    t.copy_s = static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
    return t;
  }
};

}  // namespace

struct OffloadEngine::Counters {
  TrafficCounters offload, spill, onboard_host, onboard_disk;
  std::atomic<std::int64_t> evictions_seen{0}, skipped_priority{0}, skipped_clean{0},
      offload_failed{0}, spill_skipped_clean{0}, spill_failed{0}, onboard_missing{0},
      onboard_corrupt{0}, onboard_failed{0}, listener_ns{0}, lookup_ns{0};
};

namespace {
// A restore's ranges: at least this many bytes of blocks each.
constexpr std::int64_t kOnboardRangeBytes = 1 << 20;
// Offloads a worker takes from the queue at a time (at most).
constexpr std::size_t kOffloadBatch = 32;
}  // namespace

struct OffloadEngine::OnboardJob {
  std::vector<ContentId> ids;
  std::vector<BlockId> blocks;
  std::vector<Status> status;  // [ids]
  std::vector<KvTier> source;  // [ids]
  std::atomic<std::int64_t> remaining{0};
  std::function<void(OnboardResult)> done;
};

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
  if (options_.disk) {
    RocksDbTierOptions d = *options_.disk;
    d.pools.clear();
    for (int p = 0; p < num_pools(); ++p) {
      d.pools.push_back({TierPoolId{p}, options_.pools[p].layout, options_.pools[p].pool_scale});
    }
    KVMESH_ASSIGN_OR_RETURN(disk_, RocksDbTier::Open(std::move(d)));
  }
  const int workers = options_.copy_threads;
  spill_pool_ = std::make_unique<ThreadPool>(workers > 0 ? 1 : 0);
  copy_pool_ = std::make_unique<ThreadPool>(workers);
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
}

void OffloadEngine::Started() {
  MutexLock lock(&mu_);
  ++in_flight_;
}

void OffloadEngine::Finished() {
  MutexLock lock(&mu_);
  if (--in_flight_ == 0) cv_.notify_all();
}

void OffloadEngine::Drain() {
  MutexLock lock(&mu_);
  AwaitCondition(cv_, mu_, [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return in_flight_ == 0; });
}

bool OffloadEngine::IsClean(const EvictedBlock& block) {
  const TierPoolId pool{block.pool.value};
  return (host_ && host_->Contains(pool, block.content_id)) ||
         (disk_ && disk_->Contains(pool, block.content_id));
}

void OffloadEngine::CopyOut(const EvictedBlock& block) {
  const int p = block.pool.value;
  const auto start = SteadyClock::now();
  const Status st = top()->Put(TierPoolId{p}, block.content_id, options_.pools[p],
                               block.block.value, block.priority);
  if (st.ok()) {
    counters_->offload.Add(block_bytes_[p], NanosSince(start));
  } else {
    counters_->offload_failed.fetch_add(1, std::memory_order_relaxed);
    KVMESH_LOG_DEBUG("offload failed pool {} id {} error {}", p, block.content_id.ToHex(),
                     st.ToString());
  }
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
  if (ShouldCopy(block)) CopyOut(block);  // the bytes are intact only during this call
  counters_->listener_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
}

void OffloadEngine::OnEvictDeferrable(const EvictedBlock& block, MoveOutTicket& ticket) {
  const auto start = SteadyClock::now();
  if (options_.copy_threads == 0) {
    OnEvict(block);  // synchronous: the ticket is left, the slot is reused when this returns
  } else if (ShouldCopy(block)) {
    bool start_drainer = false;
    {
      MutexLock lock(&mu_);
      ++in_flight_;
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
      MutexLock lock(&mu_);
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
    for (PendingOffload& p : batch) {
      CopyOut(p.block);
      p.ticket.Complete();  // the block may be reused from now on
    }
    {
      MutexLock lock(&mu_);
      in_flight_ -= static_cast<std::int64_t>(batch.size());
      if (in_flight_ == 0) cv_.notify_all();
    }
    batch.clear();
  }
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
  {
    MutexLock lock(&mu_);
    AwaitCondition(cv_, mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
      return spill_queued_bytes_ == 0 ||
             spill_queued_bytes_ + size <= options_.max_spill_queue_bytes;
    });
    spill_queued_bytes_ += size;
    ++in_flight_;
    staged_[{victim.pool.value, victim.id}] = staged;
  }
  spill_pool_->Submit(
      [this, staged, size, bytes, pool = victim.pool, id = victim.id, priority = victim.priority] {
        const auto start = SteadyClock::now();
        const Status st = disk_->PutBundle(pool, id, *staged, priority);
        if (st.ok()) {
          counters_->spill.Add(bytes, NanosSince(start));
        } else {
          counters_->spill_failed.fetch_add(1, std::memory_order_relaxed);
          KVMESH_LOG_DEBUG("spill failed pool {} id {} error {}", pool.value, id.ToHex(),
                           st.ToString());
        }
        MutexLock lock(&mu_);
        spill_queued_bytes_ -= size;
        auto it = staged_.find({pool.value, id});
        if (it != staged_.end() && it->second == staged) staged_.erase(it);  // RocksDB holds it now
        --in_flight_;
        cv_.notify_all();
      });
  return Status::Ok();
}

std::shared_ptr<const std::vector<std::byte>> OffloadEngine::Staged(TierPoolId pool,
                                                                    const ContentId& id) {
  MutexLock lock(&mu_);
  auto it = staged_.find({pool.value, id});
  return it == staged_.end() ? nullptr : it->second;
}

std::int64_t OffloadEngine::CountHeld(std::span<const ContentId> ids) {
  const auto start = SteadyClock::now();
  std::int64_t n = 0;
  for (const ContentId& id : ids) {
    bool all = true;
    for (int p = 0; p < num_pools() && all; ++p) {
      const TierPoolId pool{p};
      all = (host_ && host_->Contains(pool, id)) || (disk_ && disk_->Contains(pool, id)) ||
            (disk_ && Staged(pool, id) != nullptr);
    }
    if (!all) break;
    ++n;
  }
  counters_->lookup_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
  return n;
}

void OffloadEngine::FailBlock(OnboardJob& job, std::size_t i, Status st) {
  // Corrupt reads were counted where they happened.
  if (st.code() == StatusCode::kNotFound) {
    counters_->onboard_missing.fetch_add(1, std::memory_order_relaxed);
  } else if (st.code() != StatusCode::kCorruption) {
    counters_->onboard_failed.fetch_add(1, std::memory_order_relaxed);
  }
  job.status[i] = std::move(st);
}

void OffloadEngine::CopyIn(OnboardJob& job, std::size_t begin, std::size_t end) {
  const auto np = static_cast<std::size_t>(num_pools());
  for (std::size_t i = begin; i < end; ++i) {
    job.status[i] = Status::Ok();
    job.source[i] = KvTier::kHost;
  }
  std::vector<std::size_t> to_disk;  // blocks whose pool-p block the RocksDB tier is to give
  std::vector<ContentId> disk_ids;
  std::vector<std::int64_t> disk_blocks;
  std::vector<Status> disk_status;
  for (int p = 0; p < num_pools(); ++p) {
    const TierPoolId pool{p};
    const KvPoolView& dst = options_.pools[p];
    to_disk.clear();
    for (std::size_t i = begin; i < end; ++i) {
      if (!job.status[i].ok()) continue;  // another pool's block of it failed
      const std::int64_t block = job.blocks[i * np + p].value;
      Status st = Status::NotFound("no tier");
      if (host_) {
        const auto start = SteadyClock::now();
        st = host_->GetForRestore(pool, job.ids[i], dst, block);
        if (st.ok()) counters_->onboard_host.Add(block_bytes_[p], NanosSince(start));
        if (st.code() == StatusCode::kCorruption) {
          counters_->onboard_corrupt.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (!st.ok() && disk_) {
        if (auto staged = Staged(pool, job.ids[i]); staged != nullptr) {  // being spilled
          const auto start = SteadyClock::now();
          if (codecs_[p].DecodeOnePass(*staged, job.ids[i], dst, block).ok()) {
            counters_->onboard_host.Add(block_bytes_[p], NanosSince(start));
            st = Status::Ok();
          }
        }
      }
      if (st.ok()) continue;
      if (!disk_) {
        FailBlock(job, i, std::move(st));
        continue;
      }
      job.status[i] = std::move(st);  // the host's answer, until the disk's is in
      to_disk.push_back(i);
    }
    if (to_disk.empty()) continue;
    disk_ids.clear();
    disk_blocks.clear();
    for (std::size_t i : to_disk) {
      disk_ids.push_back(job.ids[i]);
      disk_blocks.push_back(job.blocks[i * np + p].value);
    }
    disk_status.assign(to_disk.size(), Status::Ok());
    const auto start = SteadyClock::now();
    disk_->GetManyForRestore(pool, disk_ids, dst, disk_blocks, disk_status);
    const std::int64_t ns = NanosSince(start);
    std::int64_t restored = 0;
    for (std::size_t j = 0; j < to_disk.size(); ++j) {
      const std::size_t i = to_disk[j];
      Status& d = disk_status[j];
      if (d.ok()) {
        job.status[i] = Status::Ok();
        job.source[i] = KvTier::kDisk;
        ++restored;
        continue;
      }
      if (d.code() == StatusCode::kCorruption) {
        counters_->onboard_corrupt.fetch_add(1, std::memory_order_relaxed);
      }
      // A corrupt host copy is the reason to report over a disk miss.
      FailBlock(job, i, job.status[i].IsCorruption() ? job.status[i] : std::move(d));
    }
    if (restored > 0) counters_->onboard_disk.Add(restored, restored * block_bytes_[p], ns);
  }
}

std::size_t OffloadEngine::OnboardRange() const {
  std::int64_t bytes = 0;
  for (std::int64_t b : block_bytes_) bytes += b;
  return static_cast<std::size_t>(std::max<std::int64_t>(1, kOnboardRangeBytes / bytes));
}

namespace {

// The leading run of restored blocks and why it stopped.
OnboardResult ResultOf(const std::vector<Status>& status, const std::vector<KvTier>& source) {
  OnboardResult r;
  while (r.restored < static_cast<std::int64_t>(status.size()) &&
         status[static_cast<std::size_t>(r.restored)].ok()) {
    const KvTier t = source[static_cast<std::size_t>(r.restored)];
    r.sources.push_back(t);
    (t == KvTier::kDisk ? r.from_disk : r.from_host) += 1;
    ++r.restored;
  }
  if (r.restored < static_cast<std::int64_t>(status.size())) {
    r.stop_reason = status[static_cast<std::size_t>(r.restored)];
  }
  return r;
}

}  // namespace

void OffloadEngine::OnboardAsync(std::vector<ContentId> ids, std::vector<BlockId> blocks,
                                 std::function<void(OnboardResult)> done) {
  KVMESH_CHECK(blocks.size() == ids.size() * static_cast<std::size_t>(num_pools()))
      << "onboard of " << ids.size() << " blocks with " << blocks.size() << " destinations";
  if (ids.empty()) {
    done(OnboardResult{});
    return;
  }
  auto job = std::make_shared<OnboardJob>();
  const std::size_t n = ids.size();
  job->ids = std::move(ids);
  job->blocks = std::move(blocks);
  job->status.assign(n, Status::Ok());
  job->source.assign(n, KvTier::kNone);
  job->done = std::move(done);
  const std::size_t range = OnboardRange();
  const std::size_t ranges = (n + range - 1) / range;
  job->remaining.store(static_cast<std::int64_t>(ranges), std::memory_order_relaxed);
  Started();
  for (std::size_t begin = 0; begin < n; begin += range) {
    copy_pool_->Submit([this, job, begin, end = std::min(n, begin + range)] {
      CopyIn(*job, begin, end);
      if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      job->done(ResultOf(job->status, job->source));
      Finished();
    });
  }
}

OnboardResult OffloadEngine::Onboard(std::span<const ContentId> ids,
                                     std::span<const BlockId> blocks) {
  KVMESH_CHECK(blocks.size() == ids.size() * static_cast<std::size_t>(num_pools()))
      << "onboard of " << ids.size() << " blocks with " << blocks.size() << " destinations";
  OnboardJob job;
  const std::size_t n = ids.size();
  job.ids.assign(ids.begin(), ids.end());
  job.blocks.assign(blocks.begin(), blocks.end());
  job.status.assign(n, Status::Ok());
  job.source.assign(n, KvTier::kNone);
  const std::size_t range = OnboardRange();
  if (n <= range) {
    CopyIn(job, 0, n);  // small: in this thread, no hand-off
  } else {
    // The caller takes part: its ranges and the workers' run at once.
    copy_pool_->ParallelFor(static_cast<std::int64_t>(n), static_cast<std::int64_t>(range),
                            [&](std::int64_t b, std::int64_t e) {
                              CopyIn(job, static_cast<std::size_t>(b), static_cast<std::size_t>(e));
                            });
  }
  return ResultOf(job.status, job.source);
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
  {
    MutexLock lock(&mu_);
    s.copies_in_flight = in_flight_;
  }
  s.has_host = host_ != nullptr;
  s.has_disk = disk_ != nullptr;
  if (host_) s.host = host_->stats();
  if (disk_) s.disk = disk_->stats();
  return s;
}

}  // namespace kvmesh
