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
// Memory. One memory object per rank pool, its components at 4 KiB-aligned offsets:
//   host (the CPU backend): a memfd (node/shared_memory.h) sealed against resizing; the
//     AttachResponse describes it (KIND_MEMFD) and its descriptor travels with the response;
//   CUDA (`device: cuda:N`): device memory on device N + rank (node/device_memory.h), exported as a
//     CUDA IPC handle (KIND_CUDA_IPC, with the device's ordinal and UUID); an engine opens it.
// Tensor parallelism on GPUs is therefore one kvnode for the whole group: rank r's pools live on
// device N + r (kvnode and the engine see the devices in the same order, or the engine finds them
// by UUID), and the one block manager's hits serve every rank.
//
// Move-only. Thread safety: the object is immutable after Create; the memory is shared (who writes
// which block when: node/engine_service.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/paged_kv_layout.h"
#include "node/device_memory.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/shared_memory.h"
#include "pool/block_manager.h"
#include "pool/model_spec.h"
#include "pool/pool_plan.h"
#include "store/emulated_device.h"

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
  int device = -1;  // CUDA device ordinal; -1: host memory
};

// The model one rank sees: every layer's KV heads and the query heads divided by `tp` (MLA and
// single-head layers replicated). kInvalidArgument when the heads do not divide.
Result<ModelSpec> RankModelSpec(const ModelSpec& model, int tp);

class NodePools {
 public:
  // Allocates every rank pool of `plan` (a plan of the rank model) in host shared memory.
  static Result<NodePools> CreateHost(const PoolPlan& plan, int tensor_parallel_size,
                                      bool prefault);
  // Allocates every rank pool of `plan` in device memory: rank r's pools on CUDA device
  // first_device + r, zeroed, with an IPC handle each. kNotFound when a device does not exist,
  // kResourceExhausted when one lacks the memory, kNotSupported without CUDA in the build.
  static Result<NodePools> CreateDevice(const PoolPlan& plan, int tensor_parallel_size,
                                        int first_device);
  // Allocates every rank pool of `plan` in the memory of an emulated device (rank r's pools on its
  // device r; store/emulated_device.h), which must outlive the pools: the node's views hold its
  // PROT_NONE addresses (host code must stage every copy, as for CUDA pools), while engines are
  // given the memfds and see host pools (KIND_MEMFD, device -1).
  static Result<NodePools> CreateEmulated(const PoolPlan& plan, int tensor_parallel_size,
                                          EmulatedDevice* device);

  NodePools() = default;
  NodePools(NodePools&&) noexcept = default;
  NodePools& operator=(NodePools&&) noexcept = default;

  [[nodiscard]] const std::vector<RankPool>& pools() const { return pools_; }
  [[nodiscard]] int tensor_parallel_size() const { return tp_; }
  // True when the pools are device memory (CreateDevice); then views() hold device pointers, which
  // host code must not dereference (store/device_staging.h copies through host memory).
  [[nodiscard]] bool on_device() const { return !device_memory_.empty() || emulated_; }
  [[nodiscard]] bool emulated() const { return emulated_; }
  // The devices of the ranks, [rank] (CreateDevice only; empty for host pools).
  [[nodiscard]] const std::vector<CudaDeviceInfo>& devices() const { return devices_; }
  // One view per rank pool, in block-manager order.
  [[nodiscard]] std::vector<KvPoolView> views() const;
  // The block manager's pools, in the same order.
  [[nodiscard]] std::vector<BlockPoolConfig> ManagerPools() const;
  [[nodiscard]] std::int64_t total_bytes() const;

  // Fills pools and memory of an AttachResponse; `fds` receives the descriptors to send, in the
  // order of the KIND_MEMFD objects of `memory` (they stay owned by this object; device pools
  // have none).
  void DescribeForAttach(rpc::AttachResponse* out, std::vector<int>* fds) const;

 private:
  // Every rank pool's geometry and place in its memory object; no memory.
  static std::vector<RankPool> PlanRankPools(const PoolPlan& plan, int tensor_parallel_size);

  int tp_ = 1;
  std::vector<RankPool> pools_;
  std::vector<SharedMemory> memory_;         // [pool], host pools
  std::vector<DeviceMemory> device_memory_;  // [pool], device pools
  std::vector<int> fds_;                     // [pool]: the memfd an engine maps; -1 for CUDA
  bool emulated_ = false;
  std::vector<CudaDeviceInfo> devices_;  // [rank], device pools
  std::vector<std::uint8_t*> bases_;     // [pool]: the start of its memory object
};

}  // namespace kvmesh
