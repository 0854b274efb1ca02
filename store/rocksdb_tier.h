// RocksDbTier: the tertiary tier — complete blocks (bundles, store/block_bundle.h) in RocksDB on
// local SSD, found again after a restart. What an operator sees and can rely on is written in
// docs/disk-tier.md; this is the contract in short.
//
// Folder (store/rocksdb_tier_folder.h): `path` holds one RocksDB database and three files of ours:
// an ownership marker (KVMESH-TIER: format 2, namespace), a lock (KVMESH-LOCK) and the last
// flushed sequence number (KVMESH-STATE). A folder that is not provably a kvmesh tier — another
// application's database, unrelated files, a marker of a newer format or another namespace — is
// refused with kFailedPrecondition / kNotSupported and nothing in it is written, dropped or moved.
// A second process (or a second tier in this one) on the same folder gets kFailedPrecondition.
//
// Layout: per pool two column families named from the pool id and its geometry fingerprint, so
// that a restart with another geometry or pool scale never reads old blocks as new ones:
//   "pool.<id>.<fingerprint hex>"       key: the bundle's data key   value: the bundle
//   "pool.<id>.<fingerprint hex>.meta"  key: content id (16 bytes)   value: 24 bytes — last-use
//                                       sequence (u64 LE), priority (u8), format 2 (u8), 6 zeros,
//                                       data key (u64 LE)
// A data key is the sequence number the put took (8 bytes big-endian), so that bundles are written
// in key order: RocksDB appends them to its memtable and its level-0 files do not overlap, where
// random content ids as keys cost a skip-list search per put and compactions that merge every
// file. Tiers written before (meta format 1, 16 bytes, no data key; the bundle keyed by its content
// id) are read as they are (rocksdb_tier_internal.h).
// Families of our own naming but another geometry (stale pools) are dropped at open when
// drop_stale_pools (default), logged at warn with their names, entries and bytes; families of any
// other name are never dropped. A put writes the bundle, its meta record and the deletes of its
// eviction victims in one WriteBatch; flushes are atomic across column families (atomic_flush),
// so the two families of a pool agree after any crash.
//
// Durability — what an OK from Put/PutBundle promises (`durability`):
//   kNone   the block is in the memtable: readable by this process; a crash (process or machine)
//           keeps it only if a flush (RocksDB's own, when a memtable fills; Flush(); a clean close)
//           completed after the put. No bound on the loss.
//   kFlush  (default) as kNone, plus the tier flushes once flush_after_bytes of bundles are
//           unflushed or flush_after_ms after the first unflushed put, whichever comes first. A
//           crash loses at most the puts of the last flush_after_ms (1 s by default) plus one
//           flush's duration; every put acknowledged before the start of the last completed flush
//           survives, also a power loss (flushes sync their files).
//   kWal    the put is in the write-ahead log before it returns: it survives a process crash;
//           with wal_sync it is fsynced too and survives a power loss (each put then waits for
//           the disk).
// A flush never half-writes a block: after any crash a block is intact or absent, never corrupt.
// durable_puts() / stats().durable_entries say what the promise covers at any moment.
//
// Blob garbage: an evicted or erased bundle stays in its blob file until RocksDB's blob garbage
// collection (GC) rewrites the file's live bundles elsewhere and deletes the file; GC runs inside
// compactions. RocksDB's background compactions collect the oldest quarter of the blob files (and
// force compactions of the files holding them once half their bytes are dead) — rewriting their
// live bundles whether or not the files hold any garbage, so the upkeep thread turns that on only
// while a pool's blob files hold more than 10% garbage as RocksDB counts it, and off again below
// 5% (UpdateBackgroundGc; a tier that only fills rewrites nothing). When those
// compactions do not get their turn (short runs that close first, a loaded machine) the files fill
// with dead bundles (seen: 491 blocks, 184 MiB live in 858 MB, puts refused at capacity). So when
// the files reach the write limit's resume mark with more than 1.5 x the live bundles + 4 MiB, the
// upkeep thread collects the garbage on a thread of its own instead of only asking for a
// compaction: every blob file's (CollectGarbage) when there is room to rewrite the live bundles,
// else the oldest files' in steps that fit in the room (CollectGarbageWithinCapacity); and the
// learned amplification does not count garbage above that trigger, at open or after, so the
// budget does not evict live blocks for it.
//
// Capacity: capacity_bytes is bytes on disk — RocksDB's SST and blob files as its SstFileManager
// counts them, plus unflushed memtables — not the bundles' logical size. An upkeep thread samples
// the on-disk size (every 50 ms), learns the space amplification (on-disk / logical, its recent
// peak) and sets the logical budget to 90% of capacity over it; eviction (all blocks of the lowest
// priority before any of the next one, within a priority the least recently used) keeps the
// bundles within that budget. A put that finds the on-disk size at capacity (compaction behind)
// is refused (kResourceExhausted, counted: over_capacity) rather than written. At open the
// capacity is compared with the file system's free space, with a warning when it cannot fit.
//
// Damage at open: a MANIFEST that lost edits (the database's sequence number below the one a
// completed flush recorded in KVMESH-STATE), a lost CURRENT, an SST or blob file that is missing,
// truncated or fails its checksums (footer, meta blocks: RocksDB's paranoid checks when every
// table is opened) — the database is first opened read-only, so that nothing is deleted before
// it is checked. on_damage kMoveAside (default) renames the folder to "<path>.damaged-<UTC time>"
// (kept for inspection, logged at error level, stats().damage) and starts an empty tier;
// kStayOff returns kCorruption naming the damage and the folder. A damaged block found later (a
// get) is deleted and reported as kCorruption — a miss.
//
// Errors at run time: a stored entry that fails verification (bundle check, or RocksDB reporting
// corruption) is deleted, counted (corrupt) and returned as kCorruption — a miss. Any other
// RocksDB error (I/O, no space, ...) disables the tier: logged once at error level, counted
// (io_errors), stats().disabled and disabled_reason set, and every later call returns kIoError
// (Contains false) — the tier does not guess. Reopening is the way back. Opening on a full file
// system returns kIoError (RocksDB's info log goes to spdlog: rocksdb_logger.h; nothing aborts).
// Open errors are returned, not logged: the caller reports them once.
//
// Thread safety: thread-safe. An index (mutex) orders puts, gets and evictions; RocksDB calls run
// without the lock. The upkeep thread flushes and measures without the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "pool/entry_heap.h"
#include "store/block_bundle.h"
#include "store/disk_policy.h"
#include "store/slot_map.h"
#include "store/tier.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class PinnableSlice;
struct ReadOptions;
struct DBOptions;
class Env;
class SstFileManager;
class Status;
}  // namespace rocksdb

