// Device code of the CUDA paged decode attention (split-K) and the host code that turns the
// arguments into kernel parameters; the launcher is kernels/cuda/decode_attention.cu, the CPU twin
// kernels/cpu/decode_attention.cc. The device code also compiles as plain C++ against the CPU
// emulation (tests/kernels/cuda_emulation.h), which runs it on the host against the CPU twin.
//
// Grid: x = (sequence, KV head, row tile), y = split. One CTA of 4 warps streams its split's keys
// through shared memory in tiles of kTile tokens with a kStages-deep cp.async pipeline (16-byte
// copies through the block table, zero-filled past the end), so several tiles of K and V are in
// flight per CTA while it computes on an earlier one. The CTA handles a tile of kRows query rows
// (the GQA group × the q_len query tokens of one KV head, 4 or 8 at a time), so every K and V byte
// is read from memory once per row tile.
//
// Inside a tile, a "token slot" of kLanes = head_dim / kElems lanes handles one token at a time,
// each lane owning kElems dims (8; 16 for the 8-bit and NVFP4 kernels of 4 rows, so that a warp
// pass covers twice the keys — docs/kernels-perf.md): it dequantises its K elements in registers
// (BF16/FP16 widen; FP8 through cvt.f16x2.e4m3x2; INT8 through the 2^23 magic number; NVFP4 nibbles
// placed into FP16 bit patterns two at a time, times the UE4M3 block scale), dots them with its
// slice of every query row held in registers, all-reduces the partial dots over the slot's lanes
// with shuffles, runs the online softmax (rescaling only when the running max grows by more than
// 2^8, exact either way; a -inf score is not visible, as on the CPU), and accumulates P·V for its
// dims. At the end the slots of a warp merge through shuffles, the warps through shared memory, and
// the CTA writes the output (one split) or its partial (out, lse) to the workspace, which
// CombineSplitsKernel merges.
//
// Scale folding (same value as quantize.h up to FP32 rounding): the per-token FP32 scale of fp8 and
// int8 multiplies the dot product and the probability instead of every element; the pool-wide
// constant (fp8_per_tensor scale, 1/gs of nvfp4) multiplies q once and the output once.
//
// Must not be compiled with --use_fast_math (denormal block scales and small probabilities).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/result.h"
#include "common/strings.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/decode_attention.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh::cuda::decode {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kStages = 4;
constexpr float kLazyRescale = 8.0f;  // log2 units: probabilities stay <= 2^8 between rescales

enum class Codec : int { k16Bit = 0, k8Bit = 1, kNvfp4 = 2 };

// Everything the kernel needs, resolved on the host. Byte offsets and strides of the data and
// scale components follow PagedTensorLayout.
struct DecodeParams {
  const std::uint8_t* data = nullptr;
  const std::uint8_t* scale =
      nullptr;  // null: no per-token scale pool (bf16, fp16, fp8_per_tensor)
  std::int64_t num_blocks = 0;
  std::int64_t data_block_bytes = 0, data_layer_bytes = 0, data_kv_bytes = 0;
  std::int64_t data_head_bytes = 0, data_token_bytes = 0;
  std::int64_t scale_block_bytes = 0, scale_layer_bytes = 0, scale_kv_bytes = 0;
  std::int64_t scale_head_bytes = 0, scale_token_bytes = 0;
  int tpb_shift = 0;
  int layer = 0;
  bool fp16 = false;  // 16-bit codec: fp16 instead of bf16
  bool int8 = false;  // 8-bit codec: int8 instead of fp8

  const std::int32_t* kv_lens = nullptr;
  const std::int32_t* block_table = nullptr;
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  int q_len = 1;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int group = 1;      // query heads per KV head
  int row_tiles = 1;  // ceil(group * q_len / kRows)
  int window = 0;
  const void* q = nullptr;
  ActDtype q_dtype = ActDtype::kBF16;
  float q_scale = 1.0f;    // softmax_scale * log2(e) * pool-wide dequantisation constant
  float out_scale = 1.0f;  // pool-wide dequantisation constant of V
  void* out = nullptr;
  ActDtype out_dtype = ActDtype::kFP32;
  float* lse = nullptr;
  float* partial = nullptr;  // workspace, with more than one split
  SplitWorkspaceLayout workspace;
};

