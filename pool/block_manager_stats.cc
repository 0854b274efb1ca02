#include "pool/block_manager_stats.h"

#include <sstream>

namespace kvmesh {

std::string BlockManagerStats::ToString() const {
  std::ostringstream os;
  os << "policy " << EvictionPolicyName(eviction_policy) << " sequences " << running_sequences
     << " nodes " << tree_nodes << " input_tokens " << counters.input_tokens << " reused_tokens "
     << counters.reused_tokens << " last_event_seq " << last_event_seq << "\n";
  for (const PoolStats& p : pools) {
    os << "pool " << p.pool.value << " (" << p.name << ") window " << p.window_tokens << " blocks "
       << p.num_blocks << " free " << p.free_blocks << " cached " << p.cached_blocks << " pinned "
       << p.pinned_blocks << " private " << p.private_blocks << " evictable " << p.evictable_blocks
       << " input " << p.input_blocks << " reused " << p.reused_blocks << " hit_rate "
       << p.hit_rate() << " evicted " << p.evicted_blocks << "\n";
  }
  return os.str();
}

}  // namespace kvmesh