namespace kvmesh {

namespace rocksdb_tier {
class TierFolder;
class FlushListener;
}  // namespace rocksdb_tier

struct RocksDbTierPool {
  TierPoolId id;
  KvPoolLayout layout;
  float pool_scale = 1.0f;  // fp8_per_tensor scale or nvfp4 global scale
};

// Every setting of the tier, with its default (docs/disk-tier.md). kvnode's YAML section
// `disk_tier` sets the ones an operator chooses (node/node_config.h, configs/kvnode.yaml).
struct RocksDbTierOptions {
  std::string path;                        // the tier folder (created when missing)
  std::string namespace_name = "default";  // written in the marker; another one is refused
  std::int64_t capacity_bytes = 0;         // bytes on disk (see Capacity), > 0
  std::vector<RocksDbTierPool> pools;

  DiskDurability durability = DiskDurability::kFlush;
  std::int64_t flush_after_bytes = 64ll << 20;  // kFlush: unflushed bundle bytes before a flush
  std::int64_t flush_after_ms = 1000;           // kFlush: age of the oldest unflushed put, ms
  bool wal_sync = false;                        // kWal: fsync the WAL on every put
  DiskDamagePolicy on_damage = DiskDamagePolicy::kMoveAside;
  bool drop_stale_pools = true;  // drop our own families of another geometry at open

  // Tuning. Values are large: no compression; a bloom filter (keys are random content ids, so
  // every L0 file spans the key range and a get would otherwise read a bundle from each). Bundles
  // go to blob files by default: compaction then rewrites only keys and blob references, so
  // it needs almost no room of its own and the on-disk size follows the bundles held (with the
  // values in the SSTs, a compaction of random keys rewrites the whole last level and needs as
  // much room again). Blob files whose bundles are mostly evicted are collected (garbage
  // collection of the oldest quarter, forced at half garbage).
  bool enable_blob_files = true;  // values in blob files instead of the SSTs
  std::int64_t min_blob_bytes = 0;
  bool use_direct_io = false;  // direct reads and direct flush/compaction writes
  // Per memtable of the bundle families (>= 256 KiB); at most capacity_bytes / 32 is used (when
  // the capacity is counted on disk, >= 16 MiB), so that memtables and level-0 files stay a small
  // part of a small tier. 64 MiB as RocksDB's own default: each flush is one level-0 file, and
  // each compaction of level 0 rewrites the keys of the whole family, so smaller memtables (and a
  // smaller flush_after_bytes) multiply that work (docs/disk-tier.md, Memtables).
  std::int64_t write_buffer_bytes = 64ll << 20;
  int max_write_buffer_number = 2;             // >= 2
  std::int64_t block_cache_bytes = 8ll << 20;  // 0: no block cache
  bool fill_cache = true;                      // reads insert into the block cache
  // RocksDB's own data-block and blob checksums on reads. Off: the bundle's checksum verifies every
  // value byte anyway, RocksDB checks index blocks at table open and compaction input whatever
  // this says, and Debian's RocksDB computes CRC32C in software (docs/disk-tier.md).
  bool verify_block_checksums = false;
  int max_background_jobs = 2;

  rocksdb::Env* env = nullptr;  // null: rocksdb::Env::Default(); tests inject faults here
  // Tests: a fixed logical budget (bundle bytes) instead of the learned one; 0 = learned. The
  // on-disk check (over_capacity) applies either way.
  std::int64_t fixed_budget_bytes = 0;
  // Tests: no background compactions of the bundle families (as when they never get their turn:
  // short runs that close first, a loaded machine); flushes, and CollectGarbage, still run.
  bool disable_auto_compactions = false;
  // Tests: called for every block chosen as an eviction victim, under the tier's index lock,
  // before its delete is written. Must be quick and must not call the tier.
  std::function<void(TierPoolId, const ContentId&)> on_evict;
};

class RocksDbTier final : public BlockTier {
 public:
  // Claims the folder, checks what is in it, opens (or creates) the database and rebuilds the
  // index. kInvalidArgument: bad options. kFailedPrecondition / kNotSupported: a folder that is
  // not ours (see above), or in use. kCorruption: damage with on_damage kStayOff. kIoError:
  // RocksDB could not open the database (e.g. no space left).
  static Result<std::unique_ptr<RocksDbTier>> Open(RocksDbTierOptions options);
  // Stops the upkeep thread, writes pending last-use sequences, flushes and closes. Errors are
  // logged.
  ~RocksDbTier() override;
  RocksDbTier(const RocksDbTier&) = delete;
  RocksDbTier& operator=(const RocksDbTier&) = delete;

  std::string_view name() const override { return "rocksdb"; }
  Status Put(TierPoolId pool, const ContentId& id, const KvPoolView& src, std::int64_t block,
             int priority) override;
  Status PutBundle(TierPoolId pool, const ContentId& id, std::span<const std::byte> bundle,
                   int priority) override;
  // One bundle of PutBundles.
  struct BundlePut {
    TierPoolId pool;
    ContentId id;
    std::span<const std::byte> bundle;
    int priority = kTierDefaultPriority;
  };
  // PutBundle of several bundles in one RocksDB write (one write group, one memtable insert pass:
  // a spill batch): out[i] is what PutBundle of puts[i] would have returned; the durability
  // promise is PutBundle's, for each. REQUIRES: puts and out of one size.
  void PutBundles(std::span<const BundlePut> puts, std::span<Status> out) KVMESH_EXCLUDES(mu_);
  Status Get(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
             std::int64_t block) override;
  Status GetForRestore(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                       std::int64_t block) override;
  bool Contains(TierPoolId pool, const ContentId& id) override;
  // Counts the block as used now in the tier's eviction order, as a read of it would, without
  // reading it (node/flush.h orders the blocks it keeps this way). False: the tier does not hold
  // it.
  bool Refresh(TierPoolId pool, const ContentId& id);
  Status Erase(TierPoolId pool, const ContentId& id) override;
  std::vector<ContentId> ReadyIds(TierPoolId pool) override;
  TierStats stats() const override;

