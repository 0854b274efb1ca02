#include "store/host_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "common/log.h"
#include "common/strings.h"
#include "store/stream_copy.h"

namespace kvmesh {
namespace {

constexpr std::int64_t kSlotAlignment = 64;
constexpr std::int64_t kPartAlignment = 4096;

constexpr std::int64_t RoundUp(std::int64_t x, std::int64_t a) { return (x + a - 1) / a * a; }

using SteadyClock = std::chrono::steady_clock;

std::int64_t Nanos(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

}  // namespace

Result<std::unique_ptr<HostTier>> HostTier::Create(HostTierOptions options) {
  if (options.pools.empty()) return Status::InvalidArgument("host tier: no pools");
  if (options.capacity_bytes <= 0) {
    return Status::InvalidArgument(
        StrCat("host tier: capacity_bytes ", options.capacity_bytes, " must be positive"));
  }
  std::set<TierPoolId> ids;
  double explicit_share = 0;
  int implicit = 0;
  for (const auto& p : options.pools) {
    if (!ids.insert(p.id).second) {
      return Status::InvalidArgument(StrCat("host tier: pool ", p.id.value, " given twice"));
    }
    if (p.share < 0 || p.share > 1) {
      return Status::InvalidArgument(
          StrCat("host tier: pool ", p.id.value, " share ", p.share, " outside [0, 1]"));
    }
    explicit_share += p.share;
    implicit += p.share == 0 ? 1 : 0;
  }
  if (explicit_share > 1.0 + 1e-9) {
    return Status::InvalidArgument(
        StrCat("host tier: pool shares sum to ", explicit_share, " > 1"));
  }
  // Lay out every pool's part (slot counts and offsets) before allocating.
  struct Part {
    BundleCodec codec;
    std::int64_t slot_bytes, num_slots, offset;
  };
  std::vector<Part> parts;
  std::int64_t total = 0;
  for (const auto& p : options.pools) {
    auto codec = BundleCodec::Create(p.layout, p.pool_scale);
    if (!codec.ok()) return codec.status().WithContext(StrCat("host tier pool ", p.id.value));
    const double share =
        p.share > 0 ? p.share : std::max(0.0, 1.0 - explicit_share) / std::max(implicit, 1);
    const auto part_bytes =
        static_cast<std::int64_t>(static_cast<double>(options.capacity_bytes) * share);
    const std::int64_t slot_bytes = RoundUp(codec->bundle_bytes(), kSlotAlignment);
    const std::int64_t num_slots = part_bytes / slot_bytes;
    if (num_slots <= 0 || num_slots > INT32_MAX) {
      return Status::InvalidArgument(StrCat("host tier pool ", p.id.value, ": its part of ",
                                            part_bytes, " bytes holds no slot of ", slot_bytes,
                                            " bytes (or too many)"));
    }
    parts.push_back({std::move(*codec), slot_bytes, num_slots, total});
    total = RoundUp(total + slot_bytes * num_slots, kPartAlignment);
  }
  KVMESH_ASSIGN_OR_RETURN(HostMemory memory,
                          HostMemory::Allocate(total, options.memory, options.prefault));
  std::unique_ptr<HostTier> tier(new HostTier(std::move(options), std::move(memory)));
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto shard = std::make_unique<Shard>(tier->options_.pools[i], std::move(parts[i].codec));
    shard->base = tier->memory_.data() + parts[i].offset;
    shard->slot_bytes = parts[i].slot_bytes;
    shard->num_slots = static_cast<std::int32_t>(parts[i].num_slots);
    MutexLock lock(&shard->mu);
    shard->policy =
        MakeEvictionPolicy(tier->options_.eviction_policy, {.capacity = shard->num_slots});
    shard->slots.resize(shard->num_slots);
    shard->free_slots.reserve(shard->num_slots);
    for (std::int32_t s = shard->num_slots - 1; s >= 0; --s) shard->free_slots.push_back(s);
    tier->shards_.push_back(std::move(shard));
  }
  KVMESH_LOG_INFO("host tier created bytes {} pools {} memory {}", total, tier->shards_.size(),
                  tier->memory_.pinned() ? "pinned" : "aligned");
  return tier;
}

HostTier::HostTier(HostTierOptions options, HostMemory memory)
    : options_(std::move(options)), memory_(std::move(memory)) {}

HostTier::~HostTier() = default;

Result<HostTier::Shard*> HostTier::FindShard(TierPoolId pool, int priority) const {
  if (priority < kTierMinPriority || priority > kTierMaxPriority) {
    return Status::InvalidArgument(StrCat("host tier: priority ", priority, " outside [",
                                          kTierMinPriority, ", ", kTierMaxPriority, "]"));
  }
  for (const auto& s : shards_) {
    if (s->config.id == pool) return s.get();
  }
  return Status::InvalidArgument(StrCat("host tier: unknown pool ", pool.value));
}

std::int64_t HostTier::SlotCount(TierPoolId pool) const {
  auto shard = FindShard(pool, kTierDefaultPriority);
  return shard.ok() ? (*shard)->num_slots : 0;
}

const BundleCodec* HostTier::Codec(TierPoolId pool) const {
  auto shard = FindShard(pool, kTierDefaultPriority);
  return shard.ok() ? &(*shard)->codec : nullptr;
}

// A use of the slot's block ended (written or read): it becomes evictable, most recently used.
void HostTier::MakeEvictable(Shard& shard, std::int32_t slot) {
  Slot& s = shard.slots[slot];
  const auto e = static_cast<EvictionEntry>(slot);
  KVMESH_CHECK(!shard.policy->Contains(e) && s.state == SlotState::kReady);
  s.last_use = ++shard.stamp;
  shard.policy->OnRelease(e, shard.stamp, /*leaf=*/true);
  shard.policy->Insert(e, s.priority, shard.stamp);
}

void HostTier::PinSlot(Shard& shard, std::int32_t slot) {
  Slot& s = shard.slots[slot];
  if (++s.pins == 1 && !s.spilling) {
    RemoveEvictable(shard, slot);
    shard.policy->OnAcquire(static_cast<EvictionEntry>(slot));
  }
}

void HostTier::UnpinSlot(Shard& shard, std::int32_t slot) {
  Slot& s = shard.slots[slot];
  if (--s.pins > 0) return;
  if (s.spilling) {
    shard.cv.notify_all();  // the spilling put waits for its last reader
  } else if (s.erase_pending) {
    FreeSlot(shard, slot);
  } else {
    MakeEvictable(shard, slot);  // most recently used
  }
}

void HostTier::PinForRestore(TierPoolId pool, std::span<const ContentId> ids, RestorePins& pins) {
  KVMESH_CHECK(pins.tier_ == nullptr || pins.tier_ == this);
  Result<Shard*> found = FindShard(pool, kTierDefaultPriority);
  if (!found.ok() || ids.empty()) return;
  Shard& shard = **found;
  pins.tier_ = this;
  MutexLock lock(&shard.mu);
  for (const ContentId& id : ids) {
    const std::int32_t slot = shard.Lookup(id);
    if (slot < 0) continue;
    const Slot& s = shard.slots[slot];
    // A spilling victim is on its way to the tier below (and its put waits for its readers).
    if (s.state != SlotState::kReady || s.spilling) continue;
    PinSlot(shard, slot);
    pins.slots_.emplace_back(&shard, slot);
  }
}

HostTier::RestorePins::RestorePins(RestorePins&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)), slots_(std::move(other.slots_)) {
  other.slots_.clear();
}

