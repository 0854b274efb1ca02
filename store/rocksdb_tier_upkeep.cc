// RocksDbTier upkeep: the durability flushes (kFlush), the record of completed flushes, and the
// capacity on disk (sampling, the learned amplification, eviction down to the budget). One thread
// per tier, waking every kSampleInterval or when enough bytes wait for a flush.
#include <rocksdb/db.h>
#include <rocksdb/experimental.h>
#include <rocksdb/sst_file_manager.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "store/rocksdb_tier.h"
#include "store/rocksdb_tier_folder.h"
#include "store/rocksdb_tier_internal.h"

namespace kvmesh {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr auto kSampleInterval = std::chrono::milliseconds(50);
// The amplification follows a higher sample at once and a lower one slowly (about 4 minutes), so
// that the room compactions need, seen at their peaks, is remembered between them.
constexpr double kAmplificationDecay = 0.9998;
constexpr std::int64_t kNudgeIntervalNs = 1'000'000'000;
constexpr double kMaxAmplification = 8.0;
// Blob garbage collection (rocksdb_tier.h, Blob garbage): worth a pass over every blob file when
// the files on disk exceed kGcTrigger x the live bundles plus kGcSlack (the memtables, level-0
// files and SST keys of a small tier); the upkeep thread starts one at most every kGcIntervalNs.
// 1.5 is the amplification the tier assumes of blob files at open; above it, dead bundles are
// taking room that live ones could have.
constexpr double kGcTrigger = 1.5;
constexpr std::int64_t kGcSlack = 4ll << 20;
constexpr std::int64_t kGcIntervalNs = 5'000'000'000;
// A collection without room to rewrite every live bundle goes in steps of the oldest files that
// fit; at most this many, each one compaction of the bundle family.
constexpr int kMaxGcSteps = 8;
// RocksDB's own blob GC in background compactions rewrites the live bundles of the oldest quarter
// of the blob files whether or not they hold garbage; so it runs only while the blob files' garbage
// is above 10% of their bytes, and stops below 5% (hysteresis, so that it does not flap).
constexpr double kBackgroundGcOn = 0.10;
constexpr double kBackgroundGcOff = 0.05;

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

}  // namespace

void RocksDbTier::StartUpkeep() {
  upkeep_ = std::thread([this] { UpkeepLoop(); });
}

bool RocksDbTier::WorthCollecting(std::int64_t on_disk, std::int64_t live) const {
  return options_.enable_blob_files &&
         static_cast<double>(on_disk) >
             kGcTrigger * static_cast<double>(live) + static_cast<double>(kGcSlack);
}

double RocksDbTier::AmplificationSample(std::int64_t on_disk, std::int64_t live) const {
  double sample = static_cast<double>(on_disk) / static_cast<double>(live);
  if (options_.enable_blob_files) {
    sample =
        std::min(sample, (kGcTrigger * static_cast<double>(live) + static_cast<double>(kGcSlack)) /
                             static_cast<double>(live));
  }
  return std::clamp(sample, 1.0, kMaxAmplification);
}

Status RocksDbTier::CompactFamily(const PoolFamilies& p, double age_cutoff) {
  rocksdb::CompactRangeOptions c;
  c.exclusive_manual_compaction = false;  // background flushes and compactions go on meanwhile
  // The last level too (with dynamic level sizes that is where nearly every key is), so that
  // every blob reference is read and every blob file within the cutoff is a candidate.
  c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  c.blob_garbage_collection_policy = rocksdb::BlobGarbageCollectionPolicy::kForce;
  c.blob_garbage_collection_age_cutoff = age_cutoff;
  if (rocksdb::Status s = db_->CompactRange(c, p.data, nullptr, nullptr); !s.ok()) {
    if (s.IsIncomplete() && s.subcode() == rocksdb::Status::kManualCompactionPaused) {
      return Status::Cancelled("rocksdb tier: garbage collection stopped by close");
    }
    return Disable("garbage collection", s);
  }
  return Status::Ok();
}

void RocksDbTier::CollectionDone(SteadyClock::time_point start, std::int64_t before,
                                 std::string_view what) {
  gc_runs_.fetch_add(1, std::memory_order_relaxed);
  gc_done_.store(true, std::memory_order_release);
  std::int64_t live = 0;
  {
    MutexLock lock(&mu_);
    live = ready_bytes_;
  }
  KVMESH_LOG_INFO(
      "rocksdb tier collected blob garbage path {} files {} disk_bytes_before {} "
      "disk_bytes_after {} live_bytes {} seconds {:.3f}",
      options_.path, what, before, sst_files_->GetTotalSize(), live,
      std::chrono::duration<double>(SteadyClock::now() - start).count());
}

Status RocksDbTier::CollectGarbage() {
  if (disabled()) return DisabledError();
  if (!options_.enable_blob_files) return Status::Ok();  // compactions drop dead values themselves
  const auto start = SteadyClock::now();
  const auto before = static_cast<std::int64_t>(sst_files_->GetTotalSize());
  KVMESH_RETURN_IF_ERROR(FlushNow());  // erases and evictions in the memtables reach the files
  for (const auto& p : pools_) KVMESH_RETURN_IF_ERROR(CompactFamily(*p, 1.0));
  CollectionDone(start, before, "all");
  return Status::Ok();
}

Status RocksDbTier::CollectGarbageWithinCapacity() {
  if (disabled()) return DisabledError();
  if (!options_.enable_blob_files) return Status::Ok();
  const auto live = [this] {
    MutexLock lock(&mu_);
    return ready_bytes_;
  };
  const auto on_disk = [this] { return static_cast<std::int64_t>(sst_files_->GetTotalSize()); };
  const auto stopping = [this] {
    MutexLock lock(&upkeep_mu_);
    return upkeep_stop_;
  };
  // What a collection may rewrite: the room under the capacity, less the slack for new SST files.
  if (options_.capacity_bytes < rocksdb_tier::kMinOnDiskCapacity ||
      live() <= options_.capacity_bytes - on_disk() - kGcSlack) {
    return CollectGarbage();
  }
  const auto start = SteadyClock::now();
  const std::int64_t before = on_disk();
  KVMESH_RETURN_IF_ERROR(FlushNow());
  int steps = 0;
  std::int64_t files = 0;
  while (steps < kMaxGcSteps && WorthCollecting(on_disk(), live())) {
    bool stepped = false;
    for (const auto& p : pools_) {
      rocksdb::ColumnFamilyMetaData meta;
      db_->GetColumnFamilyMetaData(p->data, &meta);
      std::vector<rocksdb::BlobMetaData>& blobs = meta.blob_files;
      std::sort(blobs.begin(), blobs.end(), [](const auto& a, const auto& b) {
        return a.blob_file_number < b.blob_file_number;
      });
      // The oldest files whose live bundles (total less the garbage RocksDB has counted: an
      // upper bound, since erases not yet compacted are not counted) fit in the room.
      const std::int64_t step_start = on_disk();
      const std::int64_t r = options_.capacity_bytes - step_start - kGcSlack;
      std::int64_t rewrite = 0;
      std::int64_t freed = 0;
      std::size_t k = 0;
      for (; k < blobs.size(); ++k) {
        const auto l =
            static_cast<std::int64_t>(blobs[k].total_blob_bytes - blobs[k].garbage_blob_bytes);
        if (rewrite + l > r) break;
        rewrite += l;
        freed += static_cast<std::int64_t>(blobs[k].blob_file_size);
      }
      if (k == 0) continue;
      // RocksDB collects the files below index floor(cutoff x count) in file-number order.
      KVMESH_RETURN_IF_ERROR(
          CompactFamily(*p, (static_cast<double>(k) + 0.5) / static_cast<double>(blobs.size())));
      // RocksDB deletes the collected files just after the compaction returns, and the next
      // step's room counts on that: wait for it (up to 2 s; kGcSlack covers the new SST files).
      const std::int64_t expected = step_start + rewrite - freed + kGcSlack;
      for (int i = 0; i < 100 && on_disk() > expected && !stopping(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      files += static_cast<std::int64_t>(k);
      stepped = true;
    }
    if (!stepped) break;  // no file fits in the room
    ++steps;
  }
  if (steps == 0) return Status::Ok();  // the upkeep's compaction requests go on
  CollectionDone(start, before, StrCat("oldest ", files, " in ", steps, " steps"));
  return Status::Ok();
}

bool RocksDbTier::StartCollectingGarbage() {
  if (gc_running_.load(std::memory_order_acquire)) return false;
  const std::int64_t now = NowNs();
  if (last_gc_ns_ != 0 && now - last_gc_ns_ < kGcIntervalNs) return false;
  last_gc_ns_ = now;
  if (gc_thread_.joinable()) gc_thread_.join();  // the previous one, finished
  gc_running_.store(true, std::memory_order_release);
  gc_thread_ = std::thread([this] {
    // A failure disabled the tier (logged there); a cancel is the close.
    CollectGarbageWithinCapacity().IgnoreError();
    gc_running_.store(false, std::memory_order_release);
  });
  return true;
}

void RocksDbTier::StopUpkeep() {
  {
    MutexLock lock(&upkeep_mu_);
    upkeep_stop_ = true;
  }
  upkeep_cv_.notify_all();
  if (upkeep_.joinable()) upkeep_.join();
  if (gc_thread_.joinable()) {
    // A garbage collection in progress stops at its next check (CollectGarbage then returns
    // kCancelled; what it had rewritten is kept), so that a close does not wait for it.
    if (gc_running_.load(std::memory_order_acquire)) db_->DisableManualCompaction();
    gc_thread_.join();
  }
}

void RocksDbTier::UpkeepLoop() {
  const auto flush_due = [this] {
    if (options_.durability != DiskDurability::kFlush || disabled()) return false;
    if (unflushed_bytes_.load(std::memory_order_relaxed) >= options_.flush_after_bytes) {
      return true;
    }
    const std::int64_t first = first_unflushed_ns_.load(std::memory_order_relaxed);
    return first != 0 && NowNs() - first >= options_.flush_after_ms * 1'000'000;
  };
  for (;;) {
    {
      MutexLock lock(&upkeep_mu_);
      std::unique_lock<std::mutex> wait(upkeep_mu_.native(), std::adopt_lock);
      upkeep_cv_.wait_for(wait, kSampleInterval, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
        return upkeep_stop_ || flush_due();
      });
      wait.release();  // still held; the MutexLock releases it
      if (upkeep_stop_) return;
    }
    if (disabled()) continue;
    if (flush_due()) {
      // A failure disables the tier (logged once there); the loop then only sleeps.
      FlushNow().IgnoreError();
    }
    SampleCapacity();
    UpdateBackgroundGc();
  }
}

void RocksDbTier::UpdateBackgroundGc() {
  if (!options_.enable_blob_files || options_.disable_auto_compactions || disabled()) return;
  for (const auto& p : pools_) {
    if (p->background_gc_failed) continue;
    std::uint64_t garbage = 0, blob = 0;
    if (!db_->GetIntProperty(p->data, rocksdb::DB::Properties::kLiveBlobFileGarbageSize,
                             &garbage) ||
        !db_->GetIntProperty(p->data, rocksdb::DB::Properties::kLiveBlobFileSize, &blob)) {
      continue;
    }
    const double share = blob > 0 ? static_cast<double>(garbage) / static_cast<double>(blob) : 0;
    const bool want = p->background_gc ? share > kBackgroundGcOff : share > kBackgroundGcOn;
    if (want != p->background_gc) {
      const rocksdb::Status s =
          db_->SetOptions(p->data, {{"enable_blob_garbage_collection", want ? "true" : "false"}});
      if (!s.ok()) {
        p->background_gc_failed = true;
        KVMESH_LOG_WARN(
            "rocksdb tier background blob gc left {} path {} pool {} error {} (the collection at "
            "the write limit still runs)",
            p->background_gc ? "on" : "off", options_.path, p->config.id.value, s.ToString());
      } else {
        p->background_gc = want;
        KVMESH_LOG_DEBUG(
            "rocksdb tier background blob gc {} path {} pool {} garbage_bytes {} blob_bytes {}",
            want ? "on" : "off", options_.path, p->config.id.value, garbage, blob);
      }
    }
  }
  const bool any =
      std::any_of(pools_.begin(), pools_.end(), [](const auto& p) { return p->background_gc; });
  background_gc_on_.store(any, std::memory_order_relaxed);
}

Status RocksDbTier::FlushNow() {
  MutexLock lock(&flush_mu_);
  KVMESH_RETURN_IF_ERROR(PersistRecency());
  // Puts that return after this point count toward the next flush; every put acknowledged up to
  // `acked` is in a memtable this flush persists.
  unflushed_bytes_.store(0, std::memory_order_relaxed);
  first_unflushed_ns_.store(0, std::memory_order_relaxed);
  const std::uint64_t acked = acked_.load(std::memory_order_acquire);
  rocksdb::FlushOptions fo;
  fo.wait = true;
  if (rocksdb::Status s = db_->Flush(fo, handles_); !s.ok()) return Disable("flush", s);
  counters_.flushes.fetch_add(1, std::memory_order_relaxed);
  MarkDurable(acked);
  return Status::Ok();
}

void RocksDbTier::MarkDurable(std::uint64_t ack) {
  MutexLock lock(&mu_);
  if (ack > durable_.load(std::memory_order_relaxed)) {
    durable_.store(ack, std::memory_order_release);
  }
  while (!not_durable_.empty() && not_durable_.front().first <= ack) {
    const auto [a, key] = not_durable_.front();
    not_durable_.pop_front();
    Entry* e = index_.Get(key);
    if (e == nullptr || e->ack != a || e->durable) continue;  // gone
    e->durable = true;
    --not_durable_entries_;
  }
}

void RocksDbTier::OnFlushCompleted(std::uint64_t largest_sequence) {
  MutexLock lock(&record_mu_);
  if (largest_sequence <= recorded_sequence_) return;
  if (Status st = folder_->RecordFlushedSequence(largest_sequence); !st.ok()) {
    // Not recorded: open then checks against an older record (less, never wrongly, detected).
    KVMESH_LOG_DEBUG("rocksdb tier flush record failed path {} error {}", options_.path,
                     st.ToString());
    return;
  }
  recorded_sequence_ = largest_sequence;
}

void RocksDbTier::SampleCapacity() {
  std::uint64_t memtables = 0;
  for (auto* h : handles_) {
    std::uint64_t v = 0;
    if (db_->GetIntProperty(h, rocksdb::DB::Properties::kCurSizeAllMemTables, &v)) memtables += v;
  }
  committed_since_sample_.store(0, std::memory_order_relaxed);  // in the memtables sampled now
  const auto on_disk = static_cast<std::int64_t>(sst_files_->GetTotalSize() + memtables);
  const auto capacity = static_cast<double>(options_.capacity_bytes);
  disk_bytes_.store(on_disk, std::memory_order_relaxed);
  if (options_.capacity_bytes < rocksdb_tier::kMinOnDiskCapacity) {
    // Counted in bundle bytes (see kMinOnDiskCapacity): the budget is the capacity.
  } else if (static_cast<double>(on_disk) >=
             rocksdb_tier::FractionsFor(options_).write_limit * capacity) {
    over_capacity_.store(true, std::memory_order_relaxed);
  } else if (static_cast<double>(on_disk) <
             rocksdb_tier::FractionsFor(options_).resume * capacity) {
    over_capacity_.store(false, std::memory_order_relaxed);
  }
  std::vector<Doomed> victims;
  std::int64_t live = 0;
  {
    MutexLock lock(&mu_);
    // A sample says little while the tier holds almost nothing.
    const std::int64_t min_bytes = std::max<std::int64_t>(options_.capacity_bytes / 100,
                                                          8 * pools_.front()->codec.bundle_bytes());
    if (ready_bytes_ >= min_bytes) {
      const double sample = AmplificationSample(on_disk, ready_bytes_);
      // After a garbage collection the peak it removed is no guide: follow the sample at once.
      const bool collected = gc_done_.exchange(false, std::memory_order_acq_rel);
      amplification_ =
          sample >= amplification_ || collected
              ? sample
              : kAmplificationDecay * amplification_ + (1 - kAmplificationDecay) * sample;
      amplification_ = std::clamp(amplification_, 1.0, kMaxAmplification);
    }
    live = ready_bytes_;
    const std::int64_t budget = LogicalBudget();
    budget_bytes_.store(budget, std::memory_order_relaxed);
    while (used_bytes_ > budget && order_.size() > 0) victims.push_back(EvictOne());
  }
  WriteDeletes(victims, "evict to budget").IgnoreError();  // a failure disables (logged there)
  if (options_.capacity_bytes >= rocksdb_tier::kMinOnDiskCapacity &&
      static_cast<double>(on_disk) >= rocksdb_tier::FractionsFor(options_).resume * capacity) {
    // At the write limit: dead bundles in blob files are collected (a compaction that RocksDB
    // picks by itself collects only the oldest quarter of them); otherwise — or while one runs, or
    // soon after one — a compaction is asked for (nothing while a compaction runs).
    if (!WorthCollecting(on_disk, live) || !StartCollectingGarbage()) NudgeCompaction();
  }
}

std::int64_t RocksDbTier::LogicalBudget() const {
  if (options_.fixed_budget_bytes > 0) return options_.fixed_budget_bytes;
  if (options_.capacity_bytes < rocksdb_tier::kMinOnDiskCapacity) return options_.capacity_bytes;
  return static_cast<std::int64_t>(static_cast<double>(options_.capacity_bytes) *
                                   rocksdb_tier::FractionsFor(options_).target / amplification_);
}

void RocksDbTier::NudgeCompaction() {
  const std::int64_t now = NowNs();
  if (now - last_nudge_ns_ < kNudgeIntervalNs) return;
  std::uint64_t running = 0, pending = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningCompactions, &running);
  for (auto* h : handles_) {
    std::uint64_t v = 0;
    if (db_->GetIntProperty(h, rocksdb::DB::Properties::kCompactionPending, &v)) pending += v;
  }
  if (running > 0 || pending > 0) return;  // RocksDB is at it already
  last_nudge_ns_ = now;
  if (!FlushNow().ok()) return;  // disabled; logged there
  // Marks every file of the bundle families for compaction; RocksDB's background threads do it,
  // so this thread goes on sampling meanwhile.
  for (const auto& p : pools_) {
    if (rocksdb::Status s =
            rocksdb::experimental::SuggestCompactRange(db_.get(), p->data, nullptr, nullptr);
        !s.ok()) {
      Disable("compaction", s).IgnoreError();
      return;
    }
  }
  KVMESH_LOG_DEBUG("rocksdb tier asked for a compaction at capacity path {}", options_.path);
}

}  // namespace kvmesh
