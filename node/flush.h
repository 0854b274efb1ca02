// Writing the pool's cached blocks and the host tier's blocks into the disk tier: what kvnode does
// at shutdown (shutdown.flush_to_disk) and what `kvctl flush` asks of a running node.
//
// Candidates: every cached pool block and every host-tier block of priority >= min_priority, one
// per pool and content id. What is written: the most valuable candidates whose bundles fit in the
// disk tier's budget (RocksDbTier::budget_bytes) — highest priority first, then pool blocks before
// host-tier blocks (a host-tier block was evicted from the pool, so it was used less recently),
// then the pool blocks used most recently, where a pool block ranks with the highest priority and
// latest use of its subtree (a block is restored only after its parent, so a parent never ranks
// below its descendants, and of blocks that rank alike the shallower goes first), and the
// host-tier blocks used most recently (the host tier keeps no tree; the pool evicts a child before
// its parent, so a parent usually entered the host tier after its child and ranks above it) — less
// the ones the tier holds already (they stay, and count against the budget). The rest are not
// written and are counted as not fitting: writing them would only make the tier evict blocks the
// same flush wrote (a flush of 30,440 blocks into a tier with room for 12,738 once wrote all of
// them, for 36 s, and kept the last written). Blocks are written least valuable first, so that if
// the budget shrinks meanwhile (it is learned from the files on disk), the tier's eviction — lowest
// priority, then least recently used — takes the least valuable of them. Before any write, the
// kept blocks the tier holds already are marked used (RocksDbTier::Refresh), least valuable first.
// So the blocks the tier held before and the flush does not keep are older than every block the
// flush keeps, and are evicted first at equal priority (without the marking, a flush into a full
// tier evicted kept blocks it had found there, and every later flush wrote some of them again).
//
// Pool blocks are pinned (PinByContentId) while they are read, so a running node may keep serving:
// a pinned block is never evicted or rewritten, and a block evicted before its turn is skipped (it
// went to the tiers through the ordinary path). Waits until the disk tier holds everything it was
// given (OffloadEngine::Drain). Logs its progress at info level every few seconds. Nothing without
// a disk tier.
//
// A disk tier that refuses a put as full (kResourceExhausted: its files are at the on-disk
// capacity while compaction reclaims the blocks it evicted — a large flush into a tier at its
// steady state evicts as much as it writes) is waited for: the put is retried every 100 ms while
// the tier's upkeep collects the garbage, for at most `full_wait` over the whole flush, with a log
// line when the wait starts and when the tier takes puts again. The blocks written last are the
// most valuable, so ending at the first refusal would drop exactly those. A tier still full after
// that ends the flush when `full` is kEndsTheFlush: that block and every one not yet tried count
// as not fitting, said once at info level — at shutdown a full cache is not a failure (these
// blocks were never promised to disk). With kIsAFailure (kvctl flush, which asked for the blocks
// to be written) such puts are failures, and the flush goes on.
//
// Thread safety: thread-safe (the cache's calls are).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "store/tiered_cache.h"

namespace kvmesh {

struct FlushCounts {
  std::int64_t candidates = 0;   // blocks (one per pool and content id) at or above min_priority
  std::int64_t already = 0;      // candidates the disk tier held already (not written again)
  std::int64_t written = 0;      // put into the disk tier by this flush
  std::int64_t failures = 0;     // puts that failed (logged)
  std::int64_t not_fitting = 0;  // left out: beyond the tier's budget, or the tier was full
  std::int64_t written_bytes = 0;
  double full_wait_seconds = 0;  // spent waiting for a full tier to take puts again
};

enum class FullDiskTier { kEndsTheFlush, kIsAFailure };

struct FlushOptions {
  int min_priority = 0;  // candidates: blocks of at least this priority
  FullDiskTier full = FullDiskTier::kEndsTheFlush;
  // The longest the whole flush waits for a full disk tier to take puts again (see above).
  std::chrono::milliseconds full_wait{30000};
  // Called once the flush knows what it will write (`to_write` blocks) and then with every progress
  // log line (every 5 s), on the flushing thread: what kvnode tells systemd (kvnode_main.cc).
  std::function<void(const FlushCounts& done, std::int64_t to_write)> on_progress;
};

FlushCounts FlushToDiskTier(TieredCache& cache, const FlushOptions& options);

}  // namespace kvmesh