template <int kHeadDim, Codec kCodec, int kRows>
struct Shape {
  static constexpr int kBits = kCodec == Codec::k16Bit ? 16 : (kCodec == Codec::k8Bit ? 8 : 4);
  static constexpr int kRowBytes = kHeadDim * kBits / 8;
  // Dims a lane owns: 8, or 16 for the 8-bit and 4-bit codecs with 4 rows (docs/kernels-perf.md:
  // twice the keys per pass halves the per-key cost of the shuffles and the softmax; with 8 rows
  // the q and accumulator registers would not fit).
  static constexpr int kElems = kCodec != Codec::k16Bit && kRows == 4 ? 16 : 8;
  static constexpr int kLaneBytes = kElems * kBits / 8;
  static constexpr int kLanes = kHeadDim / kElems;  // lanes per token slot
  static constexpr int kSlotsPerWarp = 32 / kLanes;
  static constexpr int kSlots = kWarps * kSlotsPerWarp;
  // About 16 KiB of K+V per stage.
  static constexpr int kTile = std::clamp(16384 / (2 * kRowBytes), 16, 64);
  static constexpr int kChunksPerRow = kRowBytes / 16;
  // Side-pool bytes per token row: the FP32 scale (fp8/int8), or head_dim/16 UE4M3 block scales.
  static constexpr int kScaleBytes =
      kCodec == Codec::k8Bit ? 4 : (kCodec == Codec::kNvfp4 ? kHeadDim / 16 : 0);
  static constexpr int kKvBytes = kTile * kRowBytes;
  static constexpr int kScaleOffset = 2 * kKvBytes;
  static constexpr int kValidOffset = kScaleOffset + 2 * kTile * kScaleBytes;
  static constexpr int kStageBytes = (kValidOffset + kTile + 15) / 16 * 16;
  static_assert(kTile % kSlots == 0, "a tile is a whole number of slot passes");
  static_assert(kRowBytes % 16 == 0, "rows are whole 16-byte chunks");
};

template <class S, int kRows>
constexpr int SharedBytes() {
  constexpr int stages = kStages * S::kStageBytes;
  constexpr int merge = kWarps * kRows * (S::kLanes * S::kElems + 2) * 4;
  return stages > merge ? stages : merge;
}

// ---------------------------------------------------------------------------------------------
// Loading a tile

