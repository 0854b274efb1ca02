// RocksDbTier: puts, gets, erases, eviction and the disabled state.
#include "store/rocksdb_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <chrono>

#include "common/log.h"
#include "common/strings.h"
#include "store/rocksdb_tier_internal.h"

namespace kvmesh {

using rocksdb_tier::DataKey;
using rocksdb_tier::KeySlice;

namespace {

using SteadyClock = std::chrono::steady_clock;

std::int64_t NanosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count();
}

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// The largest put batch a thread keeps for its next put (Commit).
constexpr std::size_t kMaxKeptBatchBytes = 4 << 20;

rocksdb::WriteOptions WriteOptionsFor(const RocksDbTierOptions& o) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = o.durability != DiskDurability::kWal;
  wo.sync = o.durability == DiskDurability::kWal && o.wal_sync;
  return wo;
}

}  // namespace

Result<RocksDbTier::PoolFamilies*> RocksDbTier::FindPool(TierPoolId pool, int priority) const {
  if (priority < kTierMinPriority || priority > kTierMaxPriority) {
    return Status::InvalidArgument(StrCat("rocksdb tier: priority ", priority, " outside [",
                                          kTierMinPriority, ", ", kTierMaxPriority, "]"));
  }
  for (const auto& p : pools_) {
    if (p->config.id == pool) return p.get();
  }
  return Status::InvalidArgument(StrCat("rocksdb tier: unknown pool ", pool.value));
}

const BundleCodec* RocksDbTier::Codec(TierPoolId pool) const {
  auto p = FindPool(pool, kTierDefaultPriority);
  return p.ok() ? &(*p)->codec : nullptr;
}

Status RocksDbTier::DisabledError() const {
  MutexLock lock(&mu_);
  return Status::IoError(
      StrCat("rocksdb tier ", options_.path, " is disabled after: ", disabled_reason_));
}

Status RocksDbTier::Disable(std::string_view op, const rocksdb::Status& s) {
  counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
  const std::string reason = StrCat(op, ": ", s.ToString());
  if (!disabled_.exchange(true, std::memory_order_acq_rel)) {
    KVMESH_LOG_ERROR("rocksdb tier disabled path {} op {} error {}", options_.path, op,
                     s.ToString());
    MutexLock lock(&mu_);
    disabled_reason_ = reason;
  }
  upkeep_cv_.notify_all();
  return Status::IoError(StrCat("rocksdb tier ", options_.path, " ", reason, " (tier disabled)"));
}

void RocksDbTier::EraseFromIndex(const Key& key) {
  const Entry* e = index_.Get(key);
  if (e == nullptr) return;
  if (e->state == EntryState::kReady) {
    RemoveFromOrder(*e);
    ready_bytes_ -= e->bytes;
    if (!e->durable) --not_durable_entries_;
  }
  used_bytes_ -= e->bytes;
  index_.Erase(e->slot);
}

RocksDbTier::Entry& RocksDbTier::AddToIndex(const Key& key, const Entry& e) {
  const std::uint32_t slot = index_.Insert(key, e);
  Entry& added = index_.value(slot);
  added.slot = slot;
  return added;
}

std::uint64_t RocksDbTier::OrderKey(const Entry& e) {
  KVMESH_DCHECK(e.seq < (std::uint64_t{1} << 56)) << e.seq;
  return (static_cast<std::uint64_t>(e.priority) << 56) | e.seq;
}

void RocksDbTier::AddToOrder(const Entry& e) { order_.Push(e.slot, OrderKey(e)); }

void RocksDbTier::RemoveFromOrder(const Entry& e) { order_.Erase(e.slot); }

void RocksDbTier::Touch(const Key& key, Entry& e, int priority) {
  const bool reprioritised = priority != e.priority;
  e.priority = priority;
  e.seq = next_seq_++;
  if (reprioritised) order_.SetKey(e.slot, OrderKey(e));  // else re-keyed lazily (EvictOne)
  if (e.dirty) return;
  e.dirty = true;
  if (dirty_.size() >= 2 * index_.size() + 1024) {  // mostly keys of entries gone meanwhile
    std::size_t kept = 0;
    for (const Key& k : dirty_) {
      Entry* listed = index_.Get(k);
      if (listed == nullptr || !listed->dirty) continue;
      listed->dirty = false;  // kept once: a later duplicate is dropped
      dirty_[kept++] = k;
    }
    dirty_.resize(kept);
    for (const Key& k : dirty_) index_.Get(k)->dirty = true;
  }
  dirty_.push_back(key);
}

