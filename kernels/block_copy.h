// Block copy: gather or scatter a list of (source block, destination block) pairs between two
// pools, or between a pool and a staging buffer laid out as a pool, with every present component
// (K/V or latent, scales, indexer K and its scales).
//
// The two views must have the same geometry (dtype, layers, kv_factor, heads, tokens per block,
// head dim, indexer) and, for dtypes with a pool-wide scale, the same pool_scale; the order may
// differ (HND <-> NHD is converted on the fly). `num_tokens` < tokens_per_block copies only the
// first tokens of each block (copy-on-partial-reuse); the rest of the destination block is left as
// is.
//
// Callers own all memory. Offload, onboard, copy-on-partial-reuse and transfer staging call this.
//
// Completion: cpu::BlockCopy returns when every byte is written. The CUDA launcher
// (cuda::LaunchBlockCopy, kernels/block_copy_cuda.h) returns after enqueueing on the given stream.
//
// Thread safety: reentrant; concurrent copies must not write the same destination blocks.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

class ThreadPool;

struct BlockCopyPair {
  std::int64_t src_block = 0;
  std::int64_t dst_block = 0;
};

struct BlockCopyArgs {
  KvPoolView src;
  KvPoolView dst;
  // [num_pairs]; HOST memory for every backend (the CUDA launcher passes them to its kernel by
  // value, see kernels/block_copy_cuda.h).
  const BlockCopyPair* pairs = nullptr;
  std::int64_t num_pairs = 0;
  // Tokens [0, num_tokens) of each block; -1 copies whole blocks.
  std::int32_t num_tokens = -1;
};

// OK, or kInvalidArgument naming what is unsupported: differing geometry or pool scale, a block id
// out of range, a missing component base, num_tokens out of range, a destination block named twice,
// or an in-place copy of a block onto itself.
Status CanImplementBlockCopy(const BlockCopyArgs& args);

namespace cpu {

// Runs the copy on `executor` (null: on the calling thread). REQUIRES
// CanImplementBlockCopy(args).ok() (checked; the error is returned).
Status BlockCopy(const BlockCopyArgs& args, ThreadPool* executor);

// One whole block, on the calling thread: block `src_block` of `src` into block `dst_block` of
// `dst` (BlockCopy with one pair; the same checks and errors).
Status CopyBlock(const KvPoolView& src, std::int64_t src_block, const KvPoolView& dst,
                 std::int64_t dst_block);

}  // namespace cpu
}  // namespace kvmesh