// Chunk c = threadIdx.x + i * kThreads of the tile's 2 × kTile × kChunksPerRow: since kChunksPerRow
// divides kThreads, a thread copies the same 16-byte chunk of its rows in every iteration and tile,
// and iteration i's row (K or V, token) is a constant offset from the thread's first: the loop is
// unrolled and only the block lookup and the block/slot offsets are computed per chunk (the first
// version recomputed every index and a 64-bit address of six terms per chunk: 73 instructions per
// 16-byte copy in the SASS, docs/kernels-perf.md).
template <class S>
__device__ void IssueTile(const DecodeParams& p, std::uint8_t* stage, const std::int32_t* table,
                          int t0, int end, std::int64_t data_head, std::int64_t scale_head) {
  static_assert(
      kThreads % S::kChunksPerRow == 0 && (2 * S::kTile * S::kChunksPerRow) % kThreads == 0,
      "every thread copies the same chunk of whole rows");
  constexpr int kIters = 2 * S::kTile * S::kChunksPerRow / kThreads;
  constexpr int kItersPerKv = kIters / 2;
  constexpr int kTokensPerIter = kThreads / S::kChunksPerRow;
  const int tpb_mask = (1 << p.tpb_shift) - 1;
  const int chunk = threadIdx.x % S::kChunksPerRow;
  const int tt0 = threadIdx.x / S::kChunksPerRow;
  const std::uint8_t* const row_base = p.data + data_head + chunk * 16;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int kv = i / kItersPerKv;
    const int tt = tt0 + (i % kItersPerKv) * kTokensPerIter;
    const int pos = t0 + tt;
    const std::int32_t block = pos < end ? __ldg(table + (pos >> p.tpb_shift)) : -1;
    const bool ok = block >= 0 && block < p.num_blocks;
    const std::uint8_t* src = p.data;
    if (ok) {
      src = row_base + (kv == 0 ? 0 : p.data_kv_bytes) + block * p.data_block_bytes +
            (pos & tpb_mask) * p.data_token_bytes;
    }
    hw::CopyAsync<16>(stage + kv * S::kKvBytes + tt * S::kRowBytes + chunk * 16, src, ok);
    if (kv == 0 && chunk == 0) stage[S::kValidOffset + tt] = ok ? 1 : 0;
  }
  if constexpr (S::kScaleBytes > 0) {
    if (p.scale == nullptr) return;  // fp8_per_tensor
    for (int c = threadIdx.x; c < 2 * S::kTile; c += kThreads) {
      const int kv = c / S::kTile;
      const int tt = c % S::kTile;
      const int pos = t0 + tt;
      const std::int32_t block = pos < end ? __ldg(table + (pos >> p.tpb_shift)) : -1;
      const bool ok = block >= 0 && block < p.num_blocks;
      const std::uint8_t* src = p.scale;
      if (ok) {
        src += block * p.scale_block_bytes + scale_head + kv * p.scale_kv_bytes +
               (pos & tpb_mask) * p.scale_token_bytes;
      }
      hw::CopyAsync<S::kScaleBytes>(stage + S::kScaleOffset + c * S::kScaleBytes, src, ok);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dequantising a lane's 8 elements (raw: without the per-token or pool-wide scale)

__device__ __forceinline__ float2 Fp8PairToFloat2(std::uint32_t two_codes) {
  return hw::HalfPairToFloat2(hw::E4M3PairToHalfPair(two_codes));
}

__device__ __forceinline__ float Int8ToFloatExact(std::uint32_t biased_word, int i) {
  // 0x4B0000xx is 2^23 + xx; the codes were biased by 128 (xor 0x80).
  return __uint_as_float(__byte_perm(biased_word, 0x4B000000u, 0x7650u + i)) - 8388736.0f;
}

// NVFP4: nibbles k and k + 4 of a word of eight E2M1 codes (the dims 8j + k and 8j + k + 4 of the
// word's 8) → the two values × 2^-14 as floats: with the pair 16 bits apart, one shift and two
// masks place both halves' sign and magnitude bits as FP16 bit patterns at once.
template <int k>
__device__ __forceinline__ float2 E2M1NibblesToFloat2(std::uint32_t word) {
  const std::uint32_t y = (word >> (4 * k)) & 0x000F000Fu;
  return hw::HalfPairToFloat2(((y & 0x00070007u) << 9) | ((y & 0x00080008u) << 12));
}

// The dim (within the lane's slice) of element e of DecodeLane's output: NVFP4 pairs dims k, k + 4
// of each 8 (E2M1NibblesToFloat2); the other codecs keep the order.
template <Codec kCodec>
__device__ __forceinline__ constexpr int ElementDim(int e) {
  if constexpr (kCodec == Codec::kNvfp4) return e / 8 * 8 + (e % 2) * 4 + e % 8 / 2;
  return e;
}

template <Codec kCodec, int kElems>
__device__ __forceinline__ void DecodeLane(const DecodeParams& p, const std::uint8_t* row_bytes,
                                           float (&x)[kElems]) {
  if constexpr (kCodec == Codec::k16Bit) {
    static_assert(kElems == 8);
    const uint4 raw = *reinterpret_cast<const uint4*>(row_bytes);
    const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (p.fp16) {
        const float2 f = hw::HalfPairToFloat2(w[i]);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
      } else {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
  } else if constexpr (kCodec == Codec::k8Bit) {
    constexpr int kWords = kElems / 4;
    std::uint32_t w[kWords];
    if constexpr (kWords == 4) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row_bytes);
      w[0] = raw.x, w[1] = raw.y, w[2] = raw.z, w[3] = raw.w;
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(row_bytes);
      w[0] = raw.x, w[1] = raw.y;
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      if (p.int8) {
        const std::uint32_t biased = w[i] ^ 0x80808080u;
#pragma unroll
        for (int b = 0; b < 4; ++b) x[4 * i + b] = Int8ToFloatExact(biased, b);
      } else {
        const float2 lo = Fp8PairToFloat2(w[i] & 0xFFFFu);
        const float2 hi = Fp8PairToFloat2(w[i] >> 16);
        x[4 * i] = lo.x;
        x[4 * i + 1] = lo.y;
        x[4 * i + 2] = hi.x;
        x[4 * i + 3] = hi.y;
      }
    }
  } else {
    constexpr int kWords = kElems / 8;
    std::uint32_t w[kWords];
    if constexpr (kWords == 2) {
      const uint2 raw = *reinterpret_cast<const uint2*>(row_bytes);
      w[0] = raw.x, w[1] = raw.y;
    } else {
      w[0] = *reinterpret_cast<const std::uint32_t*>(row_bytes);
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      const float2 f0 = E2M1NibblesToFloat2<0>(w[i]);
      const float2 f1 = E2M1NibblesToFloat2<1>(w[i]);
      const float2 f2 = E2M1NibblesToFloat2<2>(w[i]);
      const float2 f3 = E2M1NibblesToFloat2<3>(w[i]);
      x[8 * i] = f0.x, x[8 * i + 1] = f0.y, x[8 * i + 2] = f1.x, x[8 * i + 3] = f1.y;
      x[8 * i + 4] = f2.x, x[8 * i + 5] = f2.y, x[8 * i + 6] = f3.x, x[8 * i + 7] = f3.y;
    }
  }
}

// NVFP4: the factor of a 16-element block: UE4M3 block scale × 2^14 (undoes E2M1NibblesToFloat2).
__device__ __forceinline__ float Nvfp4LaneFactor(std::uint8_t sf) {
  return hw::HalfPairToFloat2(hw::E4M3PairToHalfPair(sf)).x * 16384.0f;
}

// ---------------------------------------------------------------------------------------------
// The split kernel

template <int kRows, int kElems>
struct RowState {
  float q[kRows][kElems];
  float acc[kRows][kElems];
  float m[kRows];
  float l[kRows];
  int query_pos[kRows];  // -1: the row is outside the group (never sees a key)
};

template <class S, Codec kCodec, int kRows>
__device__ __forceinline__ void ComputeTile(const DecodeParams& p, const std::uint8_t* stage,
                                            int t0, RowState<kRows, S::kElems>& st) {
  const int lane = threadIdx.x & 31;
  const int slot = (threadIdx.x >> 5) * S::kSlotsPerWarp + lane / S::kLanes;
  const int sub = lane % S::kLanes;
  const float* k_scales = reinterpret_cast<const float*>(stage + S::kScaleOffset);
  const float* v_scales = k_scales + S::kTile;
#pragma unroll 1
  for (int pass = 0; pass < S::kTile / S::kSlots; ++pass) {
    const int tt = slot + pass * S::kSlots;
    const int pos = t0 + tt;
    // Invalid tokens were zero-filled: the dot below is 0 and the token is masked afterwards, so
    // every lane runs the same shuffles.
    const bool token_ok = stage[S::kValidOffset + tt] != 0;
    float x[S::kElems];
    DecodeLane<kCodec, S::kElems>(p, stage + tt * S::kRowBytes + sub * S::kLaneBytes, x);
    float lane_factor = 1.0f;
    if constexpr (kCodec == Codec::kNvfp4) {
      lane_factor =
          Nvfp4LaneFactor(stage[S::kScaleOffset + tt * S::kScaleBytes + sub * S::kElems / 16]);
    }
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < S::kElems; ++e) dot = fmaf(st.q[r][e], x[e], dot);
      s[r] = dot * lane_factor;
    }
#pragma unroll
    for (int offset = S::kLanes / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] += __shfl_xor_sync(0xFFFFFFFFu, s[r], offset);
    }
    float k_scale = 1.0f;
    float v_scale = 1.0f;
    if constexpr (kCodec == Codec::k8Bit) {
      if (p.scale != nullptr) {
        k_scale = k_scales[tt];
        v_scale = v_scales[tt];
      }
    }
    float pv[kRows];
    bool any = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int qp = st.query_pos[r];
      const bool visible = token_ok && pos <= qp && (p.window == 0 || pos > qp - p.window);
      pv[r] = 0.0f;
      const float score = s[r] * k_scale;
      // A -inf score counts as not visible, as on the CPU: exp2f(-inf - m) is 0 once the row has
      // seen a finite score, but exp2f(-inf - -inf) would be NaN on its first key.
      if (visible && score != -INFINITY) {
        if (score > st.m[r] + kLazyRescale) {
          const float f = exp2f(st.m[r] - score);  // 0 for the row's first key (m = -inf)
          st.l[r] *= f;
#pragma unroll
          for (int e = 0; e < S::kElems; ++e) st.acc[r][e] *= f;
          st.m[r] = score;
        }
        const float prob = exp2f(score - st.m[r]);
        st.l[r] += prob;
        pv[r] = prob * v_scale;
        any = true;
      }
    }
    if (!any) continue;  // no shuffles below: slots may diverge
    DecodeLane<kCodec, S::kElems>(p, stage + S::kKvBytes + tt * S::kRowBytes + sub * S::kLaneBytes,
                                  x);
    if constexpr (kCodec == Codec::kNvfp4) {
      const float f = Nvfp4LaneFactor(
          stage[S::kScaleOffset + (S::kTile + tt) * S::kScaleBytes + sub * S::kElems / 16]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) pv[r] *= f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (pv[r] != 0.0f) {
#pragma unroll
        for (int e = 0; e < S::kElems; ++e) st.acc[r][e] = fmaf(pv[r], x[e], st.acc[r][e]);
      }
    }
  }
}

