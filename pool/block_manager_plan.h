// From a pool plan (pool/pool_plan.h) to a block manager: its config, and the memory specs of
// the CPU backend's pool storage.
//
//   BlockManagerConfig  tokens_per_block of the plan; one BlockPoolConfig per PoolSpec in plan
//                       order (name = PoolKeyString, num_blocks, window_tokens = key.window);
//                       namespace = model name and revision, cache dtype and layout,
//                       tokens_per_block, pool_group = the pool keys joined by '+' (so that plans
//                       with other pools never share content ids), shard 0 of 1.
//   PoolMemorySpecs     one PoolMemorySpec per pool: layout, num_blocks, pool-wide scale.
//
// Thread-safe (pure functions).
#pragma once

#include <vector>

#include "pool/block_manager.h"
#include "pool/pool_plan.h"
#include "pool/pool_storage.h"

namespace kvmesh {

BlockManagerConfig FromPoolPlan(const PoolPlan& plan);
std::vector<PoolMemorySpec> PoolMemorySpecs(const PoolPlan& plan);

}  // namespace kvmesh
