#include "node/block_ages.h"

#include <unordered_set>

namespace kvmesh {

BlockAges::BlockAges(const BlockManager* manager, std::chrono::milliseconds interval)
    : manager_(manager), interval_(interval), thread_([this] { Run(); }) {}

BlockAges::~BlockAges() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BlockAges::Run() {
  MutexLock lock(&mu_);
  while (!stop_) {
    PollLocked();
    AwaitConditionFor(cv_, mu_, interval_,
                      [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return stop_; });
  }
}

void BlockAges::Poll() {
  MutexLock lock(&mu_);
  PollLocked();
}

void BlockAges::PollLocked() {
  const auto now = std::chrono::steady_clock::now();
  bool lost = false;
  for (;;) {
    const KvEventBatch batch = manager_->PollEvents(next_seq_, 8192);
    if (batch.lost) {
      lost = true;
      lost_ += static_cast<std::int64_t>(batch.lost->last - batch.lost->first + 1);
    }
    for (const KvEvent& e : batch.events) {
      const std::uint64_t bit = std::uint64_t{1} << std::min(e.pool.value, 63);
      if (e.type == KvEventType::kStored) {
        auto [it, inserted] = entries_.try_emplace(e.content_id, Entry{now, 0});
        it->second.pools |= bit;
      } else if (e.type == KvEventType::kRemoved) {
        auto it = entries_.find(e.content_id);
        if (it != entries_.end() && (it->second.pools &= ~bit) == 0) entries_.erase(it);
      }
    }
    next_seq_ = batch.next_seq;
    if (batch.events.size() < 8192) break;
  }
  if (lost) Prune();
}

void BlockAges::Prune() {
  std::unordered_set<ContentId, ContentIdHash> cached;
  std::uint64_t cursor = 0;
  do {
    const CachedBlockPage page = manager_->ListCachedBlocks(cursor, 4096);
    for (const CachedBlockInfo& b : page.blocks) cached.insert(b.content_id);
    cursor = page.next_cursor;
  } while (cursor != 0);
  std::erase_if(entries_, [&](const auto& kv) { return !cached.contains(kv.first); });
}

std::optional<double> BlockAges::Age(const ContentId& id) {
  MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.stored)
      .count();
}

std::int64_t BlockAges::size() const {
  MutexLock lock(&mu_);
  return static_cast<std::int64_t>(entries_.size());
}

std::int64_t BlockAges::lost_events() const {
  MutexLock lock(&mu_);
  return lost_;
}

}  // namespace kvmesh