// Merges the slots of a warp (shuffles), then the warps (shared memory), and writes the rows.
template <class S, Codec kCodec, int kRows>
__device__ void FinishSplit(const DecodeParams& p, std::uint8_t* smem,
                            RowState<kRows, S::kElems>& st, int seq, int kv_head, int row0,
                            int split) {
  constexpr int kDim = S::kLanes * S::kElems;
#pragma unroll
  for (int offset = S::kLanes; offset < 32; offset *= 2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float m_other = __shfl_xor_sync(0xFFFFFFFFu, st.m[r], offset);
      const float l_other = __shfl_xor_sync(0xFFFFFFFFu, st.l[r], offset);
      const float m_new = fmaxf(st.m[r], m_other);
      const float f_self = attention::RescaleFactor(st.m[r], m_new);
      const float f_other = attention::RescaleFactor(m_other, m_new);
      st.l[r] = st.l[r] * f_self + l_other * f_other;
#pragma unroll
      for (int e = 0; e < S::kElems; ++e) {
        const float a_other = __shfl_xor_sync(0xFFFFFFFFu, st.acc[r][e], offset);
        st.acc[r][e] = st.acc[r][e] * f_self + a_other * f_other;
      }
      st.m[r] = m_new;
    }
  }
  // Shared memory: acc [kWarps][kRows][kDim], then (m, l) [kWarps][kRows][2].
  float* acc_smem = reinterpret_cast<float*>(smem);
  float* ml_smem = acc_smem + kWarps * kRows * kDim;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  if (lane < S::kLanes) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int e = 0; e < S::kElems; ++e) {
        acc_smem[(warp * kRows + r) * kDim + lane * S::kElems + ElementDim<kCodec>(e)] =
            st.acc[r][e];
      }
      if (lane == 0) {
        ml_smem[(warp * kRows + r) * 2] = st.m[r];
        ml_smem[(warp * kRows + r) * 2 + 1] = st.l[r];
      }
    }
  }
  __syncthreads();
  const int rows = p.group * p.q_len;
  for (int idx = threadIdx.x; idx < kRows * kDim / 2; idx += kThreads) {
    const int r = idx / (kDim / 2);
    const int d = idx % (kDim / 2) * 2;
    const int row = row0 + r;
    if (row >= rows) continue;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, ml_smem[(w * kRows + r) * 2]);
    float l = 0.0f, o0 = 0.0f, o1 = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = attention::RescaleFactor(ml_smem[(w * kRows + r) * 2], m);
      l += ml_smem[(w * kRows + r) * 2 + 1] * f;
      o0 += acc_smem[(w * kRows + r) * kDim + d] * f;
      o1 += acc_smem[(w * kRows + r) * kDim + d + 1] * f;
    }
    const float inv = l > 0.0f ? p.out_scale / l : 0.0f;
    const float lse = l > 0.0f ? (m + log2f(l)) * attention::kLn2 : -INFINITY;
    const int j = row / p.group;
    const int h = kv_head * p.group + row % p.group;
    const std::int64_t out_row = (std::int64_t{seq} * p.q_len + j) * p.num_q_heads + h;
    if (p.workspace.num_splits == 1) {
      attention::StorePair(p.out_dtype, p.out, out_row * kDim + d, o0 * inv, o1 * inv);
      if (p.lse != nullptr && d == 0) p.lse[out_row] = lse;
    } else {
      *reinterpret_cast<float2*>(p.partial + p.workspace.OutOffset(split, out_row) + d) =
          make_float2(o0 * inv, o1 * inv);
      if (d == 0) p.partial[p.workspace.LseOffset(split, out_row)] = lse;
    }
  }
}

