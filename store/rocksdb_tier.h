// RocksDbTier: the tertiary tier — complete blocks (bundles, store/block_bundle.h) in RocksDB on
// local SSD, found again after a restart.
//
// Layout on disk: one RocksDB database at `path`; per pool two column families named from the pool
// id and its geometry fingerprint, so that a restart with another geometry or pool scale never
// reads old blocks as new ones:
//   "pool.<id>.<fingerprint hex>"       key: content id (16 bytes)  value: the bundle
//   "pool.<id>.<fingerprint hex>.meta"  key: content id (16 bytes)  value: 16 bytes — last-use
//                                       sequence (u64 LE), priority (u8), format 1 (u8), 6 zeros
// Column families of other geometries are dropped at open (drop_stale_pools) or left alone.
// A put writes the bundle, its meta record and the deletes of its eviction victims in one
// WriteBatch; flushes are atomic across column families (atomic_flush), so the two families agree
// after any crash.
//
// Options for large values and a cache workload: WAL off by default, no compression, large write
// buffers, a bloom filter (keys are random content ids, so every L0 file spans the key range and a
// get would otherwise read a whole bundle from each), an optional blob store (enable_blob_files)
// and direct I/O (use_direct_io). Durability: with the WAL off (default), a put is in the memtable
// when it returns; after a crash (process or machine) the puts since the last flush may be absent —
// never corrupt or half written (blocks are recomputable; the WAL would cost a second write of
// every byte). Flush() and a clean close persist everything. With disable_wal = false, puts survive
// a process crash; add sync_writes for machine crashes.
//
// Capacity: the sum of the bundle bytes held (logical bytes; RocksDB's own overhead and space not
// yet compacted away are not counted). A put that would exceed it evicts first: all blocks of the
// lowest priority before any of the next one, within a priority the least recently used (lowest
// last-use sequence). Sequences are written with each put and, for gets, kept in memory and written
// by Flush() and at close; so after a crash the order is that of the last flush — reasonable for a
// cache. At open the index (id → priority, sequence) is rebuilt from the meta families, which are
// small; bundles are not read.
//
// Errors: a stored entry that fails verification (bundle check, or RocksDB reporting corruption) is
// deleted, counted (corrupt) and returned as kCorruption — a miss. Any other RocksDB error (I/O,
// no space, ...) disables the tier: it is logged once at error level, counted (io_errors,
// stats().disabled), and every later call returns kIoError (Contains false) — the tier does not
// guess. Reopening is the way back.
//
// Thread safety: thread-safe. An index (mutex) orders puts, gets and evictions; RocksDB calls run
// without the lock.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/thread_annotations.h"
#include "store/block_bundle.h"
#include "store/tier.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Env;
class Status;
}  // namespace rocksdb

namespace kvmesh {

struct RocksDbTierPool {
  TierPoolId id;
  KvPoolLayout layout;
  float pool_scale = 1.0f;  // fp8_per_tensor scale or nvfp4 global scale
};

struct RocksDbTierOptions {
  std::string path;                 // database directory (created when missing)
  std::int64_t capacity_bytes = 0;  // bundle bytes
  std::vector<RocksDbTierPool> pools;
  bool disable_wal = true;
  bool sync_writes = false;  // fsync the WAL on every put (only with the WAL on)
  bool enable_blob_files = false;
  std::int64_t min_blob_bytes = 4096;
  bool use_direct_io = false;  // direct reads and direct flush/compaction writes
  std::int64_t write_buffer_bytes = 64ll << 20;
  int max_write_buffer_number = 4;
  std::int64_t block_cache_bytes = 8ll << 20;  // 0: no block cache
  bool fill_cache = true;                      // reads insert into the block cache
  int max_background_jobs = 2;
  bool drop_stale_pools = true;
  rocksdb::Env* env = nullptr;  // null: rocksdb::Env::Default(); tests inject faults here
};

class RocksDbTier final : public BlockTier {
 public:
  // Opens (or creates) the database and rebuilds the index. kInvalidArgument: bad options;
  // kIoError: RocksDB could not open the database.
  static Result<std::unique_ptr<RocksDbTier>> Open(RocksDbTierOptions options);
  // Writes pending last-use sequences, flushes (with the WAL off) and closes. Errors are logged.
  ~RocksDbTier() override;
  RocksDbTier(const RocksDbTier&) = delete;
  RocksDbTier& operator=(const RocksDbTier&) = delete;

  std::string_view name() const override { return "rocksdb"; }
  Status Put(TierPoolId pool, const ContentId& id, const KvPoolView& src, std::int64_t block,
             int priority) override;
  Status PutBundle(TierPoolId pool, const ContentId& id, std::span<const std::byte> bundle,
                   int priority) override;
  Status Get(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
             std::int64_t block) override;
  bool Contains(TierPoolId pool, const ContentId& id) override;
  Status Erase(TierPoolId pool, const ContentId& id) override;
  TierStats stats() const override;

