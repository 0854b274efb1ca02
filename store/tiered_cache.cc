#include "store/tiered_cache.h"

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

// Restored blocks remembered for the admission that reuses them; past this, forgotten (their
// later reuse then counts as a pool hit).
constexpr std::size_t kMaxRememberedSources = 1 << 20;

// Plans made again, at most, while prefetches finish or are waited for (then a plan is used as
// it is: a block restored twice is counted in restore_duplicates).
constexpr int kMaxPlanAttempts = 4;

}  // namespace

struct TieredCache::Inflight {
  bool done = false;  // guarded by TieredCache::mu_
};

Result<std::unique_ptr<TieredCache>> TieredCache::Create(TieredCacheOptions options) {
  if (options.env.pool_memory.empty()) {
    return Status::InvalidArgument("tiered cache: env.pool_memory is empty (the pools' memory)");
  }
  if (options.env.eviction_listener != nullptr) {
    return Status::InvalidArgument("tiered cache: env.eviction_listener must be null");
  }
  std::unique_ptr<TieredCache> cache(new TieredCache());
  options.offload.pools = options.env.pool_memory;
  const int copy_threads = options.offload.copy_threads;
  KVMESH_ASSIGN_OR_RETURN(cache->engine_, OffloadEngine::Create(std::move(options.offload)));
  options.env.eviction_listener = cache->engine_.get();
  if (cache->engine_->device_pools() && !options.env.block_copy) {
    // Copy-on-partial-reuse between device blocks: on the pool's device, not cpu::BlockCopy. The
    // engine exists before the manager and is destroyed after it.
    options.env.block_copy = [engine = cache->engine_.get()](const BlockCopyArgs& args) {
      return engine->CopyPoolBlocks(args);
    };
  }
  KVMESH_ASSIGN_OR_RETURN(cache->manager_,
                          BlockManager::Create(options.manager, std::move(options.env)));
  cache->publisher_ = std::make_unique<ThreadPool>(copy_threads > 0 ? 1 : 0, "kvm-publish");
  return cache;
}

TieredCache::~TieredCache() {
  if (manager_ == nullptr) return;
  WaitForPrefetches();
  engine_->Drain();
  publisher_.reset();
  manager_.reset();
  engine_.reset();
}

Result<TieredCache::CheckedPlan> TieredCache::PlanAgainstPrefetches(
    std::span<const Token> prompt, const SequenceOptions& options) {
  for (int attempt = 1;; ++attempt) {
    std::int64_t finished_before = 0;
    std::function<void()> after_plan;
    {
      MutexLock lock(&mu_);
      finished_before = prefetches_finished_;
      if (after_plan_for_testing_) after_plan = after_plan_for_testing_;
    }
    CheckedPlan out;
    KVMESH_ASSIGN_OR_RETURN(out.plan, manager_->PlanRestore(prompt, options));
    if (after_plan) after_plan();
    MutexLock lock(&mu_);
    const auto first = static_cast<std::size_t>(out.plan.pool_blocks);
    // A prefetch that finished while the plan was made published blocks the plan may not show,
    // and is no longer in flight to be waited for: plan again, or they are restored twice.
    if (first < out.plan.content_ids.size() && prefetches_finished_ != finished_before &&
        attempt < kMaxPlanAttempts) {
      continue;
    }
    for (std::size_t i = first; i < out.plan.content_ids.size(); ++i) {
      auto it = inflight_.find(out.plan.content_ids[i]);
      if (it == inflight_.end()) continue;
      out.prefetching.push_back(it->second);
      if (i == first) out.first_prefetching = true;
    }
    return out;
  }
}

Result<RestorePlan> TieredCache::PlanRestore(std::span<const Token> prompt,
                                             const SequenceOptions& options) {
  KVMESH_ASSIGN_OR_RETURN(CheckedPlan checked, PlanAgainstPrefetches(prompt, options));
  return std::move(checked.plan);
}

Result<RestorePlan> TieredCache::PlanAfterPrefetches(std::span<const Token> prompt,
                                                     const SequenceOptions& options) {
  for (int attempt = 1;; ++attempt) {
    KVMESH_ASSIGN_OR_RETURN(CheckedPlan checked, PlanAgainstPrefetches(prompt, options));
    if (checked.prefetching.empty() || attempt == kMaxPlanAttempts) return std::move(checked.plan);
    MutexLock lock(&mu_);
    if (attempt == 1) ++counts_.prefetch_waits;
    AwaitCondition(cv_, mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
      for (const auto& w : checked.prefetching) {
        if (!w->done) return false;
      }
      return true;
    });
  }
}

