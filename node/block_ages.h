// BlockAges: how long each cached block has been in the pool cache, for kvctl blocks.
//
// The prefix tree keeps a logical use clock, not times, so the node follows its block manager's
// KV events: the first kStored event of a content id (any pool) records the time, the last
// kRemoved of it (every pool's block gone) forgets it. A background thread polls the event ring
// every `interval` so that the ring (event_buffer_max_size) does not overwrite events unseen.
// When events were lost anyway, entries of blocks no longer cached are pruned by listing the
// cache, and blocks stored during the gap have no age (Age returns nullopt) — never a guess.
//
// Memory: one entry (about 64 bytes) per cached content id.
//
// Thread safety: thread-safe. The manager must outlive the object (the destructor stops the
// thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/thread_annotations.h"
#include "pool/block_manager.h"

namespace kvmesh {

class BlockAges {
 public:
  explicit BlockAges(const BlockManager* manager,
                     std::chrono::milliseconds interval = std::chrono::milliseconds(100));
  ~BlockAges();
  BlockAges(const BlockAges&) = delete;
  BlockAges& operator=(const BlockAges&) = delete;

  // Seconds since the block entered the pool cache; nullopt when unknown. Call Poll() first for a
  // block stored just before (the thread polls every `interval`).
  std::optional<double> Age(const ContentId& id) KVMESH_EXCLUDES(mu_);
  // Catches up with the event ring now.
  void Poll() KVMESH_EXCLUDES(mu_);
  [[nodiscard]] std::int64_t size() const KVMESH_EXCLUDES(mu_);
  [[nodiscard]] std::int64_t lost_events() const KVMESH_EXCLUDES(mu_);

 private:
  struct Entry {
    std::chrono::steady_clock::time_point stored;
    std::uint64_t pools = 0;  // bit p: pool p's block is cached (pools beyond 63 share bit 63)
  };
  void PollLocked() KVMESH_REQUIRES(mu_);
  void Prune() KVMESH_REQUIRES(mu_);
  void Run();

  const BlockManager* const manager_;
  const std::chrono::milliseconds interval_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stop_ KVMESH_GUARDED_BY(mu_) = false;
  std::uint64_t next_seq_ KVMESH_GUARDED_BY(mu_) = 1;
  std::int64_t lost_ KVMESH_GUARDED_BY(mu_) = 0;
  std::unordered_map<ContentId, Entry, ContentIdHash> entries_ KVMESH_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvmesh
