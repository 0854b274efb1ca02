#include "node/flush.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/log.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;
constexpr auto kProgressEvery = std::chrono::seconds(5);
constexpr auto kFullRetryEvery = std::chrono::milliseconds(100);
constexpr std::int64_t kLoggedFailures = 5;

// A candidate: a cached pool block (every pool that holds it) or one host-tier block.
struct Candidate {
  ContentId id;
  int priority = 0;
  bool in_pool = false;          // else in the host tier
  std::uint64_t last_use = 0;    // the manager's use clock, or the host tier's (per pool)
  std::int32_t depth = 0;        // pool blocks: the block's index in its prompts
  int host_pool = 0;             // host-tier blocks: their pool
  std::int64_t blocks = 0;       // blocks (one per pool) not on disk yet
  std::int64_t bytes = 0;        // their bundle bytes
  std::int64_t held_blocks = 0;  // blocks the tier holds already
  std::int64_t held_bytes = 0;   // their bundle bytes
};

// Most valuable first: priority, then pool before host tier, then the most recently used (pool
// blocks by the manager's clock, host-tier blocks by the host tier's), then the shallower. A pool
// block's priority and last use here are the highest of its subtree's (Inherit), so that a block
// never ranks below one of its descendants: a descendant is restored only through it, and the
// deeper blocks of a prompt are released last.
bool MoreValuable(const Candidate& a, const Candidate& b) {
  return std::tuple(a.priority, a.in_pool, a.last_use, -a.depth) >
         std::tuple(b.priority, b.in_pool, b.last_use, -b.depth);
}

// Raises every pool candidate's priority and last use to the highest of its descendants among the
// candidates (`parents[i]`: the index of candidate i's parent, or -1).
void Inherit(std::vector<Candidate>& all, const std::vector<std::ptrdiff_t>& parents) {
  std::vector<std::size_t> deepest_first(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) deepest_first[i] = i;
  std::sort(deepest_first.begin(), deepest_first.end(),
            [&](std::size_t a, std::size_t b) { return all[a].depth > all[b].depth; });
  for (const std::size_t i : deepest_first) {
    if (parents[i] < 0) continue;
    Candidate& up = all[static_cast<std::size_t>(parents[i])];
    up.priority = std::max(up.priority, all[i].priority);
    up.last_use = std::max(up.last_use, all[i].last_use);
  }
}

}  // namespace