  // The verified bundle of a block (e.g. to move it into the host tier). Errors as Get.
  Result<std::string> GetBundle(TierPoolId pool, const ContentId& id);

  // GetForRestore of several blocks of one pool in one RocksDB MultiGet (a restore's consecutive
  // blocks): out[i] is what GetForRestore(pool, ids[i], dst, blocks[i]) would have returned.
  // REQUIRES: ids, blocks and out of one size; as GetForRestore for every destination.
  void GetManyForRestore(TierPoolId pool, std::span<const ContentId> ids, const KvPoolView& dst,
                         std::span<const std::int64_t> blocks, std::span<Status> out);

  // The ReadOptions of later reads: RocksDB's block checksums, block cache fill (benchmarks
  // measure each choice; the defaults are the options').
  void SetReadOptions(bool verify_block_checksums, bool fill_cache);

  // Writes pending last-use sequences and flushes every memtable (atomically); every put
  // acknowledged before the call is durable when it returns OK. kIoError (and the tier
  // disabled) on failure.
  Status Flush();
  // Waits until RocksDB has no pending or running compaction (benchmarks).
  Status WaitForCompactions();
  // How many times a put woke the upkeep thread for a kFlush flush (once each time the unflushed
  // bytes cross flush_after_bytes; never under kNone or kWal, which flush on no byte count).
  [[nodiscard]] std::int64_t flush_requests() const {
    return flush_requests_.load(std::memory_order_relaxed);
  }
  // Whether RocksDB's background compactions collect blob garbage now, in any pool (see Blob
  // garbage above).
  [[nodiscard]] bool background_gc() const {
    return background_gc_on_.load(std::memory_order_relaxed);
  }
  // How many garbage collections (CollectGarbage, by anyone) have completed since open.
  [[nodiscard]] std::int64_t garbage_collections() const {
    return gc_runs_.load(std::memory_order_relaxed);
  }
  // Blob garbage collection over every blob file (see Blob garbage above): flushes, then compacts
  // each pool's bundle family to its last level with RocksDB's blob GC forced at age cutoff 1, so
  // that the dead bundles of evicted and erased blocks are dropped and the live ones rewritten
  // into new blob files; the old files are then deleted. Returns when done; takes about as long
  // as writing the live bundles once. A no-op without blob files. kIoError (the tier disabled) on
  // failure; kCancelled when the tier closes meanwhile (an upkeep collection).
  Status CollectGarbage();

  // Puts acknowledged (returned OK and stored a new block) since open, numbered 1, 2, ... in the
  // order they returned; and the highest number the durability promise covers now (every put
  // numbered at or below it survives a crash).
  [[nodiscard]] std::uint64_t acknowledged_puts() const {
    return acked_.load(std::memory_order_acquire);
  }
  [[nodiscard]] std::uint64_t durable_puts() const {
    return durable_.load(std::memory_order_acquire);
  }

  bool disabled() const { return disabled_.load(std::memory_order_acquire); }
  const BundleCodec* Codec(TierPoolId pool) const;
  // The bundle bytes that eviction keeps the tier's blocks within now (see Capacity: learned from
  // the on-disk amplification, so it may shrink as files are written): how much a flush can
  // write without the tier evicting what the flush wrote before.
  [[nodiscard]] std::int64_t budget_bytes() const { return Budget(); }
  [[nodiscard]] const RocksDbTierOptions& options() const { return options_; }

  static std::string DataColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp);
  static std::string MetaColumnFamilyName(TierPoolId pool, const GeometryFingerprint& fp);

