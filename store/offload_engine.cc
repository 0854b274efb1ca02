#include "store/offload_engine.h"

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
  void Add(std::int64_t n_bytes, std::int64_t n_ns) {
    blocks.fetch_add(1, std::memory_order_relaxed);
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
      onboard_corrupt{0}, onboard_failed{0};
};

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
  if (ShouldCopy(block)) CopyOut(block);  // the bytes are intact only during this call
}

void OffloadEngine::OnEvictDeferrable(const EvictedBlock& block, MoveOutTicket& ticket) {
  if (options_.copy_threads == 0) {
    OnEvict(block);  // synchronous: the ticket is left, the slot is reused when this returns
    return;
  }
  if (!ShouldCopy(block)) return;
  Started();
  auto mine = std::make_shared<MoveOutTicket>(std::move(ticket));
  copy_pool_->Submit([this, block, mine] {
    CopyOut(block);
    mine->Complete();  // the block may be reused from now on
    Finished();
  });
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
  std::int64_t n = 0;
  for (const ContentId& id : ids) {
    for (int p = 0; p < num_pools(); ++p) {
      const TierPoolId pool{p};
      if (!(host_ && host_->Contains(pool, id)) && !(disk_ && disk_->Contains(pool, id)) &&
          !(disk_ && Staged(pool, id) != nullptr)) {
        return n;
      }
    }
    ++n;
  }
  return n;
}

void OffloadEngine::CopyIn(OnboardJob& job, std::size_t i) {
  KvTier used = KvTier::kHost;
  for (int p = 0; p < num_pools(); ++p) {
    const TierPoolId pool{p};
    const KvPoolView& dst = options_.pools[p];
    const std::int64_t block = job.blocks[i * static_cast<std::size_t>(num_pools()) + p].value;
    Status st = Status::NotFound("no tier");
    if (host_) {
      const auto start = SteadyClock::now();
      st = host_->Get(pool, job.ids[i], dst, block);
      if (st.ok()) counters_->onboard_host.Add(block_bytes_[p], NanosSince(start));
      if (st.code() == StatusCode::kCorruption) {
        counters_->onboard_corrupt.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (!st.ok() && disk_) {
      if (auto staged = Staged(pool, job.ids[i]); staged != nullptr) {  // being spilled
        const auto start = SteadyClock::now();
        const Status s = codecs_[p].Decode(*staged, job.ids[i], dst, block);
        if (s.ok()) {
          counters_->onboard_host.Add(block_bytes_[p], NanosSince(start));
          st = s;
        }
      }
    }
    if (!st.ok() && disk_) {
      const auto start = SteadyClock::now();
      const Status d = disk_->Get(pool, job.ids[i], dst, block);
      if (d.ok()) {
        counters_->onboard_disk.Add(block_bytes_[p], NanosSince(start));
        used = KvTier::kDisk;
        st = d;
      } else {
        if (d.code() == StatusCode::kCorruption) {
          counters_->onboard_corrupt.fetch_add(1, std::memory_order_relaxed);
        }
        if (st.code() != StatusCode::kCorruption) st = d;
      }
    }
    if (!st.ok()) {  // corrupt reads were counted where they happened
      if (st.code() == StatusCode::kNotFound) {
        counters_->onboard_missing.fetch_add(1, std::memory_order_relaxed);
      } else if (st.code() != StatusCode::kCorruption) {
        counters_->onboard_failed.fetch_add(1, std::memory_order_relaxed);
      }
      job.status[i] = st;
      return;
    }
  }
  job.status[i] = Status::Ok();
  job.source[i] = used;
}

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
  job->remaining.store(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  job->done = std::move(done);
  Started();
  for (std::size_t i = 0; i < n; ++i) {
    copy_pool_->Submit([this, job, i] {
      CopyIn(*job, i);
      if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      OnboardResult r;
      while (r.restored < static_cast<std::int64_t>(job->ids.size()) &&
             job->status[static_cast<std::size_t>(r.restored)].ok()) {
        const KvTier t = job->source[static_cast<std::size_t>(r.restored)];
        r.sources.push_back(t);
        (t == KvTier::kDisk ? r.from_disk : r.from_host) += 1;
        ++r.restored;
      }
      if (r.restored < static_cast<std::int64_t>(job->ids.size())) {
        r.stop_reason = job->status[static_cast<std::size_t>(r.restored)];
      }
      job->done(std::move(r));
      Finished();
    });
  }
}

OnboardResult OffloadEngine::Onboard(std::span<const ContentId> ids,
                                     std::span<const BlockId> blocks) {
  Mutex mu;
  std::condition_variable cv;
  bool finished = false;
  OnboardResult result;
  OnboardAsync(std::vector<ContentId>(ids.begin(), ids.end()),
               std::vector<BlockId>(blocks.begin(), blocks.end()), [&](OnboardResult r) {
                 MutexLock lock(&mu);
                 result = std::move(r);
                 finished = true;
                 cv.notify_all();
               });
  MutexLock lock(&mu);
  AwaitCondition(cv, mu, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return finished; });
  return result;
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
