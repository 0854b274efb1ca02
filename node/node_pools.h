// NodePools: the primary pools of a node — the pool plan's pools, one per tensor-parallel rank,
// in memory an engine process can share.
//
// Tensor parallelism. An engine with tensor_parallel_size = N keeps on each GPU (rank) its share
// of every layer's KV heads (num_kv_heads / N; MLA's single latent is replicated on every rank).
// kvmesh serves the whole group from ONE block manager: each plan pool p becomes N rank pools,
// block-manager pool index p * N + r holding rank r's heads, all of the same size. A prefix-tree
// node holds one block in every rank pool, so one Admit returns one block table per rank pool,
// one prefix hit serves every rank, and eviction, offload and restore move a block of all ranks
// together (a block restored without one rank's heads would be a partial block). Block ids of the
// rank pools of one plan pool are allocated independently (each pool has its own free list), so an
// engine uses each rank's own table.
//
// Memory. Host (the CPU backend): one memfd per rank pool (node/shared_memory.h), its components
// at 4 KiB-aligned offsets, sealed against resizing; AttachResponse describes them and the
// descriptors travel with it. CUDA pools (device memory exported as CUDA IPC handles) are
// described the same way with MemoryObject::KIND_CUDA_IPC (see node.h for what is built).
//
// Move-only. Thread safety: the object is immutable after Create; the memory is shared (who writes
// which block when: node/engine_service.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/paged_kv_layout.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/shared_memory.h"
#include "pool/block_manager.h"
#include "pool/model_spec.h"
#include "pool/pool_plan.h"

namespace kvmesh {

struct RankPool {
  int index = 0;  // block manager pool index: plan_pool * tensor_parallel_size + rank
  PoolId plan_pool;
  int rank = 0;
  std::string name;  // "full/2x64", or "full/1x64 rank 1/2"
  std::int32_t window = 0;
  KvPoolLayout layout;
  std::int64_t num_blocks = 0;
  float pool_scale = 1.0f;
  std::vector<std::int32_t> layers;  // global layer ids of the pool's local layers
  std::uint64_t component_offset[kNumKvComponents] = {0, 0, 0, 0};  // in the pool's memory
  std::uint64_t bytes = 0;                                          // of the pool's memory object
};

// The model one rank sees: every layer's KV heads and the query heads divided by `tp` (MLA and
// single-head layers replicated). kInvalidArgument when the heads do not divide.
Result<ModelSpec> RankModelSpec(const ModelSpec& model, int tp);

class NodePools {
 public:
  // Allocates every rank pool of `plan` (a plan of the rank model) in host shared memory.
  static Result<NodePools> CreateHost(const PoolPlan& plan, int tensor_parallel_size,
                                      bool prefault);

  NodePools() = default;
  NodePools(NodePools&&) noexcept = default;
  NodePools& operator=(NodePools&&) noexcept = default;

  [[nodiscard]] const std::vector<RankPool>& pools() const { return pools_; }
  [[nodiscard]] int tensor_parallel_size() const { return tp_; }
  // One view per rank pool, in block-manager order.
  [[nodiscard]] std::vector<KvPoolView> views() const;
  // The block manager's pools, in the same order.
  [[nodiscard]] std::vector<BlockPoolConfig> ManagerPools() const;
  [[nodiscard]] std::int64_t total_bytes() const;

  // Fills pools and memory of an AttachResponse; `fds` receives the descriptors to send, in the
  // order of `memory` (they stay owned by this object).
  void DescribeForAttach(rpc::AttachResponse* out, std::vector<int>* fds) const;

 private:
  int tp_ = 1;
  std::vector<RankPool> pools_;
  std::vector<SharedMemory> memory_;  // [pool]
};

}  // namespace kvmesh