RocksDbTier::Doomed RocksDbTier::EvictOne() {
  EvictionEntry slot = *order_.Top();
  for (std::uint64_t now = OrderKey(index_.value(slot)); order_.KeyOf(slot) != now;
       now = OrderKey(index_.value(slot))) {
    order_.SetKey(slot, now);  // read since it was keyed: its true place, then the next top
    slot = *order_.Top();
  }
  const Key key = index_.key(slot);
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  counters_.eviction_bytes.fetch_add(index_.value(slot).bytes, std::memory_order_relaxed);
  if (options_.on_evict) options_.on_evict(key.pool, key.id);
  const Doomed doomed{key, index_.value(slot).data_key};
  EraseFromIndex(key);
  return doomed;
}

Status RocksDbTier::WriteDeletes(std::span<const Doomed> victims, std::string_view op) {
  if (victims.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const Doomed& v : victims) {
    const PoolFamilies& vp = *FindPool(v.key.pool, kTierDefaultPriority).value();
    batch.Delete(vp.data, DataKey(v.data_key, v.key.id).slice()).PermitUncheckedError();
    batch.Delete(vp.meta, KeySlice(v.key.id)).PermitUncheckedError();
  }
  if (rocksdb::Status s = db_->Write(WriteOptionsFor(options_), &batch); !s.ok()) {
    return Disable(op, s);
  }
  return Status::Ok();
}

Result<RocksDbTier::Reservation> RocksDbTier::Reserve(const PoolFamilies& p, const ContentId& id,
                                                      int priority) {
  Reservation r;
  const Key key{p.config.id, id};
  const std::int64_t bytes = p.codec.bundle_bytes();
  MutexLock lock(&mu_);
  if (disabled()) {
    return Status::IoError(
        StrCat("rocksdb tier ", options_.path, " is disabled after: ", disabled_reason_));
  }
  if (Entry* held = index_.Get(key); held != nullptr) {
    if (held->state == EntryState::kReady) Touch(key, *held, priority);
    counters_.put_present.fetch_add(1, std::memory_order_relaxed);
    r.already_held = true;
    return r;
  }
  const std::int64_t on_disk = disk_bytes_.load(std::memory_order_relaxed) +
                               committed_since_sample_.load(std::memory_order_relaxed);
  const bool on_disk_limit = options_.capacity_bytes >= rocksdb_tier::kMinOnDiskCapacity;
  if (on_disk_limit &&
      (over_capacity_.load(std::memory_order_relaxed) ||
       static_cast<double>(on_disk + bytes) > rocksdb_tier::FractionsFor(options_).write_limit *
                                                  static_cast<double>(options_.capacity_bytes))) {
    counters_.over_capacity.fetch_add(1, std::memory_order_relaxed);
    upkeep_cv_.notify_one();
    return Status::ResourceExhausted(
        StrCat("rocksdb tier: ", on_disk, " bytes on disk, at its capacity of ",
               options_.capacity_bytes, " while compaction reclaims evicted blocks"));
  }
  const std::int64_t budget = Budget();
  if (writing_bytes_ + bytes > budget || used_bytes_ - ready_bytes_ + bytes > budget) {
    return Status::ResourceExhausted(StrCat("rocksdb tier: ", bytes, " bytes do not fit in its ",
                                            "budget of ", budget, " with ", writing_bytes_,
                                            " bytes being written"));
  }
  while (used_bytes_ + bytes > budget && order_.size() > 0) r.victims.push_back(EvictOne());
  r.seq = next_seq_++;
  r.generation = next_generation_++;
  Entry e;
  e.priority = priority;
  e.seq = r.seq;
  e.data_key = r.seq;
  e.generation = r.generation;
  e.bytes = bytes;
  AddToIndex(key, e);
  used_bytes_ += bytes;
  writing_bytes_ += bytes;
  return r;
}

