#include "pool/optimal_replay.h"

#include <chrono>
#include <limits>
#include <unordered_map>
#include <vector>

#include "common/check.h"
#include "common/strings.h"
#include "pool/entry_heap.h"

namespace kvmesh {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr std::uint32_t kNever = std::numeric_limits<std::uint32_t>::max();

// The trie of a trace's prefix-chained ids: node = (parent node, id); node 0 is the root.
struct Trie {
  std::vector<std::uint32_t> parent{0};
  std::vector<std::uint32_t> depth{0};  // block index + 1; the root is 0
  std::vector<std::uint32_t> paths;     // every request's nodes, concatenated
  std::vector<std::size_t> offsets{0};  // request r: paths[offsets[r], offsets[r + 1])
};

struct ChildKey {
  std::uint32_t parent;
  std::uint64_t id;
  friend bool operator==(const ChildKey&, const ChildKey&) = default;
};
struct ChildKeyHash {
  std::size_t operator()(const ChildKey& k) const {
    std::uint64_t z = k.id * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(k.parent) << 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    return static_cast<std::size_t>(z ^ (z >> 31));
  }
};

Trie BuildTrie(std::span<const TraceRequest> trace) {
  Trie t;
  std::size_t blocks = 0;
  for (const TraceRequest& r : trace) blocks += r.hash_ids.size();
  t.paths.reserve(blocks);
  std::unordered_map<ChildKey, std::uint32_t, ChildKeyHash> children;
  children.reserve(blocks);
  for (const TraceRequest& r : trace) {
    std::uint32_t node = 0;
    for (const std::uint64_t id : r.hash_ids) {
      const auto [it, added] =
          children.try_emplace(ChildKey{node, id}, static_cast<std::uint32_t>(t.parent.size()));
      if (added) {
        t.parent.push_back(node);
        t.depth.push_back(t.depth[node] + 1);
      }
      node = it->second;
      t.paths.push_back(node);
    }
    t.offsets.push_back(t.paths.size());
  }
  return t;
}

// Max (next use, depth) first, as a min-heap key.
std::uint64_t VictimKey(std::uint32_t next_use, std::uint32_t depth) {
  return (static_cast<std::uint64_t>(kNever - next_use) << 32) | (kNever - depth);
}

class OptimalCache {
 public:
  OptimalCache(const Trie& trie, std::int64_t capacity)
      : trie_(trie),
        capacity_(capacity),
        next_(trie.parent.size(), kNever),
        children_(trie.parent.size(), 0),
        cached_(trie.parent.size(), 0) {}

  // Serves request r (all its blocks fit); `next` gives the next use of each of its blocks.
  // Returns the blocks reused.
  std::int64_t Serve(std::span<const std::uint32_t> path, std::span<const std::uint32_t> next,
                     std::uint32_t r) {
    const auto n = static_cast<std::int64_t>(path.size());
    std::int64_t hit = 0;
    while (hit < n && cached_[path[hit]] != 0) ++hit;
    for (std::int64_t need = size_ + (n - hit) - capacity_; need > 0; --need) Evict(r);
    for (std::int64_t i = hit; i < n; ++i) {
      const std::uint32_t node = path[i];
      cached_[node] = 1;
      ++size_;
      const std::uint32_t p = trie_.parent[node];
      if (p != 0 && children_[p]++ == 0 && heap_.Contains(p)) heap_.Erase(p);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t node = path[i];
      next_[node] = next[i];
      const std::uint64_t key = VictimKey(next_[node], trie_.depth[node]);
      if (heap_.Contains(node)) {
        heap_.SetKey(node, key);
      } else if (children_[node] == 0) {
        heap_.Push(node, key);
      }
    }
    return hit;
  }
  [[nodiscard]] std::int64_t size() const { return size_; }
  [[nodiscard]] std::int64_t evicted() const { return evicted_; }

 private:
  void Evict(std::uint32_t r) {
    const std::uint32_t v = *heap_.Top();
    // The request's own prefix is used now: nearer than anything else cached.
    KVMESH_CHECK(next_[v] != r) << "optimum evicting a block of the request it serves";
    heap_.Erase(v);
    cached_[v] = 0;
    --size_;
    ++evicted_;
    const std::uint32_t p = trie_.parent[v];
    if (p != 0 && --children_[p] == 0 && cached_[p] != 0) {
      heap_.Push(p, VictimKey(next_[p], trie_.depth[p]));
    }
  }

