// Argument checks shared by decode attention and MLA decode (CanImplement* of both): the pool view,
// the layer, the activation dtypes, the split count and the workspace. Each returns
// kInvalidArgument or kNotSupported with a message naming the kernel, the field and its value.
//
// Thread-safe (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "kernels/kernel_types.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

// The data component is present with a non-null base; tokens_per_block is a power of two in
// [16, 128]; 0 <= layer < num_layers; the scale component is present (with a base) for fp8, int8
// and nvfp4; pool_scale is finite and positive for fp8_per_tensor and nvfp4; num_blocks > 0.
Status CheckAttentionPool(std::string_view kernel, const KvPoolView& pool, std::int32_t layer);

// q_dtype any ActDtype; out_dtype fp32 or bf16.
Status CheckAttentionDtypes(std::string_view kernel, ActDtype q_dtype, ActDtype out_dtype);

// num_seqs >= 0, q_len in [1, 8], max_blocks_per_seq >= 1, softmax_scale finite and > 0,
// num_splits in [0, kMaxDecodeSplits].
Status CheckAttentionBatch(std::string_view kernel, std::int32_t num_seqs, std::int32_t q_len,
                           std::int32_t max_blocks_per_seq, float softmax_scale,
                           std::int32_t num_splits);

// `workspace` holds `needed` bytes and its data is 16-byte aligned (when needed > 0).
Status CheckAttentionWorkspace(std::string_view kernel, Workspace workspace, std::size_t needed);

}  // namespace kvmesh