void RocksDbTier::Commit(std::span<PendingPut> puts) {
  // One batch per thread, cleared and refilled: its buffer keeps its size, so that a put neither
  // allocates (and faults in) a bundle-sized buffer nor grows one piece by piece. One that grew
  // past kMaxKeptBatchBytes (large bundles, or many) is given back after its write.
  thread_local rocksdb::WriteBatch batch;
  batch.Clear();
  std::array<rocksdb::Slice, BundlePieces::kMaxPieces> parts;
  for (const PendingPut& put : puts) {
    for (const Doomed& v : put.r.victims) {
      const PoolFamilies& vp = *FindPool(v.key.pool, kTierDefaultPriority).value();
      batch.Delete(vp.data, DataKey(v.data_key, v.key.id).slice()).PermitUncheckedError();
      batch.Delete(vp.meta, KeySlice(v.key.id)).PermitUncheckedError();
    }
    KVMESH_CHECK_LE(put.value.size(), parts.size());
    for (std::size_t i = 0; i < put.value.size(); ++i) {
      parts[i] = {reinterpret_cast<const char*>(put.value[i].data()), put.value[i].size()};
    }
    const DataKey data_key(put.r.seq, put.id);
    const rocksdb::Slice data_slice = data_key.slice();
    batch
        .Put(put.p->data, rocksdb::SliceParts(&data_slice, 1),
             rocksdb::SliceParts(parts.data(), static_cast<int>(put.value.size())))
        .PermitUncheckedError();
    const auto meta = rocksdb_tier::EncodeMeta(put.r.seq, put.priority, put.r.seq);
    batch.Put(put.p->meta, KeySlice(put.id), meta.slice()).PermitUncheckedError();
  }
  const rocksdb::WriteOptions wo = WriteOptionsFor(options_);
  const auto tw = SteadyClock::now();
  const rocksdb::Status s = db_->Write(wo, &batch);
  const auto ti = SteadyClock::now();
  counters_.write_ns.fetch_add(NanosSince(tw), std::memory_order_relaxed);
  if (batch.GetDataSize() > kMaxKeptBatchBytes) batch = rocksdb::WriteBatch();

  std::int64_t total = 0;
  std::vector<const PendingPut*> erased_meanwhile;
  {
    MutexLock lock(&mu_);
    for (const PendingPut& put : puts) {
      const Key key{put.p->config.id, put.id};
      const std::int64_t bytes = put.p->codec.bundle_bytes();
      total += bytes;
      writing_bytes_ -= bytes;
      Entry* held = index_.Get(key);
      const bool mine = held != nullptr && held->generation == put.r.generation;
      if (!s.ok()) {
        if (mine) EraseFromIndex(key);
        continue;
      }
      // Acknowledgement numbers follow the order in which puts return (taken under the lock).
      const std::uint64_t ack = acked_.load(std::memory_order_relaxed) + 1;
      acked_.store(ack, std::memory_order_release);
      const bool durable_now = options_.durability == DiskDurability::kWal;
      if (durable_now) durable_.store(ack, std::memory_order_release);
      if (mine) {
        Entry& e = *held;
        e.state = EntryState::kReady;
        e.ack = ack;
        e.durable = durable_now;
        AddToOrder(e);
        ready_bytes_ += bytes;
        if (!durable_now) {
          ++not_durable_entries_;
          not_durable_.emplace_back(ack, key);
        }
      } else if (held == nullptr) {
        erased_meanwhile.push_back(&put);
      }
    }
  }
  counters_.index_ns.fetch_add(NanosSince(ti), std::memory_order_relaxed);
  if (!s.ok()) {
    const Status failed = Disable("put", s);
    for (const PendingPut& put : puts) *put.out = failed;
    return;
  }
  for (const PendingPut& put : puts) *put.out = Status::Ok();
  counters_.puts.fetch_add(static_cast<std::int64_t>(puts.size()), std::memory_order_relaxed);
  counters_.put_bytes.fetch_add(total, std::memory_order_relaxed);
  committed_since_sample_.fetch_add(total, std::memory_order_relaxed);
  std::int64_t expected = 0;
  first_unflushed_ns_.compare_exchange_strong(expected, NowNs(), std::memory_order_relaxed);
  // Only the write that crosses the mark wakes the upkeep thread (a wake is a futex call and a
  // context switch: once per put, 17.6% of a 4 KiB put's time in perf). A wake lost to the
  // thread's own wait is made up by its next sample, at most one sample interval (50 ms) later.
  const std::int64_t unflushed = unflushed_bytes_.fetch_add(total, std::memory_order_relaxed);
  if (options_.durability == DiskDurability::kFlush && unflushed < options_.flush_after_bytes &&
      unflushed + total >= options_.flush_after_bytes) {
    flush_requests_.fetch_add(1, std::memory_order_relaxed);
    upkeep_cv_.notify_one();
  }
  if (!erased_meanwhile.empty()) {  // an Erase came while the write ran: undo those puts
    rocksdb::WriteBatch undo;
    for (const PendingPut* put : erased_meanwhile) {
      undo.Delete(put->p->data, DataKey(put->r.seq, put->id).slice()).PermitUncheckedError();
      undo.Delete(put->p->meta, KeySlice(put->id)).PermitUncheckedError();
    }
    if (rocksdb::Status u = db_->Write(wo, &undo); !u.ok()) {
      const Status failed = Disable("erase", u);
      for (const PendingPut* put : erased_meanwhile) *put->out = failed;
    }
  }
}