template <int kHeadDim, Codec kCodec, int kRows>
__global__ void __launch_bounds__(kThreads, 2) DecodeAttentionKernel(DecodeParams p) {
  using S = Shape<kHeadDim, kCodec, kRows>;
  KVMESH_DYNAMIC_SHARED(smem);

  const int tile_index = static_cast<int>(blockIdx.x % p.row_tiles);
  const int kv_head = static_cast<int>(blockIdx.x / p.row_tiles % p.num_kv_heads);
  const int seq = static_cast<int>(blockIdx.x / p.row_tiles / p.num_kv_heads);
  const int split = static_cast<int>(blockIdx.y);
  const int capacity = p.max_blocks_per_seq << p.tpb_shift;
  const int kv_len = min(max(__ldg(p.kv_lens + seq), p.q_len), capacity);
  const KeyRange keys = SplitKeyRange(DecodeKeyRange(kv_len, p.q_len, p.window),
                                      p.workspace.num_splits, split, S::kTile);
  const std::int32_t* table = p.block_table + std::int64_t{seq} * p.max_blocks_per_seq;

  RowState<kRows, S::kElems> st;
  const int row0 = tile_index * kRows;
  const int lane_dim = (threadIdx.x & 31) % S::kLanes * S::kElems;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = row0 + r;
    const bool valid = row < p.group * p.q_len;
    const int j = row / p.group;
    const int h = kv_head * p.group + row % p.group;
    st.query_pos[r] = valid ? kv_len - p.q_len + j : -1;
    const std::int64_t q_base = ((std::int64_t{seq} * p.q_len + j) * p.num_q_heads + h) * kHeadDim;
#pragma unroll
    for (int e = 0; e < S::kElems; ++e) {
      st.q[r][e] =
          valid ? attention::LoadAct(p.q_dtype, p.q, q_base + lane_dim + ElementDim<kCodec>(e)) *
                      p.q_scale
                : 0.0f;
      st.acc[r][e] = 0.0f;
    }
    st.m[r] = -INFINITY;
    st.l[r] = 0.0f;
  }

  const std::int64_t data_head = p.layer * p.data_layer_bytes + kv_head * p.data_head_bytes;
  const std::int64_t scale_head = p.layer * p.scale_layer_bytes + kv_head * p.scale_head_bytes;
  const int num_tiles = keys.empty() ? 0 : (keys.end - keys.begin + S::kTile - 1) / S::kTile;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      IssueTile<S>(p, smem + s * S::kStageBytes, table, keys.begin + s * S::kTile, keys.end,
                   data_head, scale_head);
    }
    hw::CommitAsyncCopies();
  }
