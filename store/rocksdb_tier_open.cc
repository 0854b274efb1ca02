// RocksDbTier: options, open (folder, damage, column families, stale pools), index rebuild, close.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/sst_file_manager.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "common/units.h"
#include "store/rocksdb_logger.h"
#include "store/rocksdb_tier.h"
#include "store/rocksdb_tier_folder.h"
#include "store/rocksdb_tier_internal.h"

namespace kvmesh {
namespace {

using rocksdb_tier::DecodedMeta;
using rocksdb_tier::FolderState;

constexpr double kBloomBitsPerKey = 10;
constexpr double kBlobForceGcThreshold = 0.5;
constexpr std::int64_t kMinWriteBuffer = kMinDiskWriteBuffer;

rocksdb::ColumnFamilyOptions MakeFamilyOptions(const RocksDbTierOptions& o,
                                               std::int64_t write_buffer,
                                               const std::shared_ptr<rocksdb::Cache>& cache,
                                               bool bundles) {
  rocksdb::ColumnFamilyOptions c;
  c.compression = rocksdb::kNoCompression;
  c.bottommost_compression = rocksdb::kNoCompression;
  c.compression_per_level.clear();
  rocksdb::BlockBasedTableOptions t;
  if (cache) {
    t.block_cache = cache;
  } else {
    t.no_block_cache = true;
  }
  // Keys are content ids (random), so every L0 file spans the whole key range: without a filter a
  // get would read a data block (a whole bundle) from each L0 file to find its key.
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(kBloomBitsPerKey));
  if (bundles) {
    c.write_buffer_size = static_cast<std::size_t>(write_buffer);
    c.max_write_buffer_number = o.max_write_buffer_number;
    c.target_file_size_base = std::max<std::uint64_t>(64ull << 20, write_buffer);
    c.max_bytes_for_level_base = 4 * c.target_file_size_base;
    c.level_compaction_dynamic_level_bytes = true;
    c.disable_auto_compactions = o.disable_auto_compactions;
    if (o.enable_blob_files) {
      c.enable_blob_files = true;
      c.min_blob_size = static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.min_blob_bytes));
      c.blob_compression_type = rocksdb::kNoCompression;
      // Off until the blob files hold garbage (UpdateBackgroundGc): with it on, every
      // compaction rewrites the live bundles of the oldest quarter of the blob files, garbage or
      // not (in the tiered replay, 15% of all CPU time, perf).
      c.enable_blob_garbage_collection = false;
      c.blob_garbage_collection_force_threshold = kBlobForceGcThreshold;
      // The SSTs hold only keys and blob references: compacting them is cheap, and it is what
      // finds evicted bundles' blob space garbage. So compact level 0 early.
      c.level0_file_num_compaction_trigger = 2;
    }
  } else {
    c.write_buffer_size = static_cast<std::size_t>(std::min<std::int64_t>(4 << 20, write_buffer));
    c.max_write_buffer_number = 2;  // 24-byte records
    // The meta family is written at every put and erase and read only when the tier opens (the
    // scan that rebuilds the index): a vector memtable appends (sorted once, at flush) where a
    // skip list would walk ~log2(n) nodes scattered over its arena per record. Measured
    // (rocksdb_tier_bench --sizes 4k, 9 rounds each): RocksDB's share of a 4 KiB put 6.3 us
    // against 7.5 us (medians). A vector memtable cannot take concurrent inserts: see
    // allow_concurrent_memtable_write in MakeDbOptions.
    c.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  }
  c.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return c;
}

// Damage: what RocksDB reports when files it needs are missing or fail their checks.
bool IsDamage(const rocksdb::Status& s) {
  return s.IsCorruption() || s.IsPathNotFound() || s.IsNotFound();
}

// RocksDB's open errors in words an operator can act on.
Status OpenError(const std::string& path, std::string_view what, const rocksdb::Status& s) {
  const std::string text = s.ToString();
  if (text.find("lock") != std::string::npos && s.IsIOError()) {
    return Status::FailedPrecondition(StrCat(
        "rocksdb tier: ", path, " is in use: another process has its RocksDB database open (", text,
        "). Each process needs a folder of its own"));
  }
  if (s.IsNoSpace()) {
    return Status::IoError(
        StrCat("rocksdb tier: ", what, " ", path, ": no space left on the device (", text, ")"));
  }
  return Status::IoError(StrCat("rocksdb tier: ", what, " ", path, ": ", text));
}

}  // namespace

std::string RocksDbTier::DataColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp) {
  return StrCat("pool.", pool.value, ".", fp.ToHex());
}