Status RocksDbTier::Put(TierPoolId pool, const ContentId& id, const KvPoolView& src,
                        std::int64_t block, int priority) {
  KVMESH_ASSIGN_OR_RETURN(PoolFamilies * p, FindPool(pool, priority));
  KVMESH_RETURN_IF_ERROR(p->codec.CheckView(src, block));
  const auto t0 = SteadyClock::now();
  KVMESH_ASSIGN_OR_RETURN(Reservation r, Reserve(*p, id, priority));
  counters_.index_ns.fetch_add(NanosSince(t0), std::memory_order_relaxed);
  if (r.already_held) return Status::Ok();
  // The bundle goes to RocksDB as pieces that point into the pool block: no intermediate copy.
  const auto t1 = SteadyClock::now();
  BundlePieces pieces;
  const Status encoded = p->codec.EncodePieces(src, block, id, &pieces);
  counters_.encode_ns.fetch_add(NanosSince(t1), std::memory_order_relaxed);
  if (Status st = encoded; !st.ok()) {
    MutexLock lock(&mu_);
    writing_bytes_ -= p->codec.bundle_bytes();
    const Entry* held = index_.Get(Key{pool, id});
    if (held != nullptr && held->generation == r.generation) EraseFromIndex(Key{pool, id});
    return st;
  }
  Status out;
  PendingPut put{p,   id, priority, std::move(r), std::span(pieces.pieces.data(), pieces.count),
                 &out};
  Commit(std::span(&put, 1));
  return out;
}

Status RocksDbTier::PutBundle(TierPoolId pool, const ContentId& id,
                              std::span<const std::byte> bundle, int priority) {
  KVMESH_ASSIGN_OR_RETURN(PoolFamilies * p, FindPool(pool, priority));
  const auto t0 = SteadyClock::now();
  const Status verified = p->codec.Verify(bundle, id);
  counters_.encode_ns.fetch_add(NanosSince(t0), std::memory_order_relaxed);
  KVMESH_RETURN_IF_ERROR(verified);
  const auto t1 = SteadyClock::now();
  Result<Reservation> reserved = Reserve(*p, id, priority);
  counters_.index_ns.fetch_add(NanosSince(t1), std::memory_order_relaxed);
  KVMESH_ASSIGN_OR_RETURN(Reservation r, std::move(reserved));
  if (r.already_held) return Status::Ok();
  const std::span<const std::byte> one[1] = {bundle};
  Status out;
  PendingPut put{p, id, priority, std::move(r), one, &out};
  Commit(std::span(&put, 1));
  return out;
}