#pragma unroll 1
  for (int i = 0; i < num_tiles; ++i) {
    hw::WaitAsyncCopies<kStages - 2>();
    __syncthreads();
    const int next = i + kStages - 1;
    if (next < num_tiles) {
      IssueTile<S>(p, smem + next % kStages * S::kStageBytes, table, keys.begin + next * S::kTile,
                   keys.end, data_head, scale_head);
    }
    hw::CommitAsyncCopies();
    ComputeTile<S, kCodec, kRows>(p, smem + i % kStages * S::kStageBytes, keys.begin + i * S::kTile,
                                  st);
  }
  hw::WaitAsyncCopies<0>();
  __syncthreads();  // the stages become the merge area
  FinishSplit<S, kCodec, kRows>(p, smem, st, seq, kv_head, row0, split);
}

// ---------------------------------------------------------------------------------------------
// Host side: the instantiations, the parameters of a launch

// One kernel instantiation: head_dim × codec × row tile (4 or 8 query rows per CTA).
struct DecodeInstance {
  int head_dim = 0;
  Codec codec = Codec::k16Bit;
  int rows = 0;
  friend constexpr bool operator==(const DecodeInstance&, const DecodeInstance&) = default;
};

// Every instantiation, once: the dispatch switch below and the coverage test of the GPU and
// emulation sweeps (tests/kernels/attention_instances_test.cc) both read this list.
#define KVMESH_DECODE_INSTANCES(X) \
  X(64, Codec::k16Bit, 4)          \
  X(64, Codec::k16Bit, 8)          \
  X(64, Codec::k8Bit, 4)           \
  X(64, Codec::k8Bit, 8)           \
  X(64, Codec::kNvfp4, 4)          \
  X(64, Codec::kNvfp4, 8)          \
  X(128, Codec::k16Bit, 4)         \
  X(128, Codec::k16Bit, 8)         \
  X(128, Codec::k8Bit, 4)          \
  X(128, Codec::k8Bit, 8)          \
  X(128, Codec::kNvfp4, 4)         \
  X(128, Codec::kNvfp4, 8)         \
  X(256, Codec::k16Bit, 4)         \
  X(256, Codec::k16Bit, 8)         \
  X(256, Codec::k8Bit, 4)          \
  X(256, Codec::k8Bit, 8)          \
  X(256, Codec::kNvfp4, 4)         \
  X(256, Codec::kNvfp4, 8)