FlushCounts FlushToDiskTier(TieredCache& cache, const FlushOptions& options) {
  const int min_priority = options.min_priority;
  FlushCounts c;
  OffloadEngine& engine = cache.engine();
  RocksDbTier* disk = engine.disk();
  if (disk == nullptr) return c;
  const auto start = Steady::now();
  // Blocks still moving out of the pool (offload copies queued or running) are in neither the
  // pool's tree nor the host tier yet: let them land in the host tier first, or the scans below
  // miss them and they are lost at exit (seen as acknowledged blocks missing after a SIGTERM
  // under load). Nothing starts new moves now at shutdown: every connection is closed.
  engine.Drain();
  const int num_pools = engine.num_pools();
  std::vector<std::int64_t> bundle_bytes(static_cast<std::size_t>(num_pools), 0);
  for (int p = 0; p < num_pools; ++p) {
    if (const BundleCodec* codec = disk->Codec(TierPoolId{p}); codec != nullptr) {
      bundle_bytes[static_cast<std::size_t>(p)] = codec->bundle_bytes();
    }
  }

  // The candidates, and what each would add to the tier.
  std::vector<Candidate> all;
  // The content ids the pool candidates cover, per pool: a host-tier copy of one (a restored block
  // stays in the host tier) is the same block, not another candidate.
  std::vector<std::unordered_set<ContentId, ContentIdHash>> in_pool(
      static_cast<std::size_t>(num_pools));
  std::vector<ContentId> parent_ids;  // of the pool candidates, in order
  std::uint64_t cursor = 0;
  do {
    const CachedBlockPage page = cache.manager().ListCachedBlocks(cursor, 4096);
    for (const CachedBlockInfo& b : page.blocks) {
      if (b.priority < min_priority) continue;
      parent_ids.push_back(b.parent_id);
      Candidate k{b.content_id, b.priority, true, b.last_use, b.depth, 0};
      for (int p = 0; p < num_pools; ++p) {
        if (b.block_ids[static_cast<std::size_t>(p)] < 0) continue;
        ++c.candidates;
        in_pool[static_cast<std::size_t>(p)].insert(b.content_id);
        const std::int64_t n = bundle_bytes[static_cast<std::size_t>(p)];
        if (disk->Contains(TierPoolId{p}, b.content_id)) {
          ++k.held_blocks;
          k.held_bytes += n;
        } else {
          ++k.blocks;
          k.bytes += n;
        }
      }
      all.push_back(k);
    }
    cursor = page.next_cursor;
  } while (cursor != 0);
  {
    std::unordered_map<ContentId, std::ptrdiff_t, ContentIdHash> index;
    for (std::size_t i = 0; i < all.size(); ++i) {
      index.emplace(all[i].id, static_cast<std::ptrdiff_t>(i));
    }
    std::vector<std::ptrdiff_t> parents(all.size(), -1);
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (auto it = index.find(parent_ids[i]); it != index.end()) parents[i] = it->second;
    }
    Inherit(all, parents);
  }
  HostTier* host = engine.host();
  if (host != nullptr) {
    for (int p = 0; p < num_pools; ++p) {
      host->ForEachBlock(TierPoolId{p}, [&](const EvictedBundle& b) {
        if (b.priority < min_priority || in_pool[static_cast<std::size_t>(p)].contains(b.id)) {
          return;
        }
        ++c.candidates;
        Candidate k{b.id, b.priority, false, b.last_use, 0, p};
        const auto n = static_cast<std::int64_t>(b.bundle.size());
        if (disk->Contains(b.pool, b.id)) {
          k.held_blocks = 1;
          k.held_bytes = n;
        } else {
          k.blocks = 1;
          k.bytes = n;
        }
        all.push_back(k);
      });
    }
  }

  // The most valuable that fit in the tier's budget; those it holds already stay and count.
  std::sort(all.begin(), all.end(), MoreValuable);
  const std::int64_t budget = disk->budget_bytes();
  std::int64_t used = 0;
  std::size_t kept = 0;
  std::int64_t to_write_blocks = 0;
  std::int64_t to_write_bytes = 0;
  // Kept: a prefix of the order, up to the first that does not fit (a smaller one further down
  // might, but it is less valuable than the one that did not).
  for (; kept < all.size(); ++kept) {
    const Candidate& k = all[kept];
    if (used + k.bytes + k.held_bytes > budget) break;
    used += k.bytes + k.held_bytes;
    to_write_bytes += k.bytes;
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    c.already += all[i].held_blocks;  // on disk now, whether kept or not
    (i < kept ? to_write_blocks : c.not_fitting) += all[i].blocks;
  }
  if (kept < all.size()) {
    KVMESH_LOG_INFO(
        "flush to disk: {} of {} candidate blocks do not fit in the disk tier's budget of {} "
        "bytes; writing the most valuable",
        c.not_fitting, c.candidates, budget);
  }
  KVMESH_LOG_INFO("flush to disk: writing {} blocks ({} bytes), {} already on disk",
                  to_write_blocks, to_write_bytes, c.already);
  if (options.on_progress) options.on_progress(c, to_write_blocks);

  bool tier_full = false;  // the tier stayed full past the wait and that ends the flush
  Steady::duration wait_left = options.full_wait;
  auto last_log = Steady::now();
  // Runs `write` (a put) unless the tier is known full, waiting while it is full (within the
  // flush's wait), and counts what it did.
  const auto put = [&](std::int64_t bytes, const auto& write) {
    if (tier_full) {
      ++c.not_fitting;
      return;
    }
    Status st = write();
    if (st.IsResourceExhausted() && wait_left > Steady::duration::zero()) {
      KVMESH_LOG_INFO(
          "flush to disk: the disk tier is full ({}); waiting up to {:.1f} s for it to reclaim "
          "room",
          st.message(), std::chrono::duration<double>(wait_left).count());
      const auto wait_start = Steady::now();
      while (st.IsResourceExhausted() && Steady::now() - wait_start < wait_left) {
        std::this_thread::sleep_for(kFullRetryEvery);
        st = write();
      }
      const auto waited = Steady::now() - wait_start;
      wait_left -= std::min(waited, wait_left);
      c.full_wait_seconds += std::chrono::duration<double>(waited).count();
      if (st.ok()) {
        KVMESH_LOG_INFO("flush to disk: the disk tier takes puts again after {:.1f} s",
                        std::chrono::duration<double>(waited).count());
      }
    }
    if (st.ok()) {
      ++c.written;
      c.written_bytes += bytes;
    } else if (st.IsResourceExhausted() && options.full == FullDiskTier::kEndsTheFlush) {
      tier_full = true;
      ++c.not_fitting;
      KVMESH_LOG_INFO("flush to disk stopped: the disk tier is at its capacity ({})", st.message());
    } else {
      // The first few are logged; the rest are counted (a full tier would fail every one).
      if (++c.failures <= kLoggedFailures) {
        KVMESH_LOG_WARN(
            "flush to disk failed error {}{}", st.ToString(),
            c.failures == kLoggedFailures ? " (further failures counted, not logged)" : "");
      }
    }
    if (const auto now = Steady::now(); now - last_log >= kProgressEvery) {
      last_log = now;
      KVMESH_LOG_INFO("flush to disk: {} of {} blocks written ({} bytes) in {:.1f} s", c.written,
                      to_write_blocks, c.written_bytes,
                      std::chrono::duration<double>(now - start).count());
      if (options.on_progress) options.on_progress(c, to_write_blocks);
    }
  };

  // First the kept blocks the tier holds already are marked used (RocksDbTier::Refresh), least
  // valuable first, so that the tier's eviction, at equal priority, takes the blocks the flush
  // does not keep before them: the writes below may take the tier over its budget only by the
  // blocks no candidate is. (Without it, the kept blocks the tier held from before were its
  // oldest: it evicted them, and the next flush wrote them again.)
  for (std::size_t i = kept; i-- > 0;) {
    const Candidate& k = all[i];
    if (k.held_blocks == 0) continue;
    if (!k.in_pool) {
      disk->Refresh(TierPoolId{k.host_pool}, k.id);
    } else {
      for (int p = 0; p < num_pools; ++p) disk->Refresh(TierPoolId{p}, k.id);
    }
  }
  // Then the writes, from the least valuable kept on, host-tier and pool blocks alike: if the tier
  // has to evict while the flush writes (its budget moved), its eviction takes the least recently
  // used of a priority first, which are then the least valuable.
  for (std::size_t i = kept; i-- > 0;) {
    const Candidate& k = all[i];
    if (k.bytes == 0) continue;
    if (!k.in_pool) {
      // Gone since the listing (evicted to make room, or spilled to the disk tier): skipped.
      host->VisitBlock(TierPoolId{k.host_pool}, k.id, [&](const EvictedBundle& b) {
        if (disk->Contains(b.pool, b.id)) return;
        put(static_cast<std::int64_t>(b.bundle.size()),
            [&] { return disk->PutBundle(b.pool, b.id, b.bundle, b.priority); });
      });
      continue;
    }
    // Pinned while read: not evicted or reused meanwhile. Gone since the listing: skipped.
    Result<PinnedBlocks> pinned = cache.manager().PinByContentId(k.id);
    if (!pinned.ok()) continue;
    Result<CachedBlockInfo> now = cache.manager().FindBlock(k.id);  // its pinned blocks
    if (!now.ok()) continue;
    for (int p = 0; p < num_pools; ++p) {
      const TierPoolId pool{p};
      const std::int32_t block = now->block_ids[static_cast<std::size_t>(p)];
      if (block < 0 || disk->Contains(pool, k.id)) continue;
      put(bundle_bytes[static_cast<std::size_t>(p)], [&]() -> Status {
        // The pool block itself for host pools; a staged copy for device pools.
        KVMESH_ASSIGN_OR_RETURN(const HostBlock read, engine.ReadBlock(p, block));
        return disk->Put(pool, k.id, read.view(), read.block(), now->priority);
      });
    }
  }
  engine.Drain();
  KVMESH_LOG_INFO(
      "flush to disk done: {} blocks written ({} bytes) in {:.1f} s, {} already on disk, {} did "
      "not fit, {} failed, {:.1f} s waiting for a full tier",
      c.written, c.written_bytes, std::chrono::duration<double>(Steady::now() - start).count(),
      c.already, c.not_fitting, c.failures, c.full_wait_seconds);
  return c;
}

}  // namespace kvmesh