HostTier::RestorePins& HostTier::RestorePins::operator=(RestorePins&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = std::exchange(other.tier_, nullptr);
    slots_ = std::move(other.slots_);
    other.slots_.clear();
  }
  return *this;
}

void HostTier::RestorePins::Release() {
  // One lock per pool: PinForRestore appends each pool's slots together.
  for (std::size_t i = 0; i < slots_.size();) {
    Shard* shard = slots_[i].first;
    MutexLock lock(&shard->mu);
    for (; i < slots_.size() && slots_[i].first == shard; ++i) {
      tier_->UnpinSlot(*shard, slots_[i].second);
    }
  }
  slots_.clear();
}

void HostTier::RemoveEvictable(Shard& shard, std::int32_t slot) {
  const auto e = static_cast<EvictionEntry>(slot);
  if (shard.policy->Contains(e)) shard.policy->Erase(e);
}

void HostTier::FreeSlot(Shard& shard, std::int32_t slot) {
  Slot& s = shard.slots[slot];
  RemoveEvictable(shard, slot);
  shard.policy->OnRetire(static_cast<EvictionEntry>(slot));
  s.state = SlotState::kFree;
  s.pins = 0;
  s.erase_pending = false;
  shard.free_slots.push_back(slot);
}

void HostTier::EraseSlot(Shard& shard, std::int32_t slot) {
  Slot& s = shard.slots[slot];
  KVMESH_CHECK(!s.erase_pending && !s.victim_erased);
  if (s.spilling) {  // the put that chose it as victim gives the slot away when the sink returns
    shard.IndexErase(s.id);
    counters_.entries.fetch_sub(1, std::memory_order_relaxed);
    counters_.used_bytes.fetch_sub(shard.codec.bundle_bytes(), std::memory_order_relaxed);
    s.victim_erased = true;
    return;
  }
  shard.IndexErase(s.id);
  if (s.state == SlotState::kReady) {
    counters_.entries.fetch_sub(1, std::memory_order_relaxed);
    counters_.used_bytes.fetch_sub(shard.codec.bundle_bytes(), std::memory_order_relaxed);
  }
  if (s.state == SlotState::kReady && s.pins == 0) {
    FreeSlot(shard, slot);
  } else {
    RemoveEvictable(shard, slot);
    s.erase_pending = true;
  }
}

