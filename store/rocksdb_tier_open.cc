// RocksDbTier: options, open (column families, stale pools), index rebuild, flush and close.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "store/rocksdb_tier.h"
#include "store/rocksdb_tier_internal.h"

namespace kvmesh {
namespace {

using rocksdb_tier::kMetaBytes;

constexpr double kBloomBitsPerKey = 10;
using rocksdb_tier::kMetaFormat;

rocksdb::DBOptions MakeDbOptions(const RocksDbTierOptions& o) {
  rocksdb::DBOptions d;
  d.create_if_missing = true;
  d.create_missing_column_families = true;
  d.env = o.env != nullptr ? o.env : rocksdb::Env::Default();
  // The bundle and meta families of a pool must agree after a crash with the WAL off.
  d.atomic_flush = true;
  d.max_background_jobs = o.max_background_jobs;
  d.use_direct_reads = o.use_direct_io;
  d.use_direct_io_for_flush_and_compaction = o.use_direct_io;
  d.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  d.keep_log_file_num = 4;
  d.paranoid_checks = true;
  return d;
}

rocksdb::ColumnFamilyOptions MakeFamilyOptions(const RocksDbTierOptions& o,
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
    c.write_buffer_size = static_cast<std::size_t>(o.write_buffer_bytes);
    c.max_write_buffer_number = o.max_write_buffer_number;
    c.target_file_size_base = std::max<std::uint64_t>(64ull << 20, o.write_buffer_bytes);
    c.max_bytes_for_level_base = 4 * c.target_file_size_base;
    c.level_compaction_dynamic_level_bytes = true;
    if (o.enable_blob_files) {
      c.enable_blob_files = true;
      c.min_blob_size = static_cast<std::uint64_t>(std::max<std::int64_t>(0, o.min_blob_bytes));
      c.blob_compression_type = rocksdb::kNoCompression;
      c.enable_blob_garbage_collection = true;
    }
  } else {
    c.write_buffer_size = 4 << 20;  // 16-byte records
    c.max_write_buffer_number = 2;
  }
  c.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return c;
}

}  // namespace

std::string RocksDbTier::DataColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp) {
  return StrCat("pool.", pool.value, ".", fp.ToHex());
}

std::string RocksDbTier::MetaColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp) {
  return DataColumnFamilyName(pool, fp) + ".meta";
}

RocksDbTier::RocksDbTier(RocksDbTierOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<RocksDbTier>> RocksDbTier::Open(RocksDbTierOptions options) {
  if (options.path.empty()) return Status::InvalidArgument("rocksdb tier: empty path");
  if (options.capacity_bytes <= 0) {
    return Status::InvalidArgument(
        StrCat("rocksdb tier: capacity_bytes ", options.capacity_bytes, " must be positive"));
  }
  if (options.pools.empty()) return Status::InvalidArgument("rocksdb tier: no pools");
  if (options.write_buffer_bytes < (1 << 20) || options.max_write_buffer_number < 2) {
    return Status::InvalidArgument(
        StrCat("rocksdb tier: write_buffer_bytes ", options.write_buffer_bytes,
               " (at least 1 MiB) or max_write_buffer_number ", options.max_write_buffer_number,
               " (at least 2) too small"));
  }
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
  KVMESH_RETURN_IF_ERROR(tier->OpenDatabase());
  KVMESH_RETURN_IF_ERROR(tier->LoadIndex());
  const TierStats s = tier->stats();
  KVMESH_LOG_INFO(
      "rocksdb tier opened path {} pools {} entries {} used_bytes {} capacity_bytes {} "
      "wal {} blob_files {} direct_io {}",
      tier->options_.path, tier->pools_.size(), s.entries, s.used_bytes, s.capacity_bytes,
      !tier->options_.disable_wal, tier->options_.enable_blob_files, tier->options_.use_direct_io);
  return tier;
}

Status RocksDbTier::OpenDatabase() {
  const rocksdb::DBOptions db_options = MakeDbOptions(options_);
  std::shared_ptr<rocksdb::Cache> cache;
  if (options_.block_cache_bytes > 0) {
    cache = rocksdb::NewLRUCache(static_cast<std::size_t>(options_.block_cache_bytes));
  }
  const auto bundle_cf = MakeFamilyOptions(options_, cache, true);
  const auto meta_cf = MakeFamilyOptions(options_, cache, false);

  std::vector<std::string> existing;
  if (db_options.env->FileExists(options_.path + "/CURRENT").ok()) {
    rocksdb::Status s = rocksdb::DB::ListColumnFamilies(db_options, options_.path, &existing);
    if (!s.ok()) {
      KVMESH_LOG_ERROR("rocksdb tier open failed path {} error {}", options_.path, s.ToString());
      return Status::IoError(
          StrCat("rocksdb tier: listing column families of ", options_.path, ": ", s.ToString()));
    }
  }
  // Every existing family must be opened; ours get their options, others are stale.
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
    KVMESH_LOG_ERROR("rocksdb tier open failed path {} error {}", options_.path, s.ToString());
    return Status::IoError(StrCat("rocksdb tier: opening ", options_.path, ": ", s.ToString()));
  }
  db_.reset(raw);
  std::vector<rocksdb::ColumnFamilyHandle*> kept;
  for (std::size_t i = 0; i < handles_.size(); ++i) {
    auto [pool, is_meta] = owner[i];
    if (pool != nullptr) {
      (is_meta ? pool->meta : pool->data) = handles_[i];
    } else if (options_.drop_stale_pools &&
               descriptors[i].name != rocksdb::kDefaultColumnFamilyName) {
      KVMESH_LOG_INFO("rocksdb tier dropping stale column family {}", descriptors[i].name);
      s = db_->DropColumnFamily(handles_[i]);
      if (!s.ok()) return Disable("drop stale column family", s);
      s = db_->DestroyColumnFamilyHandle(handles_[i]);
      if (!s.ok()) return Disable("drop stale column family", s);
      continue;
    }
    kept.push_back(handles_[i]);
  }
  handles_ = std::move(kept);
  return Status::Ok();
}

