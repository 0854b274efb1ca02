// What this node holds, as the cluster prefix directory's resynchronisation reads it
// (PrefixDirectory::SnapshotSource, node/prefix_directory.h): a kStored event for every cached
// block of every primary pool (BlockManager::ListCachedBlocks, page by page) and a kTierChanged
// event into kHost or kDisk for every id the host and disk tiers hold (BlockTier::ReadyIds).
//
// Not one atomic snapshot: each page, and each tier's listing, is read under its own lock. A block
// stored or removed while the pages are walked may be missed or seen; its KV event, later than
// the directory's cursor, is applied after the snapshot and settles it (Holdings is idempotent).
//
// Thread safety: as the tiered cache (thread-safe).
#pragma once

#include <vector>

#include "pool/kv_events.h"
#include "store/offload_engine.h"
#include "store/tiered_cache.h"

namespace kvmesh {

std::vector<KvEvent> HoldingsSnapshot(TieredCache& cache);

}  // namespace kvmesh