Result<HostTier::Reservation> HostTier::Reserve(Shard& shard, const ContentId& id, int priority) {
  Reservation r;
  r.id = id;
  r.priority = priority;
  MutexLock lock(&shard.mu);
  if (const std::int32_t held = shard.Lookup(id); held >= 0 || shard.incoming.contains(id)) {
    if (held >= 0) {
      Slot& s = shard.slots[held];
      const auto entry = static_cast<EvictionEntry>(held);
      if (s.state == SlotState::kReady && shard.policy->Contains(entry)) {
        RemoveEvictable(shard, held);
        shard.policy->OnAcquire(entry);
        s.priority = priority;
        MakeEvictable(shard, held);  // most recently used
      } else if (s.state == SlotState::kReady) {
        s.priority = priority;  // pinned by a reader: back into the lists at its new priority
      }
    }
    counters_.put_present.fetch_add(1, std::memory_order_relaxed);
    r.already_held = true;
    return r;
  }
  if (!shard.free_slots.empty()) {
    r.slot = shard.free_slots.back();
    shard.free_slots.pop_back();
    Slot& s = shard.slots[r.slot];
    s.state = SlotState::kWriting;
    s.id = id;
    s.priority = priority;
    s.pins = 0;
    s.erase_pending = false;
    shard.IndexSet(id, r.slot);
    shard.policy->OnAdmit(static_cast<EvictionEntry>(r.slot), ContentIdHash{}(id), /*depth=*/0);
    return r;
  }
  if (const std::optional<EvictionEntry> victim = shard.policy->Victim()) {
    r.slot = static_cast<std::int32_t>(*victim);
  }
  if (r.slot < 0) {
    return Status::ResourceExhausted(StrCat("host tier pool ", shard.config.id.value, ": all ",
                                            shard.num_slots, " slots are being written or read"));
  }
  // The victim stays in the index, readable, while the sink takes it (Spill).
  Slot& v = shard.slots[r.slot];
  RemoveEvictable(shard, r.slot);
  shard.policy->OnRetire(static_cast<EvictionEntry>(r.slot));  // its block is leaving
  v.spilling = true;
  r.has_victim = true;
  r.victim = EvictedBundle{
      shard.config.id,
      v.id,
      v.priority,
      {SlotData(shard, r.slot), static_cast<std::size_t>(shard.codec.bundle_bytes())}};
  shard.incoming[id] = false;
  counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  counters_.eviction_bytes.fetch_add(shard.codec.bundle_bytes(), std::memory_order_relaxed);
  return r;
}