 private:
  friend class rocksdb_tier::FlushListener;
  struct PoolFamilies;
  struct Key {
    TierPoolId pool;
    ContentId id;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::uint64_t operator()(const Key& k) const {
      return ContentIdHash()(k.id) ^
             (static_cast<std::uint64_t>(k.pool.value) * 0x9E3779B97F4A7C15ULL);
    }
  };
  enum class EntryState : std::uint8_t { kWriting, kReady };
  struct Entry {
    EntryState state = EntryState::kWriting;
    bool durable = false;
    int priority = kTierDefaultPriority;
    std::uint64_t seq = 0;         // last use
    std::uint64_t data_key = 0;    // its bundle's key (the put's sequence); 0: the content id
    std::uint64_t generation = 0;  // which put made this entry
    std::uint64_t ack = 0;         // its acknowledgement number (0: loaded at open)
    std::int64_t bytes = 0;
    EvictionEntry slot = 0;  // its slot in index_ (and so in order_)
    bool dirty = false;      // its sequence is not persisted yet (listed in dirty_)
  };
  // An entry taken out of the index, whose records are to be deleted.
  struct Doomed {
    Key key;
    std::uint64_t data_key = 0;
  };
  // A put reserved in the index, with the victims it displaced.
  struct Reservation {
    bool already_held = false;
    std::uint64_t generation = 0;
    std::uint64_t seq = 0;  // also its data key
    std::vector<Doomed> victims;
  };

  explicit RocksDbTier(RocksDbTierOptions options);
  // Open's steps (rocksdb_tier_open.cc).
  Status OpenFolder();
  rocksdb::DBOptions MakeDbOptions();
  Status CheckExisting();  // read-only: damage, before anything is deleted
  Status OpenDatabase();
  Status DropStaleFamily(rocksdb::ColumnFamilyHandle* handle);
  Status LoadIndex();
  void CheckFreeSpace() const;

  Result<PoolFamilies*> FindPool(TierPoolId pool, int priority) const;
  Result<Reservation> Reserve(const PoolFamilies& p, const ContentId& id, int priority)
      KVMESH_EXCLUDES(mu_);
  // A reserved put: its value as pieces, and where its outcome goes.
  struct PendingPut {
    const PoolFamilies* p = nullptr;
    ContentId id;
    int priority = kTierDefaultPriority;
    Reservation r;
    std::span<const std::span<const std::byte>> value;
    Status* out = nullptr;
  };
  // Writes the reserved puts in one RocksDB write and publishes them; each outcome in its `out`.
  void Commit(std::span<PendingPut> puts) KVMESH_EXCLUDES(mu_);
  // Reads a block and hands it to `use`, which verifies it (BundleCodec::Decode, DecodeOnePass or
  // Verify) — straight from RocksDB's pinned buffer, no staging copy; a kCorruption from `use`
  // drops the entry.
  Status ReadBlock(const PoolFamilies& p, const ContentId& id,
                   const std::function<Status(std::span<const std::byte>)>& use)
      KVMESH_EXCLUDES(mu_);
  // The index half of a read: the entry's generation and data key, and its recency updated; or
  // the miss.
  struct ReadTicket {
    std::uint64_t generation = 0;
    std::uint64_t data_key = 0;
  };
  Result<ReadTicket> TouchForRead(const Key& key) KVMESH_EXCLUDES(mu_);
  // The outcome of RocksDB's read of an entry: a miss (erased from the index), a corrupt entry
  // (dropped), an I/O error (disables), or OK (`use` run on the value, which decides).
  Status FinishRead(const PoolFamilies& p, const ContentId& id, const ReadTicket& ticket,
                    const rocksdb::Status& s, const rocksdb::PinnableSlice& value,
                    const std::function<Status(std::span<const std::byte>)>& use)
      KVMESH_EXCLUDES(mu_);
  [[nodiscard]] rocksdb::ReadOptions ReadOptionsNow() const;
  // Deletes a corrupt entry (index and RocksDB) and returns the kCorruption to report.
  Status DropCorrupt(const PoolFamilies& p, const ContentId& id, const ReadTicket& ticket,
                     const std::string& why) KVMESH_EXCLUDES(mu_);
  // Disables the tier (once) and returns the kIoError to report.
  Status Disable(std::string_view op, const rocksdb::Status& s);
  Status DisabledError() const;
  Status PersistRecency() KVMESH_EXCLUDES(mu_);
  void EraseFromIndex(const Key& key) KVMESH_REQUIRES(mu_);
  // A ready entry joins (leaves) the eviction order; Touch makes it the most recently used of
  // `priority`, its new sequence to be persisted.
  static std::uint64_t OrderKey(const Entry& e);
  void AddToOrder(const Entry& e) KVMESH_REQUIRES(mu_);
  void RemoveFromOrder(const Entry& e) KVMESH_REQUIRES(mu_);
  // Adds a new entry to the index (its slot recorded in it); returns it.
  Entry& AddToIndex(const Key& key, const Entry& e) KVMESH_REQUIRES(mu_);
  void Touch(const Key& key, Entry& e, int priority) KVMESH_REQUIRES(mu_);
  // Removes the first victim in eviction order from the index; returns it.
  Doomed EvictOne() KVMESH_REQUIRES(mu_);
  // Writes the deletes of evicted blocks (one batch).
  Status WriteDeletes(std::span<const Doomed> victims, std::string_view op);
  [[nodiscard]] std::int64_t Budget() const {
    return budget_bytes_.load(std::memory_order_relaxed);
  }