  const Trie& trie_;
  std::int64_t capacity_;
  std::vector<std::uint32_t> next_;      // [node]: next request using it, or kNever
  std::vector<std::uint32_t> children_;  // [node]: cached children
  std::vector<std::uint8_t> cached_;     // [node]
  EntryHeap heap_;                       // cached nodes without cached children
  std::int64_t size_ = 0;
  std::int64_t evicted_ = 0;
};

}  // namespace

Result<ReplayResult> ReplayOptimal(std::span<const TraceRequest> trace,
                                   const ReplayConfig& config) {
  KVMESH_RETURN_IF_ERROR(config.Validate());
  if (config.tier_hooks != nullptr) {
    return Status::InvalidArgument("the offline optimum replays the pool alone (no tier hooks)");
  }
  if (trace.size() >= kNever) {
    return Status::InvalidArgument(
        StrCat("the offline optimum takes at most ", kNever - 1, " requests, not ", trace.size()));
  }
  const auto start = SteadyClock::now();
  const Trie trie = BuildTrie(trace);
  const std::int64_t capacity =
      config.capacity_blocks.value_or(std::numeric_limits<std::int64_t>::max());
  auto admitted = [&](std::size_t r) {
    return static_cast<std::int64_t>(trie.offsets[r + 1] - trie.offsets[r]) <= capacity;
  };
  // The next use of every occurrence: the next admitted request through the same node.
  std::vector<std::uint32_t> next_use(trie.paths.size(), kNever);
  {
    std::vector<std::uint32_t> next(trie.parent.size(), kNever);
    for (std::size_t r = trace.size(); r-- > 0;) {
      if (!admitted(r)) continue;
      for (std::size_t i = trie.offsets[r]; i < trie.offsets[r + 1]; ++i) {
        next_use[i] = next[trie.paths[i]];
        next[trie.paths[i]] = static_cast<std::uint32_t>(r);
      }
    }
  }
  ReplayResult result;
  result.optimal = true;
  result.policy = config.policy;
  result.capacity_blocks = config.capacity_blocks;
  result.tokens_per_block = config.tokens_per_block;
  result.priorities = config.priorities;
  OptimalCache cache(trie, capacity);
  ReplayProgress progress;
  progress.requests_total = std::ssize(trace);
  for (std::size_t r = 0; r < trace.size(); ++r) {
    const std::size_t begin = trie.offsets[r];
    const std::size_t n = trie.offsets[r + 1] - begin;
    ++result.requests;
    result.input_blocks += static_cast<std::int64_t>(n);
    if (!admitted(r)) {
      ++result.rejected_requests;
    } else if (n > 0) {
      result.reused_blocks +=
          cache.Serve(std::span(trie.paths).subspan(begin, n),
                      std::span(next_use).subspan(begin, n), static_cast<std::uint32_t>(r));
    }
    const auto done = static_cast<std::int64_t>(r + 1);
    if (config.progress && (done % config.progress_interval == 0 || r + 1 == trace.size())) {
      progress.requests_done = done;
      progress.input_blocks = result.input_blocks;
      progress.reused_blocks = result.reused_blocks;
      progress.elapsed_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
      config.progress(progress);
    }
  }
  result.evicted_blocks = cache.evicted();
  result.cached_blocks = cache.size();
  PoolStats pool;
  pool.name = "replay";
  pool.num_blocks = config.capacity_blocks.value_or(kUnlimitedBlocks);
  pool.cached_blocks = cache.size();
  pool.evictable_blocks = cache.size();
  pool.free_blocks = config.capacity_blocks ? *config.capacity_blocks - cache.size() : 0;
  pool.input_blocks = static_cast<std::uint64_t>(result.input_blocks);
  pool.reused_blocks = static_cast<std::uint64_t>(result.reused_blocks);
  pool.evicted_blocks = static_cast<std::uint64_t>(cache.evicted());
  pool.cached_by_priority[kDefaultPriority] = cache.size();
  result.stats.pools.push_back(std::move(pool));
  result.wall_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return result;
}

}  // namespace kvmesh