Status RocksDbTier::LoadIndex() {
  std::vector<Key> bad;
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
        const auto priority = v.size() == kMetaBytes ? static_cast<std::uint8_t>(v[8]) : 255;
        if (v.size() != kMetaBytes || static_cast<std::uint8_t>(v[9]) != kMetaFormat ||
            priority > kTierMaxPriority) {
          bad.push_back(key);
          continue;
        }
        Entry e;
        std::memcpy(&e.seq, v.data(), sizeof(e.seq));
        e.state = EntryState::kReady;
        e.priority = priority;
        e.generation = next_generation_++;
        e.bytes = p->codec.bundle_bytes();
        max_seq = std::max(max_seq, e.seq);
        index_.emplace(key, e);
        order_.insert({e.priority, e.seq, key.pool, key.id});
        used_bytes_ += e.bytes;
        ready_bytes_ += e.bytes;
      }
      if (!it->status().ok()) {
        KVMESH_LOG_ERROR("rocksdb tier index scan failed path {} error {}", options_.path,
                         it->status().ToString());
        return Status::IoError(
            StrCat("rocksdb tier: reading the index: ", it->status().ToString()));
      }
    }
    next_seq_ = max_seq + 1;
  }
  // Malformed meta records and, when the capacity shrank, the blocks over it go.
  rocksdb::WriteBatch batch;
  for (const Key& key : bad) {
    const auto& p = *FindPool(key.pool, kTierDefaultPriority).value();
    batch.Delete(p.data, rocksdb_tier::KeySlice(key.id)).PermitUncheckedError();
    batch.Delete(p.meta, rocksdb_tier::KeySlice(key.id)).PermitUncheckedError();
  }
  counters_.corrupt.fetch_add(static_cast<std::int64_t>(bad.size()), std::memory_order_relaxed);
  if (!bad.empty()) {
    KVMESH_LOG_WARN("rocksdb tier malformed index records deleted path {} count {}", options_.path,
                    bad.size());
  }
  {
    MutexLock lock(&mu_);
    while (used_bytes_ > options_.capacity_bytes && !order_.empty()) {
      const OrderKey victim = *order_.begin();
      const Key key{victim.pool, victim.id};
      const auto& p = *FindPool(key.pool, kTierDefaultPriority).value();
      batch.Delete(p.data, rocksdb_tier::KeySlice(key.id)).PermitUncheckedError();
      batch.Delete(p.meta, rocksdb_tier::KeySlice(key.id)).PermitUncheckedError();
      counters_.evictions.fetch_add(1, std::memory_order_relaxed);
      counters_.eviction_bytes.fetch_add(index_.at(key).bytes, std::memory_order_relaxed);
      EraseFromIndex(key);
    }
  }
  if (batch.Count() > 0) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = options_.disable_wal;
    if (rocksdb::Status s = db_->Write(wo, &batch); !s.ok()) return Disable("open cleanup", s);
  }
  return Status::Ok();
}

Status RocksDbTier::PersistRecency() {
  rocksdb::WriteBatch batch;
  {
    MutexLock lock(&mu_);
    for (const Key& key : dirty_) {
      auto it = index_.find(key);
      if (it == index_.end() || it->second.state != EntryState::kReady) continue;
      const auto meta = rocksdb_tier::EncodeMeta(it->second.seq, it->second.priority);
      const auto& p = *FindPool(key.pool, kTierDefaultPriority).value();
      batch.Put(p.meta, rocksdb_tier::KeySlice(key.id), rocksdb::Slice(meta.data(), meta.size()))
          .PermitUncheckedError();
    }
    dirty_.clear();
  }
  if (batch.Count() == 0) return Status::Ok();
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.disable_wal;
  if (rocksdb::Status s = db_->Write(wo, &batch); !s.ok()) return Disable("persist recency", s);
  return Status::Ok();
}

Status RocksDbTier::Flush() {
  if (disabled()) return DisabledError();
  KVMESH_RETURN_IF_ERROR(PersistRecency());
  rocksdb::FlushOptions fo;
  fo.wait = true;
  if (rocksdb::Status s = db_->Flush(fo, handles_); !s.ok()) return Disable("flush", s);
  return Status::Ok();
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
  if (db_ == nullptr) return;
  if (!disabled()) {
    Status st = PersistRecency();
    if (st.ok() && options_.disable_wal) {
      rocksdb::FlushOptions fo;
      if (rocksdb::Status s = db_->Flush(fo, handles_); !s.ok()) st = Disable("close flush", s);
    }
    if (!st.ok())
      KVMESH_LOG_ERROR("rocksdb tier close path {} error {}", options_.path, st.ToString());
  }
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  handles_.clear();
  if (rocksdb::Status s = db_->Close(); !s.ok()) {
    KVMESH_LOG_ERROR("rocksdb tier close path {} error {}", options_.path, s.ToString());
  }
  db_.reset();
}

}  // namespace kvmesh