void RocksDbTier::PutBundles(std::span<const BundlePut> puts, std::span<Status> out) {
  KVMESH_CHECK_EQ(puts.size(), out.size());
  std::vector<PendingPut> pending;
  pending.reserve(puts.size());
  std::vector<std::array<std::span<const std::byte>, 1>> values(puts.size());
  for (std::size_t i = 0; i < puts.size(); ++i) {
    const BundlePut& b = puts[i];
    Result<PoolFamilies*> p = FindPool(b.pool, b.priority);
    if (!p.ok()) {
      out[i] = p.status();
      continue;
    }
    const auto t0 = SteadyClock::now();
    out[i] = (*p)->codec.Verify(b.bundle, b.id);
    counters_.encode_ns.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    if (!out[i].ok()) continue;
    const auto t1 = SteadyClock::now();
    Result<Reservation> reserved = Reserve(**p, b.id, b.priority);
    counters_.index_ns.fetch_add(NanosSince(t1), std::memory_order_relaxed);
    if (!reserved.ok()) {
      out[i] = reserved.status();
      continue;
    }
    if (reserved->already_held) continue;  // OK
    values[i][0] = b.bundle;
    pending.push_back(PendingPut{*p, b.id, b.priority, std::move(*reserved), values[i], &out[i]});
  }
  if (!pending.empty()) Commit(pending);
}

Status RocksDbTier::DropCorrupt(const PoolFamilies& p, const ContentId& id,
                                const ReadTicket& ticket, const std::string& why) {
  const Key key{p.config.id, id};
  {
    MutexLock lock(&mu_);
    const Entry* held = index_.Get(key);
    if (held != nullptr && held->generation == ticket.generation) EraseFromIndex(key);
  }
  counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
  KVMESH_LOG_WARN("rocksdb tier corrupt block deleted pool {} id {} error {}", p.config.id.value,
                  id.ToHex(), why);
  rocksdb::WriteBatch batch;
  batch.Delete(p.data, DataKey(ticket.data_key, id).slice()).PermitUncheckedError();
  batch.Delete(p.meta, KeySlice(id)).PermitUncheckedError();
  if (rocksdb::Status s = db_->Write(WriteOptionsFor(options_), &batch); !s.ok()) {
    Disable("delete corrupt", s).IgnoreError();  // reported below as the corruption it is
  }
  return Status::Corruption(
      StrCat("rocksdb tier pool ", p.config.id.value, " block ", id.ToHex(), ": ", why));
}

Result<RocksDbTier::ReadTicket> RocksDbTier::TouchForRead(const Key& key) {
  MutexLock lock(&mu_);
  if (disabled()) {
    return Status::IoError(
        StrCat("rocksdb tier ", options_.path, " is disabled after: ", disabled_reason_));
  }
  Entry* e = index_.Get(key);
  if (e == nullptr || e->state != EntryState::kReady) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::NotFound(
        StrCat("rocksdb tier pool ", key.pool.value, ": no block ", key.id.ToHex()));
  }
  Touch(key, *e, e->priority);
  return ReadTicket{e->generation, e->data_key};
}

rocksdb::ReadOptions RocksDbTier::ReadOptionsNow() const {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = verify_block_checksums_.load(std::memory_order_relaxed);
  ro.fill_cache = fill_cache_.load(std::memory_order_relaxed);
  return ro;
}

void RocksDbTier::SetReadOptions(bool verify_block_checksums, bool fill_cache) {
  verify_block_checksums_.store(verify_block_checksums, std::memory_order_relaxed);
  fill_cache_.store(fill_cache, std::memory_order_relaxed);
}

Status RocksDbTier::FinishRead(const PoolFamilies& p, const ContentId& id, const ReadTicket& ticket,
                               const rocksdb::Status& s, const rocksdb::PinnableSlice& value,
                               const std::function<Status(std::span<const std::byte>)>& use) {
  const Key key{p.config.id, id};
  if (s.IsNotFound()) {  // evicted or erased meanwhile, or its meta record outlived it
    MutexLock lock(&mu_);
    const Entry* held = index_.Get(key);
    if (held != nullptr && held->generation == ticket.generation) EraseFromIndex(key);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return Status::NotFound(
        StrCat("rocksdb tier pool ", key.pool.value, ": no block ", id.ToHex()));
  }
  if (s.IsCorruption()) return DropCorrupt(p, id, ticket, s.ToString());
  if (!s.ok()) return Disable("get", s);
  const std::span<const std::byte> bundle(reinterpret_cast<const std::byte*>(value.data()),
                                          value.size());
  const auto t0 = SteadyClock::now();
  const Status st = use(bundle);
  counters_.decode_ns.fetch_add(NanosSince(t0), std::memory_order_relaxed);
  if (!st.ok()) return st.IsCorruption() ? DropCorrupt(p, id, ticket, st.message()) : st;
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.hit_bytes.fetch_add(static_cast<std::int64_t>(bundle.size()),
                                std::memory_order_relaxed);
  return Status::Ok();
}