  // The verified bundle of a block (e.g. to move it into the host tier). Errors as Get.
  Result<std::string> GetBundle(TierPoolId pool, const ContentId& id);

  // Writes pending last-use sequences and flushes every memtable (atomically). kIoError (and the
  // tier disabled) on failure.
  Status Flush();
  // Waits until RocksDB has no pending or running compaction (benchmarks).
  Status WaitForCompactions();

  bool disabled() const { return disabled_.load(std::memory_order_acquire); }
  const BundleCodec* Codec(TierPoolId pool) const;

  static std::string DataColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp);
  static std::string MetaColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp);

 private:
  struct PoolFamilies;
  struct Key {
    TierPoolId pool;
    ContentId id;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return ContentIdHash()(k.id) ^ static_cast<std::size_t>(k.pool.value);
    }
  };
  enum class EntryState : std::uint8_t { kWriting, kReady };
  struct Entry {
    EntryState state = EntryState::kWriting;
    int priority = kTierDefaultPriority;
    std::uint64_t seq = 0;         // last use
    std::uint64_t generation = 0;  // which put made this entry
    std::int64_t bytes = 0;
  };
  // Eviction order: lowest priority, then lowest sequence, first.
  struct OrderKey {
    int priority;
    std::uint64_t seq;
    TierPoolId pool;
    ContentId id;
    // clang-tidy 14 reads the defaulted <=> as a comparison with literal 0.
    // NOLINTNEXTLINE(modernize-use-nullptr)
    friend auto operator<=>(const OrderKey&, const OrderKey&) = default;
  };
  // A put reserved in the index, with the victims it displaced.
  struct Reservation {
    bool already_held = false;
    std::uint64_t generation = 0;
    std::uint64_t seq = 0;
    std::vector<Key> victims;
  };

  explicit RocksDbTier(RocksDbTierOptions options);
  Status OpenDatabase();
  Status LoadIndex();
  Result<PoolFamilies*> FindPool(TierPoolId pool, int priority) const;
  Result<Reservation> Reserve(const PoolFamilies& p, const ContentId& id, int priority)
      KVMESH_EXCLUDES(mu_);
  // Writes the reserved put (value given as pieces) and publishes it.
  Status Commit(const PoolFamilies& p, const ContentId& id, int priority, const Reservation& r,
                std::span<const std::span<const std::byte>> value) KVMESH_EXCLUDES(mu_);
  // Reads a block and hands it to `use`, which verifies it (BundleCodec::Decode or Verify); a
  // kCorruption from `use` drops the entry.
  Status ReadBlock(const PoolFamilies& p, const ContentId& id,
                   const std::function<Status(std::span<const std::byte>)>& use)
      KVMESH_EXCLUDES(mu_);
  // Deletes a corrupt entry (index and RocksDB) and returns the kCorruption to report.
  Status DropCorrupt(const PoolFamilies& p, const ContentId& id, std::uint64_t generation,
                     const std::string& why) KVMESH_EXCLUDES(mu_);
  // Disables the tier (once) and returns the kIoError to report.
  Status Disable(std::string_view op, const rocksdb::Status& s);
  Status DisabledError() const;
  Status PersistRecency() KVMESH_EXCLUDES(mu_);
  void EraseFromIndex(const Key& key) KVMESH_REQUIRES(mu_);

  RocksDbTierOptions options_;
  std::vector<std::unique_ptr<PoolFamilies>> pools_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // every open family, destroyed at close
  std::atomic<bool> disabled_{false};

  mutable Mutex mu_;
  std::unordered_map<Key, Entry, KeyHash> index_ KVMESH_GUARDED_BY(mu_);
  std::set<OrderKey> order_ KVMESH_GUARDED_BY(mu_);                // ready entries only
  std::unordered_set<Key, KeyHash> dirty_ KVMESH_GUARDED_BY(mu_);  // sequence not yet persisted
  std::int64_t used_bytes_ KVMESH_GUARDED_BY(mu_) = 0;     // entries in the index, any state
  std::int64_t ready_bytes_ KVMESH_GUARDED_BY(mu_) = 0;    // ready entries (stats().used_bytes)
  std::int64_t writing_bytes_ KVMESH_GUARDED_BY(mu_) = 0;  // puts in flight, erased or not
  std::uint64_t next_seq_ KVMESH_GUARDED_BY(mu_) = 1;
  std::uint64_t next_generation_ KVMESH_GUARDED_BY(mu_) = 1;
  std::string disabled_reason_ KVMESH_GUARDED_BY(mu_);
  mutable TierCounters counters_;
};

}  // namespace kvmesh
