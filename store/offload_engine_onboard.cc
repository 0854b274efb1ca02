// OffloadEngine's onboard: tier blocks restored into pool blocks (store/offload_engine.h,
// "Onboard"), through staging for device pools.
#include <algorithm>

#include "common/log.h"
#include "common/strings.h"
#include "store/offload_engine.h"
#include "store/offload_engine_internal.h"

namespace kvmesh {

using offload_internal::kOnboardRangeBytes;
using offload_internal::NanosSince;
using offload_internal::SteadyClock;

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
  if (!staging_) {
    ReadFromTiers(job, begin, end, options_.pools, /*staged=*/false);
    return;
  }
  DeviceStaging::Lease lease = staging_->Acquire();
  const auto capacity = static_cast<std::size_t>(lease.capacity());
  bool run_ended = false;  // a block of this range failed: the blocks after it are not published
  for (std::size_t b = begin; b < end; b += capacity) {
    const std::size_t e = std::min(end, b + capacity);
    ReadFromTiers(job, b, e, lease.views(), /*staged=*/true);  // counted as for host pools
    if (!run_ended) run_ended = !StagedToDevice(job, b, e, lease);
  }
}

bool OffloadEngine::StagedToDevice(OnboardJob& job, std::size_t begin, std::size_t end,
                                   DeviceStaging::Lease& lease) {
  const auto np = static_cast<std::size_t>(num_pools());
  // The leading run of blocks that verified in every pool: a failed block ends the restore, so
  // neither it nor those after it are copied to the device.
  std::size_t run_end = begin;
  std::int64_t from_host = 0;
  std::int64_t from_disk = 0;
  for (; run_end < end && job.status[run_end].ok(); ++run_end) {
    ++(job.source[run_end] == KvTier::kDisk ? from_disk : from_host);
  }
  if (run_end == begin) return false;
  std::vector<BlockCopyPair> pairs(run_end - begin);
  for (std::size_t p = 0; p < np; ++p) {
    for (std::size_t i = begin; i < run_end; ++i) {
      pairs[i - begin] = {static_cast<std::int64_t>(i - begin), job.blocks[i * np + p].value};
    }
    const auto start = SteadyClock::now();
    Status st = lease.ToDevice(static_cast<int>(p), pairs);
    const std::int64_t ns = NanosSince(start);
    counters_->onboard_host.AddTime(ns * from_host / (from_host + from_disk));
    counters_->onboard_disk.AddTime(ns * from_disk / (from_host + from_disk));
    if (st.ok()) continue;
    KVMESH_LOG_WARN("onboard staging copy failed pool {} blocks {} error {}", p, pairs.size(),
                    st.ToString());
    for (std::size_t i = begin; i < run_end; ++i) FailBlock(job, i, st);
    return false;
  }
  return run_end == end;
}

void OffloadEngine::ReadFromTiers(OnboardJob& job, std::size_t begin, std::size_t end,
                                  std::span<const KvPoolView> dsts, bool staged) {
  const auto np = static_cast<std::size_t>(num_pools());
  // Where block i of pool p goes: a staging block, or the job's destination.
  const auto dst_block = [&](std::size_t i, std::size_t p) {
    return staged ? static_cast<std::int64_t>(i - begin) : job.blocks[i * np + p].value;
  };
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
    const KvPoolView& dst = dsts[static_cast<std::size_t>(p)];
    to_disk.clear();
    for (std::size_t i = begin; i < end; ++i) {
      if (!job.status[i].ok()) continue;  // another pool's block of it failed
      const std::int64_t block = dst_block(i, static_cast<std::size_t>(p));
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
      disk_blocks.push_back(dst_block(i, static_cast<std::size_t>(p)));
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

}  // namespace kvmesh
