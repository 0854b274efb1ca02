// Split-K bookkeeping shared by paged decode attention and MLA decode, on the CPU and on the GPU:
// which keys a query token sees, how a sequence's keys are cut into splits, how many splits to use,
// and where the per-split partial results live in the caller's workspace.
//
// Key visibility (decode_attention.h): query token j of a sequence with kv_len keys sits at
// position p = kv_len - q_len + j and sees keys [max(0, p - window + 1), p] (window 0: [0, p]).
// The union over the q_len query tokens is DecodeKeyRange; a split covers one contiguous,
// `align`-rounded piece of it. Splits past the end of a short sequence are empty.
//
// Workspace of a split kernel (FP32, 16-byte aligned sections, rows = num_seqs * q_len * heads):
//   partial_out [num_splits, rows, width]   the split's softmax-normalised output
//   partial_lse [num_splits, rows]          the split's log-sum-exp (natural log); -inf if it saw
//                                           no key
// One split needs no workspace: the kernel writes `out` and `lse` directly.
//
// Thread-safe (pure functions and values). Usable from device code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/host_device.h"

namespace kvmesh {

struct KeyRange {
  std::int32_t begin = 0;
  std::int32_t end = 0;  // exclusive
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr bool empty() const { return end <= begin; }
};

// Keys seen by at least one of the q_len query tokens. REQUIRES q_len <= kv_len.
KVMESH_HOST_DEVICE constexpr KeyRange DecodeKeyRange(std::int32_t kv_len, std::int32_t q_len,
                                                     std::int32_t window) {
  std::int32_t begin = 0;
  if (window > 0) {
    const std::int32_t first = kv_len - q_len - window + 1;
    begin = first > 0 ? first : 0;
  }
  return KeyRange{begin, kv_len};
}

// Piece `split` of `num_splits` of `range`, each piece a multiple of `align` keys long (the last
// one shorter). REQUIRES num_splits >= 1, align >= 1.
KVMESH_HOST_DEVICE constexpr KeyRange SplitKeyRange(KeyRange range, std::int32_t num_splits,
                                                    std::int32_t split, std::int32_t align) {
  const std::int32_t n = range.end > range.begin ? range.end - range.begin : 0;
  std::int32_t chunk = (n + num_splits - 1) / num_splits;
  chunk = (chunk + align - 1) / align * align;
  const std::int64_t b = std::int64_t{range.begin} + std::int64_t{chunk} * split;
  const std::int64_t e = b + chunk;
  const auto clamp = [&](std::int64_t x) {
    return static_cast<std::int32_t>(x < range.end ? x : range.end);
  };
  return KeyRange{clamp(b), clamp(e)};
}

// Whether the query at `query_pos` sees the key at `key_pos`.
KVMESH_HOST_DEVICE constexpr bool KeyVisible(std::int32_t key_pos, std::int32_t query_pos,
                                             std::int32_t window) {
  return key_pos <= query_pos && (window <= 0 || key_pos > query_pos - window);
}

// The split-count policy when the caller passes num_splits = 0. A pure function of the arguments
// (not of the device), so the workspace size is known on the host before a launch:
//   enough (sequence, head group, split) work units to fill `target_units` (several waves over the
//   132 SMs of an H200, or many tasks for a thread pool), no split shorter than `min_keys`, at
//   most `max_splits`.
KVMESH_HOST_DEVICE constexpr std::int32_t ChooseNumSplits(std::int64_t max_keys,
                                                          std::int64_t work_units,
                                                          std::int64_t target_units,
                                                          std::int64_t min_keys,
                                                          std::int32_t max_splits) {
  if (work_units <= 0 || max_keys <= 0) return 1;
  const std::int64_t by_length = max_keys / min_keys;
  const std::int64_t by_parallelism = (target_units + work_units - 1) / work_units;
  std::int64_t n = by_length < by_parallelism ? by_length : by_parallelism;
  if (n > max_splits) n = max_splits;
  return n < 1 ? 1 : static_cast<std::int32_t>(n);
}

// Where the partial results of the splits live inside a workspace (see the header comment).
struct SplitWorkspaceLayout {
  std::int64_t rows = 0;   // num_seqs * q_len * heads
  std::int32_t width = 0;  // output width (head_dim, or kv_lora_rank for MLA)
  std::int32_t num_splits = 1;

  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t OutFloats() const {
    return (std::int64_t{num_splits} * rows * width + 3) / 4 * 4;  // keeps the lse 16-B aligned
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t LseFloats() const {
    return std::int64_t{num_splits} * rows;
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::size_t Bytes() const {
    if (num_splits <= 1) return 0;
    return static_cast<std::size_t>(OutFloats() + LseFloats()) * sizeof(float);
  }
  // partial_out row of (split, row); partial_lse entry of (split, row).
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t OutOffset(std::int32_t split,
                                                                    std::int64_t row) const {
    return (std::int64_t{split} * rows + row) * width;
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t LseOffset(std::int32_t split,
                                                                    std::int64_t row) const {
    return OutFloats() + std::int64_t{split} * rows + row;
  }
};

}  // namespace kvmesh