  // Upkeep (rocksdb_tier_upkeep.cc): durability flushes, capacity sampling, eviction to budget.
  void StartUpkeep();
  void StopUpkeep();
  void UpkeepLoop();
  void SampleCapacity();
  // Over capacity with no compaction running: flush and compact the bundle families, so that
  // evicted blocks' space comes back even while puts are refused (no flush would trigger one).
  void NudgeCompaction();
  // Whether the files on disk exceed the live bundles by enough to collect their garbage
  // (on_disk > kGcTrigger x live + kGcSlack, with blob files).
  [[nodiscard]] bool WorthCollecting(std::int64_t on_disk, std::int64_t live) const;
  // The upkeep's collection. With room under the capacity to rewrite every live bundle (files +
  // live + kGcSlack within it), CollectGarbage. Without (a tier at its write limit holds 80% of
  // its capacity in files, so a full collection fits only while the live bundles are under about
  // 20% of it), in steps: each compacts the bundle family with blob GC forced at the age cutoff
  // that takes the oldest blob files whose live bundles, as RocksDB counts them, fit in the room
  // (RocksDB writes the relocated bundles before it deletes the old files), until the files are
  // back under the trigger, no file fits, or kMaxGcSteps. An oldest file of live bundles only is
  // rewritten into a new file, so the next step reaches the garbage behind it. When no step can
  // run it does nothing: the upkeep asks for compactions while it cannot start a collection.
  Status CollectGarbageWithinCapacity();
  Status CompactFamily(const PoolFamilies& p, double age_cutoff);
  void CollectionDone(std::chrono::steady_clock::time_point start, std::int64_t before,
                      std::string_view what);
  // What the files on disk say of the amplification: on_disk / live, but with blob files no more
  // than kGcTrigger x live + kGcSlack over live — the garbage above that is a collection's to
  // remove, not the budget's (upkeep and open alike; at open, garbage counted as amplification
  // once shrank the budget below the live blocks and evicted them); within 1 and
  // kMaxAmplification. REQUIRES: live > 0.
  [[nodiscard]] double AmplificationSample(std::int64_t on_disk, std::int64_t live) const;
  // Turns RocksDB's blob garbage collection in background compactions on for a bundle family
  // whose blob files hold more than kBackgroundGcOn of garbage (as RocksDB has counted it), and
  // off again below kBackgroundGcOff (upkeep thread).
  void UpdateBackgroundGc();
  // The upkeep thread's GC: CollectGarbageWithinCapacity on gc_thread_ (one at a time, one every
  // kGcIntervalNs), joined at close. Whether it started one.
  bool StartCollectingGarbage();
  [[nodiscard]] std::int64_t EffectiveWriteBuffer() const;
  [[nodiscard]] std::int64_t LogicalBudget() const;  // from amplification_ (upkeep, open)
  Status FlushNow() KVMESH_EXCLUDES(flush_mu_, mu_);
  void MarkDurable(std::uint64_t ack) KVMESH_EXCLUDES(mu_);
  void OnFlushCompleted(std::uint64_t largest_sequence);

