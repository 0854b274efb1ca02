// Prefix matching of the block manager: the longest reusable prefix of a prompt under the reuse
// rules of block_manager.h (last token recomputed unless reuse_last_token, partly matching last
// block, window pools needing the blocks of the window at the end of the reused prefix).
#include <algorithm>

#include "pool/block_manager_internal.h"

namespace kvmesh {

BlockManager::Match BlockManager::MatchPrefix(NodeRef root, std::span<const Token> tokens,
                                              const SequenceOptions& options, bool allow_partial,
                                              std::span<const NodeHandle> path_hint) const {
  Match m;
  m.root = root;
  m.window_first.assign(num_pools(), 0);
  if (root == kNoNode) return m;
  const PrefixTree& tree = cache_.tree();
  const std::int64_t t = tokens_per_block();
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t limit = options.reuse_last_token ? n : n - 1;
  std::vector<BlockMmRef> mm;
  NodeRef cur = root;
  // The hint's nodes, while each is current, a child of the node before it, and holds this
  // block's tokens (no lookup, no hash); a prompt with multimodal items always looks up.
  std::int64_t i = 0;
  if (options.multimodal.empty()) {
    for (; i < static_cast<std::int64_t>(path_hint.size()) && (i + 1) * t <= limit; ++i) {
      const NodeHandle& h = path_hint[static_cast<std::size_t>(i)];
      if (!tree.IsCurrent(h) || tree.node(h.node).parent != cur || !tree.mm(h.node).empty()) break;
      const std::span<const Token> want = tokens.subspan(i * t, t);
      const std::span<const Token> have = tree.tokens(h.node);
      if (!std::equal(want.begin(), want.end(), have.begin())) break;
      m.path.push_back(h.node);
      cur = h.node;
    }
  }
  for (; (i + 1) * t <= limit; ++i) {
    mm.clear();
    MmRefsForBlock(options.multimodal, i * t, t, &mm);
    const NodeRef c = tree.FindChild(cur, tokens.subspan(i * t, t), mm);
    if (c == kNoNode) break;
    m.path.push_back(c);
    cur = c;
  }
  const std::int64_t d = static_cast<std::int64_t>(m.path.size());
  if (allow_partial && d * t < limit) {
    mm.clear();
    MmRefsForBlock(options.multimodal, d * t, t, &mm);
    if (mm.empty()) {
      const std::int64_t avail = std::min(t, limit - d * t);
      const Token* want = tokens.data() + d * t;
      tree.ForEachChild(cur, [&](NodeRef c) {
        if (!tree.mm(c).empty()) return;
        for (int p = 0; p < num_pools(); ++p) {
          if (!tree.block(c, p).valid()) return;
        }
        const auto have = tree.tokens(c);
        std::int32_t common = 0;
        while (common < avail && have[common] == want[common]) ++common;
        if (common > m.partial_tokens) {
          m.partial = c;
          m.partial_tokens = common;
        }
      });
    }
  }
  m.reused_tokens = d * t + m.partial_tokens;
  ApplyWindowLimit(&m);
  return m;
}

void BlockManager::ApplyWindowLimit(Match* m) const {
  const PrefixTree& tree = cache_.tree();
  const std::int64_t t = tokens_per_block();
  const std::int64_t d = static_cast<std::int64_t>(m->path.size());
  const bool has_partial = m->partial != kNoNode;
  auto node_at = [&](std::int64_t j) { return j < d ? m->path[j] : m->partial; };
  // [window pool][j]: the latest position <= j whose node lacks a block in that pool, or -1.
  std::vector<int> window_pools;
  std::vector<std::int64_t> windows(num_pools(), 0);
  std::vector<std::vector<std::int64_t>> last_missing;
  for (int p = 0; p < num_pools(); ++p) {
    if (!cache_.is_window(p)) continue;
    window_pools.push_back(p);
    windows[p] = cache_.window(p);
    auto& lm = last_missing.emplace_back(d + (has_partial ? 1 : 0));
    std::int64_t last = -1;
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(lm.size()); ++j) {
      if (!tree.block(node_at(j), p).valid()) last = j;
      lm[j] = last;
    }
  }
  if (window_pools.empty()) return;
  auto first_needed = [&](int p, std::int64_t reused) {
    return std::max<std::int64_t>(0, reused - windows[p] + 1) / t;
  };
  auto fits = [&](std::int64_t reused) {
    if (reused == 0) return true;
    const std::int64_t last = (reused - 1) / t;
    for (std::size_t k = 0; k < window_pools.size(); ++k) {
      if (last_missing[k][last] >= first_needed(window_pools[k], reused)) return false;
    }
    return true;
  };
  std::int64_t reused = m->reused_tokens;
  if (!fits(reused)) {
    // Without the partial block, then one full block less at a time.
    m->partial = kNoNode;
    m->partial_tokens = 0;
    reused = d * t;
    while (!fits(reused)) reused -= t;
    m->path.resize(reused / t);
    m->reused_tokens = reused;
  }
  for (int p : window_pools) m->window_first[p] = first_needed(p, reused);
}

Result<PrefixLookup> BlockManager::LookupPrefix(std::span<const Token> tokens,
                                                const SequenceOptions& options) const {
  KVMESH_RETURN_IF_ERROR(ValidateSequence(tokens, options));
  MutexLock lock(&mu_);
  const bool allow_partial =
      config_.enable_partial_reuse && has_pool_memory() && options.allow_partial_reuse;
  const Match m =
      MatchPrefix(cache_.tree().FindRoot(options.domain), tokens, options, allow_partial);
  PrefixLookup out;
  out.cached_tokens = m.reused_tokens;
  out.cached_blocks = static_cast<std::int64_t>(m.path.size());
  out.partial_tokens = m.partial_tokens;
  return out;
}

}  // namespace kvmesh
