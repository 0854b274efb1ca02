#include "node/flush.h"

#include "common/log.h"

namespace kvmesh {

std::int64_t FlushToDiskTier(TieredCache& cache, int min_priority, std::int64_t* failures,
                             std::int64_t* skipped_full) {
  OffloadEngine& engine = cache.engine();
  RocksDbTier* disk = engine.disk();
  if (disk == nullptr) return 0;
  std::int64_t written = 0;
  bool full = false;  // the tier answered kResourceExhausted: nothing more is tried
  // Runs `write` (a put) unless the tier is known full, and counts what it did.
  const auto put = [&](const auto& write) {
    if (full) {
      ++*skipped_full;
      return;
    }
    const Status st = write();
    if (st.ok()) {
      ++written;
    } else if (st.IsResourceExhausted() && skipped_full != nullptr) {
      full = true;
      ++*skipped_full;
      KVMESH_LOG_INFO("flush to disk stopped: the disk tier is at its capacity ({})", st.message());
    } else {
      ++*failures;
      KVMESH_LOG_WARN("flush to disk failed error {}", st.ToString());
    }
  };
  // Blocks still moving out of the pool (offload copies queued or running) are in neither the
  // pool's tree nor the host tier yet: let them land in the host tier first, or the scans below
  // miss them and they are lost at exit (seen as acknowledged blocks missing after a SIGTERM
  // under load). Nothing starts new moves now: every connection is closed.
  engine.Drain();
  std::uint64_t cursor = 0;
  do {
    const CachedBlockPage page = cache.manager().ListCachedBlocks(cursor, 4096);
    for (const CachedBlockInfo& b : page.blocks) {
      if (b.priority < min_priority) continue;
      bool missing = false;
      for (int p = 0; p < engine.num_pools(); ++p) {
        missing |= b.block_ids[p] >= 0 && !disk->Contains(TierPoolId{p}, b.content_id);
      }
      if (!missing) continue;
      // Pinned while read: not evicted or reused meanwhile. Gone since the listing: skipped.
      Result<PinnedBlocks> pinned = cache.manager().PinByContentId(b.content_id);
      if (!pinned.ok()) continue;
      Result<CachedBlockInfo> now = cache.manager().FindBlock(b.content_id);  // its pinned blocks
      if (!now.ok()) continue;
      for (int p = 0; p < engine.num_pools(); ++p) {
        const TierPoolId pool{p};
        if (now->block_ids[p] < 0 || disk->Contains(pool, b.content_id)) continue;
        put([&]() -> Status {
          // The pool block itself for host pools; a staged copy for device pools.
          KVMESH_ASSIGN_OR_RETURN(const HostBlock block, engine.ReadBlock(p, now->block_ids[p]));
          return disk->Put(pool, b.content_id, block.view(), block.block(), now->priority);
        });
      }
    }
    cursor = page.next_cursor;
  } while (cursor != 0);
  if (HostTier* host = engine.host(); host != nullptr) {
    for (int p = 0; p < engine.num_pools(); ++p) {
      host->ForEachBlock(TierPoolId{p}, [&](const EvictedBundle& b) {
        if (b.priority < min_priority || disk->Contains(b.pool, b.id)) return;
        put([&] { return disk->PutBundle(b.pool, b.id, b.bundle, b.priority); });
      });
    }
  }
  engine.Drain();
  return written;
}

}  // namespace kvmesh