void TieredCache::RememberSources(std::span<const ContentId> ids, std::span<const KvTier> sources) {
  MutexLock lock(&mu_);
  if (sources_.size() + ids.size() > kMaxRememberedSources) sources_.clear();
  for (std::size_t i = 0; i < ids.size() && i < sources.size(); ++i) {
    sources_[ids[i]] = sources[i] == KvTier::kDisk ? HitSource::kDisk : HitSource::kHost;
  }
}

void TieredCache::MarkRemote(std::span<const ContentId> ids) {
  MutexLock lock(&mu_);
  if (sources_.size() + ids.size() > kMaxRememberedSources) sources_.clear();
  for (const ContentId& id : ids) sources_[id] = HitSource::kRemote;
}

AdmissionHits TieredCache::CountAdmission(const RestorePlan& plan, const AddSequenceResult& result,
                                          std::int64_t num_positions) {
  AdmissionHits hits;
  MutexLock lock(&mu_);
  for (std::int64_t i = 0; i < result.reused_blocks; ++i) {
    auto it = i < static_cast<std::int64_t>(plan.content_ids.size())
                  ? sources_.find(plan.content_ids[static_cast<std::size_t>(i)])
                  : sources_.end();
    if (it == sources_.end()) {
      ++hits.pool_blocks;
      continue;
    }
    switch (it->second) {
      case HitSource::kHost: ++hits.host_blocks; break;
      case HitSource::kDisk: ++hits.disk_blocks; break;
      case HitSource::kRemote: ++hits.remote_blocks; break;
    }
    sources_.erase(it);
  }
  hits.missed_blocks = num_positions - result.reused_blocks;
  ++counts_.admissions;
  counts_.input_blocks += num_positions;
  counts_.pool_hit_blocks += hits.pool_blocks;
  counts_.host_hit_blocks += hits.host_blocks;
  counts_.disk_hit_blocks += hits.disk_blocks;
  counts_.remote_hit_blocks += hits.remote_blocks;
  counts_.missed_blocks += hits.missed_blocks;
  return hits;
}

Result<AddSequenceResult> TieredCache::AddSequence(RequestId request, std::span<const Token> prompt,
                                                   const SequenceOptions& options,
                                                   AdmissionHits* hits) {
  KVMESH_ASSIGN_OR_RETURN(const RestorePlan plan, PlanAfterPrefetches(prompt, options));
  const std::span<const ContentId> candidates =
      std::span<const ContentId>(plan.content_ids)
          .subspan(static_cast<std::size_t>(plan.pool_blocks));
  PinnedBlocks restored_pins;  // keeps the restored chain until the sequence pins it
  const std::int64_t held = engine_->CountHeld(candidates);
  if (held > 0) {
    // Pinned before ReserveRestore evicts pool blocks into the host tier, until they are read.
    HostTier::RestorePins host_pins =
        engine_->PinHostCopies(candidates.first(static_cast<std::size_t>(held)));
    Result<RestoreReservation> reserved = manager_->ReserveRestore(prompt, options, plan, held);
    if (reserved.ok() && !reserved->empty()) {
      const std::int64_t n = reserved->count();
      std::vector<BlockId> blocks;
      for (std::int64_t i = 0; i < n; ++i) {
        for (int p = 0; p < manager_->num_pools(); ++p) blocks.push_back(reserved->block(i, p));
      }
      const OnboardResult onboard =
          engine_->Onboard(candidates.first(static_cast<std::size_t>(n)), blocks);
      host_pins.Release();
      Result<PublishedRestore> published =
          manager_->PublishRestore(std::move(*reserved), onboard.restored, /*keep_pinned=*/true);
      if (published.ok()) {
        restored_pins = std::move(published->pins);
        RememberSources(candidates.first(static_cast<std::size_t>(onboard.restored)),
                        onboard.sources);
        MutexLock lock(&mu_);
        counts_.restore_duplicates += published->duplicates;
      } else {
        KVMESH_LOG_WARN("restore not published error {}", published.status().ToString());
      }
    } else if (!reserved.ok()) {
      // The tree changed since the plan (kFailedPrecondition): admit without restoring.
      KVMESH_LOG_DEBUG("restore skipped error {}", reserved.status().ToString());
    }
  }
  Result<AddSequenceResult> result = manager_->AddSequence(request, prompt, options, plan.path);
  restored_pins.Release();
  if (!result.ok()) return result.status();
  const std::int64_t t = manager_->tokens_per_block();
  const AdmissionHits counted =
      CountAdmission(plan, *result, (static_cast<std::int64_t>(prompt.size()) + t - 1) / t);
  if (hits != nullptr) *hits = counted;
  return result;
}

Result<std::int64_t> TieredCache::Prefetch(std::span<const Token> prompt,
                                           const SequenceOptions& options) {
  KVMESH_ASSIGN_OR_RETURN(const CheckedPlan checked, PlanAgainstPrefetches(prompt, options));
  const RestorePlan& plan = checked.plan;
  const std::span<const ContentId> candidates =
      std::span<const ContentId>(plan.content_ids)
          .subspan(static_cast<std::size_t>(plan.pool_blocks));
  if (candidates.empty() || checked.first_prefetching) return 0;  // nothing, or being prefetched
  const std::int64_t held = engine_->CountHeld(candidates);
  if (held == 0) return 0;
  // As in AddSequence; held until the copies are done.
  auto host_pins = std::make_shared<HostTier::RestorePins>(
      engine_->PinHostCopies(candidates.first(static_cast<std::size_t>(held))));
  Result<RestoreReservation> reserved = manager_->ReserveRestore(prompt, options, plan, held);
  if (!reserved.ok()) {
    if (reserved.status().code() == StatusCode::kFailedPrecondition) return 0;
    return reserved.status();
  }
  if (reserved->empty()) return 0;
  const std::int64_t n = reserved->count();
  std::vector<ContentId> ids(candidates.begin(), candidates.begin() + n);
  std::vector<BlockId> blocks;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int p = 0; p < manager_->num_pools(); ++p) blocks.push_back(reserved->block(i, p));
  }
  auto op = std::make_shared<Inflight>();
  {
    MutexLock lock(&mu_);
    for (const ContentId& id : ids) inflight_.emplace(id, op);
    ++prefetches_running_;
    ++counts_.prefetches;
  }
  auto reservation = std::make_shared<RestoreReservation>(std::move(*reserved));
  auto finish = [this, reservation, op, ids](const OnboardResult& r) {
    Result<PublishedRestore> published =
        manager_->PublishRestore(std::move(*reservation), r.restored, /*keep_pinned=*/false);
    if (published.ok()) {
      RememberSources(std::span<const ContentId>(ids).first(static_cast<std::size_t>(r.restored)),
                      r.sources);
    } else {
      KVMESH_LOG_WARN("prefetch not published error {}", published.status().ToString());
    }
    MutexLock lock(&mu_);
    if (published.ok()) {
      counts_.prefetched_blocks += published->published;
      counts_.restore_duplicates += published->duplicates;
    }
    for (const ContentId& id : ids) {
      auto it = inflight_.find(id);
      if (it != inflight_.end() && it->second == op) inflight_.erase(it);
    }
    op->done = true;
    --prefetches_running_;
    ++prefetches_finished_;
    cv_.notify_all();
  };
  // The copies run on the engine's workers; publishing takes the manager's lock, which a worker
  // must not, so it goes to the publisher thread.
  engine_->OnboardAsync(std::move(ids), std::move(blocks),
                        [this, finish, host_pins](OnboardResult r) {
                          host_pins->Release();
                          publisher_->Submit([finish, r = std::move(r)] { finish(r); });
                        });
  return n;
}

void TieredCache::SetAfterPlanForTesting(std::function<void()> f) {
  MutexLock lock(&mu_);
  after_plan_for_testing_ = std::move(f);
}

void TieredCache::WaitForPrefetches() {
  MutexLock lock(&mu_);
  AwaitCondition(cv_, mu_,
                 [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return prefetches_running_ == 0; });
}

TieredCacheStats TieredCache::stats() const {
  TieredCacheStats s;
  {
    MutexLock lock(&mu_);
    s = counts_;
  }
  s.offload = engine_->stats();
  return s;
}

}  // namespace kvmesh