#define KVMESH_DECODE_INSTANCE_ENTRY(D, C, R) DecodeInstance{D, C, R},
constexpr DecodeInstance kDecodeInstances[] = {
    KVMESH_DECODE_INSTANCES(KVMESH_DECODE_INSTANCE_ENTRY)};
#undef KVMESH_DECODE_INSTANCE_ENTRY

constexpr Codec CodecOf(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBF16:
    case KvDtype::kFP16: return Codec::k16Bit;
    case KvDtype::kFP8:
    case KvDtype::kFP8PerTensor:
    case KvDtype::kINT8: return Codec::k8Bit;
    case KvDtype::kNVFP4: return Codec::kNvfp4;
  }
  return Codec::k16Bit;
}

// Query rows per CTA for `rows` = group × q_len query rows per KV head.
constexpr int RowTileFor(int rows) { return rows <= 4 ? 4 : 8; }

// The instantiation a launch with these arguments runs. REQUIRES CanImplementDecodeAttention(args).
inline DecodeInstance InstanceOf(const DecodeAttentionArgs& args) {
  const PagedTensorLayout& data = args.pool.layout.data();
  const int group = args.num_q_heads / data.num_heads;
  return DecodeInstance{data.inner, CodecOf(args.pool.layout.dtype),
                        RowTileFor(group * args.q_len)};
}

// Calls f.template operator()<head_dim, codec, rows>() for instance i (the one runtime-to-template
// switch); kNotSupported when i is not in the list.
template <typename F>
Status DispatchDecode(const DecodeInstance& i, F&& f) {
  const int key = (i.head_dim / 64) * 100 + static_cast<int>(i.codec) * 10 + i.rows;
#define KVMESH_DECODE_CASE(D, C, R)                   \
  case (D / 64) * 100 + static_cast<int>(C) * 10 + R: \
    if (i.head_dim != D) break;                       \
    return f.template operator()<D, C, R>();
  switch (key) {
    KVMESH_DECODE_INSTANCES(KVMESH_DECODE_CASE)
    default: break;
  }
#undef KVMESH_DECODE_CASE
  return Status::NotSupported(StrCat("LaunchDecodeAttention: head_dim ", i.head_dim,
                                     " with this cache dtype has no kernel"));
}

template <int kHeadDim, Codec kCodec, int kRows>
constexpr int SharedBytesOf() {
  return SharedBytes<Shape<kHeadDim, kCodec, kRows>, kRows>();
}

// Everything one launch needs: the kernel's parameters, its instantiation and grid, and the
// combine of the splits (when there is more than one).
struct DecodeLaunch {
  DecodeParams params;
  DecodeInstance instance;
  unsigned int grid_x = 0;  // (sequence, KV head, row tile)
  unsigned int grid_y = 0;  // split
  attention::CombineParams combine;
  bool needs_combine = false;
};