Status RocksDbTier::ReadBlock(const PoolFamilies& p, const ContentId& id,
                              const std::function<Status(std::span<const std::byte>)>& use) {
  const auto t0 = SteadyClock::now();
  Result<ReadTicket> ticket = TouchForRead(Key{p.config.id, id});
  counters_.index_ns.fetch_add(NanosSince(t0), std::memory_order_relaxed);
  if (!ticket.ok()) return ticket.status();
  const auto t1 = SteadyClock::now();
  rocksdb::PinnableSlice value;  // pins RocksDB's buffer (block cache or read buffer): no copy
  const DataKey key(ticket->data_key, id);
  const rocksdb::Status s = db_->Get(ReadOptionsNow(), p.data, key.slice(), &value);
  counters_.read_ns.fetch_add(NanosSince(t1), std::memory_order_relaxed);
  return FinishRead(p, id, *ticket, s, value, use);
}

Status RocksDbTier::Get(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                        std::int64_t block) {
  KVMESH_ASSIGN_OR_RETURN(PoolFamilies * p, FindPool(pool, kTierDefaultPriority));
  KVMESH_RETURN_IF_ERROR(p->codec.CheckView(dst, block));
  return ReadBlock(*p, id, [&](std::span<const std::byte> bundle) {
    return p->codec.Decode(bundle, id, dst, block);
  });
}

Status RocksDbTier::GetForRestore(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                                  std::int64_t block) {
  KVMESH_ASSIGN_OR_RETURN(PoolFamilies * p, FindPool(pool, kTierDefaultPriority));
  KVMESH_RETURN_IF_ERROR(p->codec.CheckView(dst, block));
  return ReadBlock(*p, id, [&](std::span<const std::byte> bundle) {
    return p->codec.DecodeOnePass(bundle, id, dst, block);
  });
}

void RocksDbTier::GetManyForRestore(TierPoolId pool, std::span<const ContentId> ids,
                                    const KvPoolView& dst, std::span<const std::int64_t> blocks,
                                    std::span<Status> out) {
  KVMESH_CHECK(ids.size() == blocks.size() && ids.size() == out.size())
      << ids.size() << " ids, " << blocks.size() << " blocks, " << out.size() << " statuses";
  Result<PoolFamilies*> found = FindPool(pool, kTierDefaultPriority);
  if (!found.ok()) {
    for (Status& st : out) st = found.status();
    return;
  }
  const PoolFamilies& p = **found;
  // The index half of every read first (one lock each), then one MultiGet of those held.
  std::vector<std::size_t> which;
  std::vector<ReadTicket> tickets;
  std::vector<DataKey> data_keys;
  which.reserve(ids.size());
  tickets.reserve(ids.size());
  data_keys.reserve(ids.size());
  const auto t0 = SteadyClock::now();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out[i] = p.codec.CheckView(dst, blocks[i]);
    if (!out[i].ok()) continue;
    Result<ReadTicket> t = TouchForRead(Key{pool, ids[i]});
    if (!t.ok()) {
      out[i] = t.status();
      continue;
    }
    which.push_back(i);
    tickets.push_back(*t);
    data_keys.emplace_back(t->data_key, ids[i]);
  }
  std::vector<rocksdb::Slice> keys;
  keys.reserve(data_keys.size());
  for (const DataKey& k : data_keys) keys.push_back(k.slice());
  counters_.index_ns.fetch_add(NanosSince(t0), std::memory_order_relaxed);
  if (which.empty()) return;
  const auto t1 = SteadyClock::now();
  std::vector<rocksdb::PinnableSlice> values(which.size());
  std::vector<rocksdb::Status> statuses(which.size());
  db_->MultiGet(ReadOptionsNow(), p.data, which.size(), keys.data(), values.data(),
                statuses.data());
  counters_.read_ns.fetch_add(NanosSince(t1), std::memory_order_relaxed);
  for (std::size_t j = 0; j < which.size(); ++j) {
    const std::size_t i = which[j];
    out[i] = FinishRead(p, ids[i], tickets[j], statuses[j], values[j],
                        [&](std::span<const std::byte> bundle) {
                          return p.codec.DecodeOnePass(bundle, ids[i], dst, blocks[i]);
                        });
  }
}

