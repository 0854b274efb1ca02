#include "node/holdings_snapshot.h"

namespace kvmesh {
namespace {

void AddTier(BlockTier* tier, KvTier kind, int pools, std::vector<KvEvent>& out) {
  if (tier == nullptr) return;
  for (int p = 0; p < pools; ++p) {
    for (const ContentId& id : tier->ReadyIds(TierPoolId{p})) {
      KvEvent e;
      e.type = KvEventType::kTierChanged;
      e.pool = PoolId{p};
      e.content_id = id;
      e.tier = kind;
      out.push_back(e);
    }
  }
}

}  // namespace

std::vector<KvEvent> HoldingsSnapshot(TieredCache& cache) {
  std::vector<KvEvent> out;
  BlockManager& manager = cache.manager();
  std::uint64_t cursor = 0;
  do {
    const CachedBlockPage page = manager.ListCachedBlocks(cursor, 4096);
    for (const CachedBlockInfo& b : page.blocks) {
      for (std::size_t p = 0; p < b.block_ids.size(); ++p) {
        if (b.block_ids[p] < 0) continue;
        KvEvent e;
        e.type = KvEventType::kStored;
        e.pool = PoolId{static_cast<std::int32_t>(p)};
        e.block = BlockId{b.block_ids[p]};
        e.content_id = b.content_id;
        e.parent_id = b.parent_id;
        e.num_tokens = b.num_tokens;
        e.priority = b.priority;
        e.tier = KvTier::kPrimary;
        out.push_back(e);
      }
    }
    cursor = page.next_cursor;
  } while (cursor != 0);
  OffloadEngine& engine = cache.engine();
  AddTier(engine.host(), KvTier::kHost, engine.num_pools(), out);
  AddTier(engine.disk(), KvTier::kDisk, engine.num_pools(), out);
  return out;
}

}  // namespace kvmesh