void HostTier::Spill(Shard& shard, Reservation& r) {
  if (!r.has_victim) return;
  if (options_.on_evict) {
    const Status st = options_.on_evict(r.victim);
    if (st.ok()) {
      counters_.spills.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.spill_failures.fetch_add(1, std::memory_order_relaxed);
      KVMESH_LOG_DEBUG("host tier spill failed pool {} id {} error {}", r.victim.pool.value,
                       r.victim.id.ToHex(), st.ToString());
    }
  }
  MutexLock lock(&shard.mu);
  Slot& s = shard.slots[r.slot];
  // Readers that pinned the victim while it spilled finish their copy first.
  AwaitCondition(shard.cv, shard.mu,
                 [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return s.pins == 0; });
  if (!s.victim_erased) {
    shard.IndexErase(s.id);
    counters_.entries.fetch_sub(1, std::memory_order_relaxed);
    counters_.used_bytes.fetch_sub(shard.codec.bundle_bytes(), std::memory_order_relaxed);
  }
  auto in = shard.incoming.find(r.id);
  const bool erased = in->second;
  shard.incoming.erase(in);
  s.spilling = false;
  s.victim_erased = false;
  s.state = SlotState::kWriting;
  s.id = r.id;
  s.priority = r.priority;
  s.pins = 0;
  s.erase_pending = erased;  // erased while its victim spilled: freed when published
  if (!erased) shard.IndexSet(r.id, r.slot);
  shard.policy->OnAdmit(static_cast<EvictionEntry>(r.slot), ContentIdHash{}(r.id), /*depth=*/0);
}

void HostTier::Publish(Shard& shard, std::int32_t slot) {
  MutexLock lock(&shard.mu);
  Slot& s = shard.slots[slot];
  KVMESH_CHECK(s.state == SlotState::kWriting);
  if (s.erase_pending) {
    FreeSlot(shard, slot);
    return;
  }
  s.state = SlotState::kReady;
  MakeEvictable(shard, slot);
  counters_.entries.fetch_add(1, std::memory_order_relaxed);
  counters_.used_bytes.fetch_add(shard.codec.bundle_bytes(), std::memory_order_relaxed);
  counters_.puts.fetch_add(1, std::memory_order_relaxed);
  counters_.put_bytes.fetch_add(shard.codec.bundle_bytes(), std::memory_order_relaxed);
}

void HostTier::Abandon(Shard& shard, std::int32_t slot) {
  MutexLock lock(&shard.mu);
  Slot& s = shard.slots[slot];
  if (!s.erase_pending) shard.IndexErase(s.id);
  FreeSlot(shard, slot);
}

Status HostTier::Put(TierPoolId pool, const ContentId& id, const KvPoolView& src,
                     std::int64_t block, int priority) {
  KVMESH_ASSIGN_OR_RETURN(Shard * shard, FindShard(pool, priority));
  KVMESH_RETURN_IF_ERROR(shard->codec.CheckView(src, block));
  const auto t0 = SteadyClock::now();
  KVMESH_ASSIGN_OR_RETURN(Reservation r, Reserve(*shard, id, priority));
  if (r.already_held) return Status::Ok();
  const auto t1 = SteadyClock::now();
  Spill(*shard, r);  // the sink's time is the caller's (offload engine: spill staging)
  const auto t2 = SteadyClock::now();
  const auto n = static_cast<std::size_t>(shard->codec.bundle_bytes());
  if (Status st = shard->codec.Encode(src, block, id, {SlotData(*shard, r.slot), n}); !st.ok()) {
    Abandon(*shard, r.slot);
    return st;
  }
  const auto t3 = SteadyClock::now();
  Publish(*shard, r.slot);
  counters_.index_ns.fetch_add(Nanos(t0, t1) + Nanos(t3, SteadyClock::now()),
                               std::memory_order_relaxed);
  counters_.encode_ns.fetch_add(Nanos(t2, t3), std::memory_order_relaxed);
  counters_.write_ns.fetch_add(Nanos(t1, t2), std::memory_order_relaxed);
  return Status::Ok();
}

