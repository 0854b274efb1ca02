// KvRowReader: dequantises one (token, head) row of a pool's data component to FP32 on the CPU,
// with exactly the values of kernels/quantize.h's Dequantize*Element (the CPU attention kernels are
// the oracle of the CUDA ones and the node's real CPU backend, so they must be both exact and
// quick):
//   bf16 / fp16  Bf16ToFloat / HalfToFloat
//   fp8          E4M3ToFloat(code) * scale[token, head]   (a 256-entry table of E4M3ToFloat)
//   fp8 per tensor  E4M3ToFloat(code) * pool_scale
//   int8         float(code) * scale[token, head]
//   nvfp4        e2m1(nibble) * SF / gs, looked up in a [256 SF codes][16 nibbles] table built with
//                DequantizeNvfp4Element when the reader is made (4096 divisions per reader)
//
// A reader is built once per kernel call and then only read: thread-safe for concurrent Read().
// It keeps a copy of the view (not the memory): the pool must outlive it.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/paged_kv_layout.h"

namespace kvmesh::cpu {

class KvRowReader {
 public:
  // REQUIRES the view passed CheckAttentionPool for `layer`.
  KvRowReader(const KvPoolView& pool, std::int32_t layer);

  std::int32_t width() const { return data_.inner; }

  // out[0, width) = the dequantised row of (block, kv, head, slot) in the reader's layer.
  // REQUIRES every index inside its dimension.
  void Read(std::int64_t block, int kv, int head, int slot, float* out) const;

 private:
  KvDtype dtype_;
  PagedTensorLayout data_;
  PagedTensorLayout scale_;
  const std::uint8_t* data_base_;
  const std::uint8_t* scale_base_;
  std::int32_t layer_;
  float pool_scale_;
  std::vector<float> nvfp4_table_;  // [256 * 16], nvfp4 only
};

}  // namespace kvmesh::cpu