Result<std::string> RocksDbTier::GetBundle(TierPoolId pool, const ContentId& id) {
  KVMESH_ASSIGN_OR_RETURN(PoolFamilies * p, FindPool(pool, kTierDefaultPriority));
  std::string out;
  KVMESH_RETURN_IF_ERROR(ReadBlock(*p, id, [&](std::span<const std::byte> bundle) {
    KVMESH_RETURN_IF_ERROR(p->codec.Verify(bundle, id));
    out.assign(reinterpret_cast<const char*>(bundle.data()), bundle.size());
    return Status::Ok();
  }));
  return out;
}

bool RocksDbTier::Contains(TierPoolId pool, const ContentId& id) {
  if (disabled()) return false;
  MutexLock lock(&mu_);
  const Entry* e = index_.Get(Key{pool, id});
  return e != nullptr && e->state == EntryState::kReady;
}

bool RocksDbTier::Refresh(TierPoolId pool, const ContentId& id) {
  if (disabled()) return false;
  MutexLock lock(&mu_);
  const Key key{pool, id};
  Entry* e = index_.Get(key);
  if (e == nullptr || e->state != EntryState::kReady) return false;
  Touch(key, *e, e->priority);
  return true;
}

std::vector<ContentId> RocksDbTier::ReadyIds(TierPoolId pool) {
  std::vector<ContentId> out;
  if (disabled()) return out;
  MutexLock lock(&mu_);
  index_.ForEach([&](const Key& key, const Entry& entry) {
    if (key.pool == pool && entry.state == EntryState::kReady) out.push_back(key.id);
  });
  return out;
}

Status RocksDbTier::Erase(TierPoolId pool, const ContentId& id) {
  KVMESH_ASSIGN_OR_RETURN(PoolFamilies * p, FindPool(pool, kTierDefaultPriority));
  std::uint64_t data_key = 0;
  {
    MutexLock lock(&mu_);
    if (disabled()) {
      return Status::IoError(
          StrCat("rocksdb tier ", options_.path, " is disabled after: ", disabled_reason_));
    }
    const Key key{pool, id};
    const Entry* held = index_.Get(key);
    if (held == nullptr) {
      return Status::NotFound(StrCat("rocksdb tier pool ", pool.value, ": no block ", id.ToHex()));
    }
    data_key = held->data_key;
    EraseFromIndex(key);
  }
  counters_.erases.fetch_add(1, std::memory_order_relaxed);
  rocksdb::WriteBatch batch;
  batch.Delete(p->data, DataKey(data_key, id).slice()).PermitUncheckedError();
  batch.Delete(p->meta, KeySlice(id)).PermitUncheckedError();
  if (rocksdb::Status s = db_->Write(WriteOptionsFor(options_), &batch); !s.ok()) {
    return Disable("erase", s);
  }
  return Status::Ok();
}

TierStats RocksDbTier::stats() const {
  TierStats s = counters_.Snapshot();  // entries and used bytes: from the index, below
  s.capacity_bytes = options_.capacity_bytes;
  s.disabled = disabled();
  s.disk_bytes = disk_bytes_.load(std::memory_order_relaxed);
  s.damage = damage_;
  MutexLock lock(&mu_);
  s.entries = static_cast<std::int64_t>(order_.size());
  s.durable_entries = s.entries - not_durable_entries_;
  s.used_bytes = ready_bytes_;
  s.disabled_reason = disabled_reason_;
  return s;
}

}  // namespace kvmesh