inline bool Aligned(const void* p, std::uintptr_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// The launch of these arguments. REQUIRES CanImplementDecodeAttention(args, workspace).ok() and
// args.num_seqs > 0. kInvalidArgument for misaligned pointers or too many CTAs.
inline Result<DecodeLaunch> MakeDecodeLaunch(const DecodeAttentionArgs& args, Workspace workspace) {
  const KvPoolLayout& layout = args.pool.layout;
  const PagedTensorLayout& data = layout.data();
  const PagedTensorLayout& scale = layout.scale();
  const KvDtype dtype = layout.dtype;
  const void* data_base = args.pool.base[static_cast<int>(KvComponent::kData)];
  const void* scale_base = args.pool.base[static_cast<int>(KvComponent::kScale)];
  if (!Aligned(data_base, 16) || (scale.present() && !Aligned(scale_base, 16))) {
    return Status::InvalidArgument("LaunchDecodeAttention: pool bases must be 16-byte aligned");
  }
  if (!Aligned(args.out, args.out_dtype == ActDtype::kFP32 ? 8 : 4)) {
    return Status::InvalidArgument("LaunchDecodeAttention: out is not aligned to two elements");
  }

  DecodeLaunch launch;
  DecodeParams& p = launch.params;
  p.data = static_cast<const std::uint8_t*>(data_base);
  p.num_blocks = args.pool.num_blocks;
  const auto bytes = [](const PagedTensorLayout& t, std::int64_t elements) {
    return elements * t.bits / 8;
  };
  p.data_block_bytes = data.BytesPerBlock();
  p.data_layer_bytes = bytes(data, data.LayerStride());
  p.data_kv_bytes = bytes(data, data.KvStride());
  p.data_head_bytes = bytes(data, data.HeadStride());
  p.data_token_bytes = bytes(data, data.TokenStride());
  if (ScaleKindOf(dtype) != KvScaleKind::kNone) {
    p.scale = static_cast<const std::uint8_t*>(scale_base);
    p.scale_block_bytes = scale.BytesPerBlock();
    p.scale_layer_bytes = bytes(scale, scale.LayerStride());
    p.scale_kv_bytes = bytes(scale, scale.KvStride());
    p.scale_head_bytes = bytes(scale, scale.HeadStride());
    p.scale_token_bytes = bytes(scale, scale.TokenStride());
  }
  while ((1 << p.tpb_shift) < data.tokens_per_block) ++p.tpb_shift;
  p.layer = args.layer;
  p.fp16 = dtype == KvDtype::kFP16;
  p.int8 = dtype == KvDtype::kINT8;
  p.kv_lens = args.kv_lens;
  p.block_table = args.block_table;
  p.max_blocks_per_seq = args.max_blocks_per_seq;
  p.num_seqs = args.num_seqs;
  p.q_len = args.q_len;
  p.num_q_heads = args.num_q_heads;
  p.num_kv_heads = data.num_heads;
  p.group = args.num_q_heads / data.num_heads;
  const int rows = p.group * p.q_len;
  launch.instance = InstanceOf(args);
  p.row_tiles = (rows + launch.instance.rows - 1) / launch.instance.rows;
  p.window = args.sliding_window;
  p.q = args.q;
  p.q_dtype = args.q_dtype;
  // Pool-wide constants: fp8_per_tensor scale, nvfp4 1/gs.
  float pool_factor = 1.0f;
  if (dtype == KvDtype::kFP8PerTensor) pool_factor = args.pool.pool_scale;
  if (dtype == KvDtype::kNVFP4) pool_factor = 1.0f / args.pool.pool_scale;
  p.q_scale = args.softmax_scale * attention::kLog2e * pool_factor;
  p.out_scale = pool_factor;
  p.out = args.out;
  p.out_dtype = args.out_dtype;
  p.lse = args.lse;
  p.workspace = SplitWorkspaceLayout{.rows = std::int64_t{args.num_seqs} * rows * data.num_heads,
                                     .width = data.inner,
                                     .num_splits = DecodeAttentionNumSplits(args)};
  if (p.workspace.num_splits > 1) p.partial = static_cast<float*>(workspace.data);

  const std::int64_t ctas = std::int64_t{args.num_seqs} * data.num_heads * p.row_tiles;
  if (ctas > 0x7FFFFFFF) {
    return Status::InvalidArgument(StrCat("LaunchDecodeAttention: ", ctas, " CTAs are too many"));
  }
  launch.grid_x = static_cast<unsigned int>(ctas);
  launch.grid_y = static_cast<unsigned int>(p.workspace.num_splits);
  launch.needs_combine = p.workspace.num_splits > 1;
  launch.combine.layout = p.workspace;
  launch.combine.partial = p.partial;
  launch.combine.out_dtype = args.out_dtype;
  launch.combine.out = args.out;
  launch.combine.lse = args.lse;
  return launch;
}

}  // namespace
}  // namespace kvmesh::cuda::decode
