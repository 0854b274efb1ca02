// Writing the pool's cached blocks and the host tier's blocks into the disk tier: what kvnode does
// at shutdown (shutdown.flush_to_disk) and what `kvctl flush` asks of a running node.
//
// Every cached pool block and every host-tier block of priority >= min_priority that the disk tier
// does not hold yet is put into it. Pool blocks are pinned (PinByContentId) while they are read,
// so a running node may keep serving: a pinned block is never evicted or rewritten, and a block
// evicted before its turn is skipped (it went to the tiers through the ordinary path). Returns the
// blocks written; failures are counted in *failures and logged. Waits until the disk tier holds
// everything it was given (OffloadEngine::Drain). 0 without a disk tier.
//
// A disk tier at its capacity (a put answered kResourceExhausted: it is a cache, and full) ends
// the flush: with `skipped_full`, that block and every one not yet tried are counted there instead
// of in *failures, and said once at info level — at shutdown a full cache is not a failure (nothing
// acknowledged is in question: these blocks were never promised to disk). Without it (kvctl
// flush, which asked for the blocks to be written) they are failures.
//
// Thread safety: thread-safe (the cache's calls are).
#pragma once

#include <cstdint>

#include "store/tiered_cache.h"

namespace kvmesh {

std::int64_t FlushToDiskTier(TieredCache& cache, int min_priority, std::int64_t* failures,
                             std::int64_t* skipped_full = nullptr);

}  // namespace kvmesh