std::string RocksDbTier::MetaColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp) {
  return DataColumnFamilyName(pool, fp) + ".meta";
}

RocksDbTier::RocksDbTier(RocksDbTierOptions options)
    : options_(std::move(options)),
      verify_block_checksums_(options_.verify_block_checksums),
      fill_cache_(options_.fill_cache) {}

std::int64_t RocksDbTier::EffectiveWriteBuffer() const {
  if (options_.capacity_bytes < rocksdb_tier::kMinOnDiskCapacity) {
    return options_.write_buffer_bytes;  // counted in bundle bytes: memtables are not a concern
  }
  return std::clamp(options_.capacity_bytes / 32, kMinWriteBuffer, options_.write_buffer_bytes);
}

namespace {

Status ValidateOptions(const RocksDbTierOptions& o) {
  if (o.path.empty()) return Status::InvalidArgument("rocksdb tier: empty path");
  if (o.capacity_bytes <= 0) {
    return Status::InvalidArgument(
        StrCat("rocksdb tier: capacity_bytes ", o.capacity_bytes, " must be positive"));
  }
  if (o.pools.empty()) return Status::InvalidArgument("rocksdb tier: no pools");
  if (o.namespace_name.empty() || o.namespace_name.find('\n') != std::string::npos) {
    return Status::InvalidArgument("rocksdb tier: namespace_name must be one non-empty line");
  }
  if (o.write_buffer_bytes < kMinWriteBuffer || o.max_write_buffer_number < 2) {
    return Status::InvalidArgument(StrCat("rocksdb tier: write_buffer_bytes ", o.write_buffer_bytes,
                                          " (at least 256 KiB) or max_write_buffer_number ",
                                          o.max_write_buffer_number, " (at least 2) too small"));
  }
  if (o.flush_after_bytes <= 0 || o.flush_after_ms <= 0) {
    return Status::InvalidArgument(StrCat("rocksdb tier: flush_after_bytes ", o.flush_after_bytes,
                                          " and flush_after_ms ", o.flush_after_ms,
                                          " must be positive"));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<RocksDbTier>> RocksDbTier::Open(RocksDbTierOptions options) {
  KVMESH_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<RocksDbTier> tier(new RocksDbTier(std::move(options)));
  std::set<TierPoolId> ids;
  for (const auto& p : tier->options_.pools) {
    if (!ids.insert(p.id).second) {
      return Status::InvalidArgument(StrCat("rocksdb tier: pool ", p.id.value, " given twice"));
    }
    auto codec = BundleCodec::Create(p.layout, p.pool_scale);
    if (!codec.ok()) return codec.status().WithContext(StrCat("rocksdb tier pool ", p.id.value));
    tier->pools_.push_back(std::make_unique<PoolFamilies>(p, std::move(*codec)));
  }
  KVMESH_RETURN_IF_ERROR(tier->OpenFolder());
  KVMESH_RETURN_IF_ERROR(tier->LoadIndex());
  tier->CheckFreeSpace();
  tier->StartUpkeep();
  const TierStats s = tier->stats();
  KVMESH_LOG_INFO(
      "rocksdb tier opened path {} pools {} entries {} used_bytes {} disk_bytes {} "
      "capacity_bytes {} durability {} blob_files {} direct_io {}",
      tier->options_.path, tier->pools_.size(), s.entries, s.used_bytes, s.disk_bytes,
      s.capacity_bytes, DiskDurabilityName(tier->options_.durability),
      tier->options_.enable_blob_files, tier->options_.use_direct_io);
  return tier;
}

Status RocksDbTier::OpenFolder() {
  rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  KVMESH_ASSIGN_OR_RETURN(
      rocksdb_tier::TierFolder folder,
      rocksdb_tier::TierFolder::Claim(env, options_.path, options_.namespace_name));
  folder_ = std::make_unique<rocksdb_tier::TierFolder>(std::move(folder));
  for (int attempt = 0;; ++attempt) {
    Status damage;  // kCorruption naming the damage, or OK
    if (folder_->state() == FolderState::kDamaged) {
      damage = Status::Corruption(folder_->damage());
    } else if (folder_->state() == FolderState::kExisting) {
      damage = CheckExisting();
      if (!damage.ok() && !damage.IsCorruption()) return damage;
    }
    if (damage.ok()) {
      damage = OpenDatabase();
      if (damage.ok() || !damage.IsCorruption()) return damage;
    }
    if (attempt > 0 || options_.on_damage == DiskDamagePolicy::kStayOff) {
      return Status::Corruption(
          StrCat("rocksdb tier: ", options_.path, " is damaged: ", damage.message(),
                 attempt > 0 ? ""
                             : "; on_damage is stay_off, so the tier stays off: move the folder "
                               "away (or set on_damage move_aside) and start again"));
    }
    KVMESH_ASSIGN_OR_RETURN(const std::string moved,
                            folder_->MoveAsideAndRestart(options_.namespace_name));
    damage_ = StrCat(damage.message(), "; the folder was moved aside to ", moved,
                     " (kept for inspection) and the tier started empty");
    KVMESH_LOG_ERROR("rocksdb tier damaged path {} moved_to {} started empty error {}",
                     options_.path, moved, damage.message());
  }
}

rocksdb::DBOptions RocksDbTier::MakeDbOptions() {
  rocksdb::DBOptions d;
  d.create_if_missing = true;
  d.create_missing_column_families = true;
  d.env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  // The bundle and meta families of a pool must agree after a crash with the WAL off.
  d.atomic_flush = true;
  // Required by the meta families' vector memtables (MakeFamilyOptions). Costs little here: most
  // of the tier's writes come from one thread (the spill thread), and with several writers a
  // write group's leader inserts their batches in turn.
  d.allow_concurrent_memtable_write = false;
  d.max_background_jobs = options_.max_background_jobs;
  d.use_direct_reads = options_.use_direct_io;
  d.use_direct_io_for_flush_and_compaction = options_.use_direct_io;
  // No LOG file of RocksDB's own (its writer aborts on a full disk): everything goes to spdlog.
  d.info_log = std::make_shared<RocksDbLogger>(options_.path);
  d.info_log_level = rocksdb::InfoLogLevel::INFO_LEVEL;
  // Every table file is opened (and its footer and meta blocks checked) at open.
  d.paranoid_checks = true;
  d.max_open_files = -1;
  d.sst_file_manager = sst_files_;
  d.listeners.push_back(std::make_shared<rocksdb_tier::FlushListener>(this));
  return d;
}

Status RocksDbTier::CheckExisting() {
  rocksdb::DBOptions db_options = MakeDbOptions();
  db_options.listeners.clear();
  db_options.sst_file_manager.reset();
  std::vector<std::string> names;
  rocksdb::Status s = rocksdb::DB::ListColumnFamilies(db_options, options_.path, &names);
  if (!s.ok()) {
    if (IsDamage(s)) {
      return Status::Corruption(StrCat("its MANIFEST cannot be read (", s.ToString(), ")"));
    }
    return OpenError(options_.path, "reading", s);
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.reserve(names.size());
  for (const auto& n : names) descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  s = rocksdb::DB::OpenForReadOnly(db_options, options_.path, descriptors, &handles, &raw);
  if (!s.ok()) {
    if (IsDamage(s)) return Status::Corruption(s.ToString());
    return OpenError(options_.path, "checking", s);
  }
  const std::uint64_t sequence = raw->GetLatestSequenceNumber();
  for (auto* h : handles) raw->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  raw->Close().PermitUncheckedError();
  delete raw;
  const std::uint64_t recorded = folder_->RecordedFlushedSequence();
  if (recorded > sequence) {
    return Status::Corruption(
        StrCat("the database's sequence number is ", sequence, ", below the ", recorded,
               " a completed flush recorded in ", rocksdb_tier::kStateFile,
               ": its MANIFEST lost edits (truncated or rolled back), and with them SST files"));
  }
  MutexLock lock(&record_mu_);
  recorded_sequence_ = recorded;
  return Status::Ok();
}

Status RocksDbTier::OpenDatabase() {
  rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  sst_files_.reset(rocksdb::NewSstFileManager(env, std::make_shared<RocksDbLogger>(options_.path)));
  const rocksdb::DBOptions db_options = MakeDbOptions();
  std::shared_ptr<rocksdb::Cache> cache;
  if (options_.block_cache_bytes > 0) {
    cache = rocksdb::NewLRUCache(static_cast<std::size_t>(options_.block_cache_bytes));
  }
  const auto bundle_cf = MakeFamilyOptions(options_, EffectiveWriteBuffer(), cache, true);
  const auto meta_cf = MakeFamilyOptions(options_, EffectiveWriteBuffer(), cache, false);

  std::vector<std::string> existing;
  if (folder_->state() == FolderState::kExisting) {
    rocksdb::Status s = rocksdb::DB::ListColumnFamilies(db_options, options_.path, &existing);
    if (!s.ok()) {
      if (IsDamage(s)) return Status::Corruption(s.ToString());
      return OpenError(options_.path, "listing the column families of", s);
    }
  }
  // Every existing family must be opened; ours get their options, others are stale or foreign.
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  std::vector<std::pair<PoolFamilies*, bool>> owner;  // (pool, is_meta) per descriptor; null: other
  std::set<std::string> names(existing.begin(), existing.end());
  names.insert(rocksdb::kDefaultColumnFamilyName);
  for (const auto& p : pools_) {
    names.insert(DataColumnFamilyName(p->config.id, p->codec.fingerprint()));
    names.insert(MetaColumnFamilyName(p->config.id, p->codec.fingerprint()));
  }
  for (const auto& name : names) {
    PoolFamilies* pool = nullptr;
    bool is_meta = false;
    for (const auto& p : pools_) {
      if (name == DataColumnFamilyName(p->config.id, p->codec.fingerprint())) pool = p.get();
      if (name == MetaColumnFamilyName(p->config.id, p->codec.fingerprint())) {
        pool = p.get();
        is_meta = true;
      }
    }
    descriptors.emplace_back(name, pool != nullptr && !is_meta ? bundle_cf : meta_cf);
    owner.emplace_back(pool, is_meta);
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.path, descriptors, &handles_, &raw);
  if (!s.ok()) {
    handles_.clear();
    if (IsDamage(s)) return Status::Corruption(s.ToString());
    return OpenError(options_.path, "opening", s);
  }
  db_.reset(raw);
  std::vector<rocksdb::ColumnFamilyHandle*> kept;
  for (std::size_t i = 0; i < handles_.size(); ++i) {
    auto [pool, is_meta] = owner[i];
    const std::string& name = descriptors[i].name;
    if (pool != nullptr) {
      (is_meta ? pool->meta : pool->data) = handles_[i];
    } else if (options_.drop_stale_pools && rocksdb_tier::IsPoolFamilyName(name)) {
      KVMESH_RETURN_IF_ERROR(DropStaleFamily(handles_[i]));
      continue;
    } else if (name != rocksdb::kDefaultColumnFamilyName) {
      KVMESH_LOG_WARN("rocksdb tier kept a column family it does not know path {} family {}",
                      options_.path, name);
    }
    kept.push_back(handles_[i]);
  }
  handles_ = std::move(kept);
  return Status::Ok();
}

Status RocksDbTier::DropStaleFamily(rocksdb::ColumnFamilyHandle* handle) {
  rocksdb::ColumnFamilyMetaData meta;
  db_->GetColumnFamilyMetaData(handle, &meta);
  std::uint64_t keys = 0;
  db_->GetIntProperty(handle, rocksdb::DB::Properties::kEstimateNumKeys, &keys);
  KVMESH_LOG_WARN(
      "rocksdb tier dropping a stale pool (kvmesh's, another geometry) path {} family {} "
      "entries {} bytes {} files {}",
      options_.path, meta.name, keys, meta.size, meta.file_count);
  rocksdb::Status s = db_->DropColumnFamily(handle);
  if (s.ok()) s = db_->DestroyColumnFamilyHandle(handle);
  if (!s.ok()) return Disable("drop stale column family", s);
  return Status::Ok();
}

void RocksDbTier::CheckFreeSpace() const {
  std::error_code ec;
  const auto space = std::filesystem::space(options_.path, ec);
  if (ec) return;
  const auto on_disk = static_cast<std::int64_t>(sst_files_->GetTotalSize());
  const auto available = static_cast<std::int64_t>(space.available);
  if (options_.capacity_bytes > available + on_disk) {
    KVMESH_LOG_WARN(
        "rocksdb tier capacity is more than the disk can hold path {} capacity_bytes {} "
        "free_bytes {} tier_bytes {}: the disk fills before the tier does, and the tier then "
        "disables itself",
        options_.path, options_.capacity_bytes, available, on_disk);
  }
}

Status RocksDbTier::LoadIndex() {
  std::vector<Doomed> bad;
  std::uint64_t max_seq = 0;
  {
    // Open is single-threaded: holding the lock across the scan (I/O) blocks no one; it is taken
    // for the annotations.
    MutexLock lock(&mu_);
    for (const auto& p : pools_) {
      rocksdb::ReadOptions ro;
      ro.fill_cache = false;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, p->meta));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        const rocksdb::Slice k = it->key();
        const rocksdb::Slice v = it->value();
        Key key{p->config.id, {}};
        if (k.size() != ContentId::kBytes) continue;  // cannot name the block; left alone
        std::memcpy(key.id.bytes.data(), k.data(), ContentId::kBytes);
        DecodedMeta meta;
        if (!rocksdb_tier::DecodeMeta(v, kTierMaxPriority, &meta)) {
          // Its bundle's key is unknown unless it was keyed by the content id (format 1), which
          // is deleted with the record; a format 2 bundle stays behind, unreachable.
          bad.push_back(Doomed{key, 0});
          continue;
        }
        Entry e;
        e.seq = meta.seq;
        e.data_key = meta.data_key;
        e.state = EntryState::kReady;
        e.durable = true;
        e.priority = meta.priority;
        e.generation = next_generation_++;
        e.bytes = p->codec.bundle_bytes();
        // New puts take sequences above every one in use, data keys included (a data key is the
        // sequence its put took, so never above the entry's last use; max() says so anyway).
        max_seq = std::max({max_seq, e.seq, e.data_key});
        AddToOrder(AddToIndex(key, e));
        used_bytes_ += e.bytes;
        ready_bytes_ += e.bytes;
      }
      if (!it->status().ok()) {
        return Status::IoError(StrCat("rocksdb tier: reading the index of ", options_.path, ": ",
                                      it->status().ToString()));
      }
    }
    next_seq_ = max_seq + 1;
  }
  // Malformed meta records and, when the budget is below what is held, the blocks over it go.
  std::vector<Doomed> victims = bad;
  counters_.corrupt.fetch_add(static_cast<std::int64_t>(bad.size()), std::memory_order_relaxed);
  if (!bad.empty()) {
    KVMESH_LOG_WARN("rocksdb tier malformed index records deleted path {} count {}", options_.path,
                    bad.size());
  }
  {
    MutexLock lock(&mu_);
    // A first estimate of the space amplification, learned from then on (the upkeep thread):
    // what the folder shows now (less the blob garbage a collection would remove), or what the
    // layout is expected to need (with the values in the SSTs, a compaction of random keys needs
    // room for the whole last level again).
    const auto on_disk = static_cast<std::int64_t>(sst_files_->GetTotalSize());
    amplification_ = options_.enable_blob_files ? 1.5 : 2.0;
    if (ready_bytes_ > 0) {
      amplification_ = std::max(amplification_, AmplificationSample(on_disk, ready_bytes_));
    }
    disk_bytes_.store(on_disk, std::memory_order_relaxed);
    budget_bytes_.store(LogicalBudget(), std::memory_order_relaxed);
    while (used_bytes_ > Budget() && order_.size() > 0) victims.push_back(EvictOne());
  }
  return WriteDeletes(victims, "open cleanup");
}

Status RocksDbTier::PersistRecency() {
  rocksdb::WriteBatch batch;
  {
    MutexLock lock(&mu_);
    for (const Key& key : dirty_) {
      Entry* e = index_.Get(key);
      if (e == nullptr || !e->dirty) continue;  // gone, or listed twice
      e->dirty = false;
      if (e->state != EntryState::kReady) continue;
      const auto meta = rocksdb_tier::EncodeMeta(e->seq, e->priority, e->data_key);
      const auto& p = *FindPool(key.pool, kTierDefaultPriority).value();
      batch.Put(p.meta, rocksdb_tier::KeySlice(key.id), meta.slice()).PermitUncheckedError();
    }
    dirty_.clear();
  }
  if (batch.Count() == 0) return Status::Ok();
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.durability != DiskDurability::kWal;
  if (rocksdb::Status s = db_->Write(wo, &batch); !s.ok()) return Disable("persist recency", s);
  return Status::Ok();
}

Status RocksDbTier::Flush() {
  if (disabled()) return DisabledError();
  return FlushNow();
}

Status RocksDbTier::WaitForCompactions() {
  for (;;) {
    if (disabled()) return DisabledError();
    std::uint64_t pending = 0, running = 0, flushes = 0;
    db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningCompactions, &running);
    db_->GetIntProperty(rocksdb::DB::Properties::kNumRunningFlushes, &flushes);
    for (auto* h : handles_) {
      std::uint64_t v = 0;
      if (db_->GetIntProperty(h, rocksdb::DB::Properties::kCompactionPending, &v)) pending += v;
    }
    if (pending == 0 && running == 0 && flushes == 0) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

RocksDbTier::~RocksDbTier() {
  StopUpkeep();
  if (db_ == nullptr) return;
  if (!disabled()) {
    if (Status st = FlushNow(); !st.ok()) {
      KVMESH_LOG_ERROR("rocksdb tier close path {} error {}", options_.path, st.ToString());
    }
  }
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  handles_.clear();
  if (rocksdb::Status s = db_->Close(); !s.ok()) {
    KVMESH_LOG_ERROR("rocksdb tier close path {} error {}", options_.path, s.ToString());
  }
  db_.reset();
}

}  // namespace kvmesh