Status HostTier::PutBundle(TierPoolId pool, const ContentId& id, std::span<const std::byte> bundle,
                           int priority) {
  KVMESH_ASSIGN_OR_RETURN(Shard * shard, FindShard(pool, priority));
  KVMESH_RETURN_IF_ERROR(shard->codec.Verify(bundle, id));
  KVMESH_ASSIGN_OR_RETURN(Reservation r, Reserve(*shard, id, priority));
  if (r.already_held) return Status::Ok();
  Spill(*shard, r);
  CopyStreaming(SlotData(*shard, r.slot), bundle.data(), bundle.size());
  Publish(*shard, r.slot);
  return Status::Ok();
}

// Pins a ready slot (`slot`, or with `id` the slot that holds it, looked up under the same lock),
// calls fn on its bundle and unpins it: one step of ForEachBlock and VisitBlock. Whether fn ran.
bool HostTier::VisitSlot(Shard& shard, std::int32_t slot, const ContentId* id, TierPoolId pool,
                         const std::function<void(const EvictedBundle&)>& fn) {
  EvictedBundle b;
  {
    MutexLock lock(&shard.mu);
    if (id != nullptr) slot = shard.Lookup(*id);
    if (slot < 0) return false;
    Slot& s = shard.slots[slot];
    // A spilling victim is the sink's (and on its way to the tier below): not visited.
    if (s.state != SlotState::kReady || s.erase_pending || s.spilling) return false;
    ++s.pins;
    RemoveEvictable(shard, slot);
    b.pool = pool;
    b.id = s.id;
    b.priority = s.priority;
    b.last_use = s.last_use;
  }
  b.bundle = {SlotData(shard, slot), static_cast<std::size_t>(shard.codec.bundle_bytes())};
  fn(b);
  MutexLock lock(&shard.mu);
  Slot& s = shard.slots[slot];
  if (--s.pins == 0) {
    if (s.erase_pending) {
      FreeSlot(shard, slot);
    } else {
      MakeEvictable(shard, slot);
    }
  }
  return true;
}

std::int64_t HostTier::ForEachBlock(TierPoolId pool,
                                    const std::function<void(const EvictedBundle&)>& fn) {
  Result<Shard*> found = FindShard(pool, kTierDefaultPriority);
  if (!found.ok()) return 0;
  std::int64_t seen = 0;
  for (std::int32_t slot = 0; slot < (*found)->num_slots; ++slot) {
    if (VisitSlot(**found, slot, nullptr, pool, fn)) ++seen;
  }
  return seen;
}

bool HostTier::VisitBlock(TierPoolId pool, const ContentId& id,
                          const std::function<void(const EvictedBundle&)>& fn) {
  Result<Shard*> found = FindShard(pool, kTierDefaultPriority);
  return found.ok() && VisitSlot(**found, -1, &id, pool, fn);
}

Status HostTier::Get(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                     std::int64_t block) {
  return Read(pool, id, dst, block, /*one_pass=*/false);
}

Status HostTier::GetForRestore(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                               std::int64_t block) {
  return Read(pool, id, dst, block, /*one_pass=*/true);
}

Status HostTier::Read(TierPoolId pool, const ContentId& id, const KvPoolView& dst,
                      std::int64_t block, bool one_pass) {
  KVMESH_ASSIGN_OR_RETURN(Shard * shard, FindShard(pool, kTierDefaultPriority));
  KVMESH_RETURN_IF_ERROR(shard->codec.CheckView(dst, block));
  const auto t0 = SteadyClock::now();
  std::int32_t slot = -1;
  {
    MutexLock lock(&shard->mu);
    slot = shard->Lookup(id);
    if (slot < 0 || shard->slots[slot].state != SlotState::kReady) {
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      return Status::NotFound(StrCat("host tier pool ", pool.value, ": no block ", id.ToHex()));
    }
    PinSlot(*shard, slot);
  }
  // Pinned: the slot is neither evicted nor reused while it is verified and copied out.
  const auto t1 = SteadyClock::now();
  const auto n = static_cast<std::size_t>(shard->codec.bundle_bytes());
  const std::span<const std::byte> bundle(SlotData(*shard, slot), n);
  Status st = one_pass ? shard->codec.DecodeOnePass(bundle, id, dst, block)
                       : shard->codec.Decode(bundle, id, dst, block);
  const auto t2 = SteadyClock::now();
  bool erased_now = false;
  {
    MutexLock lock(&shard->mu);
    Slot& s = shard->slots[slot];
    if (!st.ok() && !s.erase_pending && !s.victim_erased) {
      --s.pins;
      EraseSlot(*shard, slot);  // frees it now if no other reader holds it
      erased_now = true;
      if (s.spilling && s.pins == 0) shard->cv.notify_all();  // the spilling put waits for this
    } else {
      UnpinSlot(*shard, slot);
    }
  }
  counters_.index_ns.fetch_add(Nanos(t0, t1) + Nanos(t2, SteadyClock::now()),
                               std::memory_order_relaxed);
  counters_.decode_ns.fetch_add(Nanos(t1, t2), std::memory_order_relaxed);
  if (!st.ok()) {
    if (erased_now) {
      counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
      KVMESH_LOG_WARN("host tier corrupt block erased pool {} id {} error {}", pool.value,
                      id.ToHex(), st.message());
    }
    return st;
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.hit_bytes.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  return Status::Ok();
}

bool HostTier::Contains(TierPoolId pool, const ContentId& id) {
  auto shard = FindShard(pool, kTierDefaultPriority);
  if (!shard.ok()) return false;
  MutexLock lock(&(*shard)->mu);
  const std::int32_t slot = (*shard)->Lookup(id);
  return slot >= 0 && (*shard)->slots[slot].state == SlotState::kReady;
}

std::vector<ContentId> HostTier::ReadyIds(TierPoolId pool) {
  std::vector<ContentId> out;
  auto shard = FindShard(pool, kTierDefaultPriority);
  if (!shard.ok()) return out;
  Shard& sh = **shard;
  MutexLock lock(&sh.mu);
  out.reserve(sh.index.size());
  for (std::size_t i = 0; i < sh.slots.size(); ++i) {
    const Slot& s = sh.slots[i];
    if (s.state == SlotState::kReady && sh.Lookup(s.id) == static_cast<std::int32_t>(i)) {
      out.push_back(s.id);
    }
  }
  return out;
}

Status HostTier::Erase(TierPoolId pool, const ContentId& id) {
  KVMESH_ASSIGN_OR_RETURN(Shard * shard, FindShard(pool, kTierDefaultPriority));
  MutexLock lock(&shard->mu);
  const std::int32_t slot = shard->Lookup(id);
  if (slot < 0) {
    if (auto in = shard->incoming.find(id); in != shard->incoming.end() && !in->second) {
      in->second = true;  // being written while its slot's victim spills
      counters_.erases.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    return Status::NotFound(StrCat("host tier pool ", pool.value, ": no block ", id.ToHex()));
  }
  EraseSlot(*shard, slot);
  counters_.erases.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

std::span<std::byte> HostTier::SlotBytesForTesting(TierPoolId pool, const ContentId& id) {
  auto shard = FindShard(pool, kTierDefaultPriority);
  if (!shard.ok()) return {};
  MutexLock lock(&(*shard)->mu);
  const std::int32_t slot = (*shard)->Lookup(id);
  if (slot < 0 || (*shard)->slots[slot].state != SlotState::kReady) return {};
  return {SlotData(**shard, slot), static_cast<std::size_t>((*shard)->codec.bundle_bytes())};
}

TierStats HostTier::stats() const {
  TierStats s = counters_.Snapshot();
  s.capacity_bytes = options_.capacity_bytes;
  return s;
}

}  // namespace kvmesh
