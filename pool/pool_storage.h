// PoolStorage: host memory for the component tensors of every pool — the CPU backend's primary
// pool (a real execution target), and the memory a block manager copies partial blocks in.
//
// One AlignedBuffer (4 KiB aligned) per present component of each pool, sized
// num_blocks * component BytesPerBlock:
//   data   [num_blocks, layers, kv_factor, heads, tokens_per_block, head_dim]   (HND; NHD swaps)
//   scale / index_k / index_scale as the layout says (kernels/paged_kv_layout.h)
// views() hands out KvPoolViews over them (plus each pool's FP32 constant); they stay valid for
// the storage's lifetime, also across moves (the buffers are heap allocations). Contents start
// zeroed. A CUDA device-memory variant is for the CUDA backend (not here).
//
// Move-only. Thread safety: externally synchronised; the memory itself is shared by whoever
// holds the views, with the block manager's pins saying who may write which block.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/result.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

struct PoolMemorySpec {
  KvPoolLayout layout;
  std::int64_t num_blocks = 0;
  float pool_scale = 1.0f;  // fp8_per_tensor scale or nvfp4 global scale; 1 otherwise
};

class PoolStorage {
 public:
  // kInvalidArgument for a pool without blocks or without a data component, kResourceExhausted
  // when the memory cannot be allocated (the message gives the bytes).
  static Result<PoolStorage> Allocate(std::span<const PoolMemorySpec> pools);

  PoolStorage() = default;
  PoolStorage(PoolStorage&&) noexcept = default;
  PoolStorage& operator=(PoolStorage&&) noexcept = default;

  [[nodiscard]] const std::vector<KvPoolView>& views() const { return views_; }
  [[nodiscard]] const KvPoolView& view(int pool) const { return views_[pool]; }
  [[nodiscard]] int num_pools() const { return static_cast<int>(views_.size()); }
  [[nodiscard]] std::int64_t total_bytes() const { return total_bytes_; }

 private:
  std::vector<std::array<AlignedBuffer, kNumKvComponents>> buffers_;
  std::vector<KvPoolView> views_;
  std::int64_t total_bytes_ = 0;
};

}  // namespace kvmesh
