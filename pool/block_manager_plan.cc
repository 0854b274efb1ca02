#include "pool/block_manager_plan.h"

#include "common/strings.h"

namespace kvmesh {

BlockManagerConfig FromPoolPlan(const PoolPlan& plan) {
  BlockManagerConfig c;
  c.tokens_per_block = plan.cache.tokens_per_block;
  std::vector<std::string> keys;
  for (const PoolSpec& p : plan.pools) {
    c.pools.push_back(BlockPoolConfig{PoolKeyString(p.key), p.num_blocks, p.key.window});
    keys.push_back(PoolKeyString(p.key));
  }
  KeyNamespace& ns = c.key_namespace;
  ns.model_id = plan.model_name;
  ns.revision = plan.model_revision;
  ns.cache_dtype = plan.cache.dtype;
  ns.layout = plan.cache.kv_layout;
  ns.tokens_per_block = plan.cache.tokens_per_block;
  ns.pool_group = StrJoin(keys, "+");
  return c;
}

std::vector<PoolMemorySpec> PoolMemorySpecs(const PoolPlan& plan) {
  std::vector<PoolMemorySpec> out;
  for (const PoolSpec& p : plan.pools) {
    out.push_back(PoolMemorySpec{p.layout, p.num_blocks, p.pool_scale.value});
  }
  return out;
}

}  // namespace kvmesh