  RocksDbTierOptions options_;
  std::unique_ptr<rocksdb_tier::TierFolder> folder_;
  std::string damage_;  // what Open found and did (stats().damage)
  std::vector<std::unique_ptr<PoolFamilies>> pools_;
  std::shared_ptr<rocksdb::SstFileManager> sst_files_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // every open family, destroyed at close
  std::atomic<bool> disabled_{false};
  std::atomic<bool> verify_block_checksums_{false};
  std::atomic<bool> fill_cache_{true};
  std::atomic<std::uint64_t> acked_{0};
  std::atomic<std::uint64_t> durable_{0};
  std::atomic<std::int64_t> budget_bytes_{0};            // logical budget eviction keeps within
  std::atomic<std::int64_t> disk_bytes_{0};              // last sampled on-disk bytes (+ memtables)
  std::atomic<std::int64_t> committed_since_sample_{0};  // bundle bytes put since that sample
  std::atomic<bool> over_capacity_{false};               // last sample at or above capacity
  std::atomic<std::int64_t> unflushed_bytes_{0};  // bundle bytes put since the last flush began

  mutable Mutex mu_;
  SlotMap<Key, Entry, KeyHash> index_ KVMESH_GUARDED_BY(mu_);
  // Eviction order of the ready entries: lowest priority, then lowest sequence, first — a flat
  // indexed heap (pool/entry_heap.h) over the entries' index slots, keyed by OrderKey. A read
  // leaves an entry's heap key as it was (older than its sequence now: a lower bound, never
  // above the true key); EvictOne re-keys a stale top and looks again, so the victim is exactly
  // the lowest (priority, sequence), and a block read many times between two evictions costs one
  // re-key instead of a heap update per read. A change of priority re-keys at once.
  EntryHeap order_ KVMESH_GUARDED_BY(mu_);
  // Entries whose sequence is not persisted yet (Entry::dirty set), for PersistRecency; a key may
  // be listed whose entry left the index since (skipped there). Compacted when it outgrows the
  // index (an entry erased and put again between two persists is listed twice).
  std::vector<Key> dirty_ KVMESH_GUARDED_BY(mu_);
  std::deque<std::pair<std::uint64_t, Key>> not_durable_ KVMESH_GUARDED_BY(mu_);  // (ack, key)
  std::int64_t not_durable_entries_ KVMESH_GUARDED_BY(mu_) = 0;
  std::int64_t used_bytes_ KVMESH_GUARDED_BY(mu_) = 0;     // entries in the index, any state
  std::int64_t ready_bytes_ KVMESH_GUARDED_BY(mu_) = 0;    // ready entries (stats().used_bytes)
  std::int64_t writing_bytes_ KVMESH_GUARDED_BY(mu_) = 0;  // puts in flight, erased or not
  std::uint64_t next_seq_ KVMESH_GUARDED_BY(mu_) = 1;
  std::uint64_t next_generation_ KVMESH_GUARDED_BY(mu_) = 1;
  std::string disabled_reason_ KVMESH_GUARDED_BY(mu_);
  mutable TierCounters counters_;

  // Upkeep thread state.
  Mutex upkeep_mu_;
  std::condition_variable upkeep_cv_;
  bool upkeep_stop_ KVMESH_GUARDED_BY(upkeep_mu_) = false;
  std::atomic<std::int64_t> first_unflushed_ns_{0};  // steady clock; 0: nothing unflushed
  double amplification_ = 0;        // learned on-disk / logical bytes (upkeep thread; set at open)
  std::int64_t last_nudge_ns_ = 0;  // upkeep thread: the last compaction it asked for
  std::thread gc_thread_;           // upkeep thread: a CollectGarbage started at capacity
  std::int64_t last_gc_ns_ = 0;     // upkeep thread: when it last started one
  std::atomic<bool> gc_running_{false};
  std::atomic<bool> gc_done_{false};  // a collection completed; the upkeep's next sample resets
  std::atomic<std::int64_t> flush_requests_{0};  // puts that woke the upkeep for a flush
  std::atomic<bool> background_gc_on_{false};    // UpdateBackgroundGc's last word, any pool
  std::atomic<std::int64_t> gc_runs_{0};  // CollectGarbage calls completed (open, upkeep, callers)
  Mutex flush_mu_;                        // one flush at a time (Flush() and the upkeep thread)
  // Not flush_mu_: RocksDB calls the flush listener while a Flush() holding flush_mu_ waits.
  Mutex record_mu_;
  std::uint64_t recorded_sequence_ KVMESH_GUARDED_BY(record_mu_) = 0;
  std::thread upkeep_;
};

}  // namespace kvmesh
