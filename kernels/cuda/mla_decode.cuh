// Device code of the CUDA MLA decode (weight-absorbed, kv_lora_rank 512 + rope 64), split-K on
// tensor cores, and the host code that turns the arguments into kernel parameters; the launcher is
// kernels/cuda/mla_decode.cu, the CPU twin kernels/cpu/mla_decode.cc. The device code also compiles
// as plain C++ against the CPU emulation (tests/kernels/cuda_emulation.h).
//
// Grid: x = (sequence, tile of 16 query rows), y = split; 4 warps per CTA. Each CTA streams its
// split's latent records (576 wide) through shared memory in tiles of 32 tokens with a 4-stage
// cp.async pipeline, so every latent byte is read from memory once per 16-row tile (16 heads of
// one query token for DeepSeek with 16 heads per GPU, the memory-bound case). Per tile:
//   S = Q·K^T   [16 rows × 32 tokens]: warp w takes tokens 8w..8w+7, 36 k-steps of mma.sync
//               m16n8k16 over the 576 dims, Q and K fragments by ldmatrix (rows padded by 16 B so
//               the eight rows of an 8x8 matrix hit distinct banks);
//   online softmax over the tile (row maxima exchanged through shared memory), P to shared memory
//   as BF16/FP16 (for fp8 pools times token scale / the tile's largest token scale, see below);
//   O += P·C    [16 rows × 512]: warp w owns dims 128w..128w+127 (64 FP32 accumulators a thread),
//               C fragments by ldmatrix.trans from the same tile.
// bf16 pools run BF16 mma; fp8 pools convert each tile to FP16 in shared memory (E4M3 is exact in
// FP16) and run FP16 mma, with the per-token scale applied to the score and to P.
//
// FP8 staging range: P·C with C the raw codes needs P = prob × token_scale, and token scales
// (amax / 448) span far more than FP16 does — below ~6e-5 P lands in FP16 subnormals or 0, above
// 65504 it is Inf (review finding; the fp8_per_tensor pool scale likewise). So P is staged as
// prob × token_scale / S with S the tile's largest token scale (P <= 1), and the accumulators are
// kept in units of S: o_true = ref × o. A new tile rescales o by the softmax factor times ref / S
// (the rescale that already runs), and the output is o × ref / l. What is left: a token whose scale
// is below 6e-5 of the largest in its 32-token tile loses precision (FP16 subnormals).
//
// Must not be compiled with --use_fast_math.
#pragma once

#include <cstdint>

#include "common/result.h"
#include "common/strings.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/mla_decode.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh::cuda::mla {
namespace {

using hw::CopyAsync;
using hw::LoadMatrixX4;
using hw::LoadMatrixX4Transposed;
using hw::MmaM16N8K16;

constexpr int kThreads = 128;
constexpr int kWarps = 4;
constexpr int kLatent = 512;
constexpr int kRope = 64;
constexpr int kRecord = kLatent + kRope;    // 576
constexpr int kRowsTile = kMlaRowsPerTile;  // 16: one mma M
constexpr int kTile = 32;                   // tokens per stage: 4 warps × n8
constexpr int kStages = 4;
constexpr int kPitch = kRecord * 2 + 16;  // 16-bit operand rows (Q, K/C tiles), padded
constexpr int kPPitch = kTile * 2 + 16;   // P rows, padded
static_assert(kRowsTile == 16, "one mma.m16 tile of query rows per CTA");

struct MlaParams {
  const std::uint8_t* data = nullptr;
  const std::uint8_t* scale = nullptr;  // fp8 per-token scales; null for bf16 and fp8_per_tensor
  std::int64_t num_blocks = 0;
  std::int64_t data_block_bytes = 0, data_layer_bytes = 0, data_token_bytes = 0;
  std::int64_t scale_block_bytes = 0, scale_layer_bytes = 0, scale_token_bytes = 0;
  int tpb_shift = 0;
  int layer = 0;
  float pool_scale = 1.0f;  // fp8_per_tensor: the token scale of every token

  const std::int32_t* kv_lens = nullptr;
  const std::int32_t* block_table = nullptr;
  int max_blocks_per_seq = 0;
  int q_len = 1;
  int num_heads = 0;
  int rows = 0;       // q_len * num_heads per sequence
  int row_tiles = 0;  // ceil(rows / 16)
  const void* q_nope = nullptr;
  const void* q_rope = nullptr;
  ActDtype q_dtype = ActDtype::kBF16;
  float score_scale = 1.0f;  // softmax_scale * log2(e)
  void* out = nullptr;
  ActDtype out_dtype = ActDtype::kFP32;
  float* lse = nullptr;
  float* partial = nullptr;
  SplitWorkspaceLayout workspace;
};

template <bool kFp8>
struct MlaShape {
  static constexpr int kRawPitch = kFp8 ? kRecord : kPitch;  // bytes per staged token row
  static constexpr int kRowBytes = kFp8 ? kRecord : 2 * kRecord;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kScaleOffset = kTile * kRawPitch;
  static constexpr int kValidOffset = kScaleOffset + (kFp8 ? kTile * 4 : 0);
  static constexpr int kStageBytes = (kValidOffset + kTile + 15) / 16 * 16;
  // Shared memory: Q, P, row maxima, row sums, [fp8: the FP16 tile], stages.
  static constexpr int kQOffset = 0;
  static constexpr int kPOffset = kQOffset + kRowsTile * kPitch;
  static constexpr int kMaxOffset = kPOffset + kRowsTile * kPPitch;
  static constexpr int kSumOffset = kMaxOffset + kWarps * kRowsTile * 4;
  static constexpr int kScaleMaxOffset = kSumOffset + kWarps * kRowsTile * 4;  // fp8: [kWarps]
  static constexpr int kConvertedOffset = kScaleMaxOffset + 16;
  static constexpr int kStagesOffset = kConvertedOffset + (kFp8 ? kTile * kPitch : 0);
  static constexpr int kSharedBytes = kStagesOffset + kStages * kStageBytes;
  static_assert(kSharedBytes <= 227 * 1024, "fits the shared memory of one sm_90 CTA");
};

template <bool kFp8>
__device__ void IssueMlaTile(const MlaParams& p, std::uint8_t* stage, const std::int32_t* table,
                             int t0, int end) {
  using S = MlaShape<kFp8>;
  const int tpb_mask = (1 << p.tpb_shift) - 1;
  for (int c = threadIdx.x; c < kTile * S::kChunksPerRow; c += kThreads) {
    const int tt = c / S::kChunksPerRow;
    const int chunk = c % S::kChunksPerRow;
    const int pos = t0 + tt;
    const std::int32_t block = pos < end ? __ldg(table + (pos >> p.tpb_shift)) : -1;
    const bool ok = block >= 0 && block < p.num_blocks;
    const std::uint8_t* src = p.data;
    if (ok) {
      src += block * p.data_block_bytes + p.layer * p.data_layer_bytes +
             (pos & tpb_mask) * p.data_token_bytes + chunk * 16;
    }
    CopyAsync<16>(stage + tt * S::kRawPitch + chunk * 16, src, ok);
    if (chunk == 0) stage[S::kValidOffset + tt] = ok ? 1 : 0;
  }
  if constexpr (kFp8) {
    if (p.scale == nullptr) return;
    for (int tt = threadIdx.x; tt < kTile; tt += kThreads) {
      const int pos = t0 + tt;
      const std::int32_t block = pos < end ? __ldg(table + (pos >> p.tpb_shift)) : -1;
      const bool ok = block >= 0 && block < p.num_blocks;
      const std::uint8_t* src = p.scale;
      if (ok) {
        src += block * p.scale_block_bytes + p.layer * p.scale_layer_bytes +
               (pos & tpb_mask) * p.scale_token_bytes;
      }
      CopyAsync<4>(stage + S::kScaleOffset + tt * 4, src, ok);
    }
  }
}

// fp8 pools: the staged E4M3 tile → FP16 rows of kPitch bytes (exact).
__device__ void ConvertFp8Tile(const std::uint8_t* raw, std::uint8_t* converted) {
  constexpr int kChunks = kRecord / 8;  // 8 codes per chunk
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int tt = c / kChunks;
    const int chunk = c % kChunks;
    const uint2 codes = *reinterpret_cast<const uint2*>(raw + tt * kRecord + chunk * 8);
    const std::uint32_t w[2] = {codes.x, codes.y};
    std::uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      h[2 * i] = hw::E4M3PairToHalfPair(w[i] & 0xFFFFu);
      h[2 * i + 1] = hw::E4M3PairToHalfPair(w[i] >> 16);
    }
    *reinterpret_cast<uint4*>(converted + tt * kPitch + chunk * 16) =
        make_uint4(h[0], h[1], h[2], h[3]);
  }
}

// Q tile → shared memory as BF16 (bf16 pools) or FP16 (fp8 pools); rows past the sequence's rows
// are zero.
template <bool kFp8>
__device__ void LoadQuery(const MlaParams& p, std::uint8_t* q_smem, int seq, int row0) {
  constexpr int kPairs = kRecord / 2;
  for (int idx = threadIdx.x; idx < kRowsTile * kPairs; idx += kThreads) {
    const int r = idx / kPairs;
    const int d = idx % kPairs * 2;
    const int row = row0 + r;
    float x = 0.0f, y = 0.0f;
    if (row < p.rows) {
      const std::int64_t q_row = std::int64_t{seq} * p.rows + row;
      if (d < kLatent) {
        x = attention::LoadAct(p.q_dtype, p.q_nope, q_row * kLatent + d);
        y = attention::LoadAct(p.q_dtype, p.q_nope, q_row * kLatent + d + 1);
      } else {
        x = attention::LoadAct(p.q_dtype, p.q_rope, q_row * kRope + d - kLatent);
        y = attention::LoadAct(p.q_dtype, p.q_rope, q_row * kRope + d - kLatent + 1);
      }
    }
    *reinterpret_cast<std::uint32_t*>(q_smem + r * kPitch + d * 2) = hw::PackPair<!kFp8>(x, y);
  }
}

// Per-thread softmax and output state. Thread (warp w, lane = 4g + t) holds rows g and g + 8.
struct MlaState {
  float o[16][4];    // dims 128w + 8n + 2t (+1), rows g ([0..1]) and g + 8 ([2..3])
  float m[2];        // running max of rows g, g + 8 (log2 units), the same in every thread
  float l[2];        // this thread's share of the row sums
  float ref;         // fp8: o holds the output in units of ref (the last tile's largest scale)
  int query_pos[2];  // -1: not a query row of the sequence
};

template <bool kFp8>
__device__ __forceinline__ void ProcessTile(const MlaParams& p, std::uint8_t* smem,
                                            const std::uint8_t* stage, int t0, MlaState& st) {
  using S = MlaShape<kFp8>;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const std::uint8_t* operand = kFp8 ? smem + S::kConvertedOffset : stage;
  const std::uint8_t* q_smem = smem + S::kQOffset;
  std::uint8_t* p_smem = smem + S::kPOffset;
  float* max_smem = reinterpret_cast<float*>(smem + S::kMaxOffset);

  // S = Q·K^T for tokens 8w..8w+7, two independent accumulators over even and odd k-steps.
  float s_even[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float s_odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const std::uint8_t* k_row = operand + (8 * warp + (lane & 7)) * kPitch + (lane >> 3) * 16;
  const std::uint8_t* q_row = q_smem + (lane & 15) * kPitch + (lane >> 4) * 16;
#pragma unroll 6
  for (int kc = 0; kc < kRecord / 16; kc += 2) {
    std::uint32_t b[4], a0[4], a1[4];
    LoadMatrixX4(b, k_row + kc * 32);
    LoadMatrixX4(a0, q_row + kc * 32);
    LoadMatrixX4(a1, q_row + kc * 32 + 32);
    MmaM16N8K16<!kFp8>(s_even, a0, b[0], b[1]);
    MmaM16N8K16<!kFp8>(s_odd, a1, b[2], b[3]);
  }

  // Scores of this thread: rows g, g+8 × tokens 8w + 2t, +1.
  float s[4];
  float token_scale[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int tt = 8 * warp + 2 * t + i;
    token_scale[i] = p.pool_scale;
    if (kFp8 && p.scale != nullptr) {
      token_scale[i] = reinterpret_cast<const float*>(stage + S::kScaleOffset)[tt];
    }
  }
  // fp8: the largest token scale of the tile (zero-filled tokens have scale 0).
  float* scale_max_smem = reinterpret_cast<float*>(smem + S::kScaleMaxOffset);
  if constexpr (kFp8) {
    if (p.scale != nullptr) {
      float sm = fmaxf(token_scale[0], token_scale[1]);
      sm = fmaxf(sm, __shfl_xor_sync(0xFFFFFFFFu, sm, 1));
      sm = fmaxf(sm, __shfl_xor_sync(0xFFFFFFFFu, sm, 2));
      if (lane == 0) scale_max_smem[warp] = sm;
    }
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int half = i >> 1;  // 0: row g, 1: row g + 8
    const int tt = 8 * warp + 2 * t + (i & 1);
    const int pos = t0 + tt;
    const bool visible = stage[S::kValidOffset + tt] != 0 && pos <= st.query_pos[half];
    s[i] = visible ? (s_even[i] + s_odd[i]) * p.score_scale * token_scale[i & 1] : -INFINITY;
    tile_max[half] = fmaxf(tile_max[half], s[i]);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xFFFFFFFFu, tile_max[half], 1));
    tile_max[half] = fmaxf(tile_max[half], __shfl_xor_sync(0xFFFFFFFFu, tile_max[half], 2));
    if (t == 0) max_smem[warp * kRowsTile + g + 8 * half] = tile_max[half];
  }
  __syncthreads();
  float factor[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float m = st.m[half];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, max_smem[w * kRowsTile + g + 8 * half]);
    factor[half] = attention::RescaleFactor(st.m[half], m);
    st.m[half] = m;
  }
  // P is staged as prob × token_scale / ref (fp8); o moves to the new ref with the rescale.
  float p_factor = 1.0f;
  float o_factor[2] = {factor[0], factor[1]};
  if constexpr (kFp8) {
    float ref = p.pool_scale;
    if (p.scale != nullptr) {
      ref = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) ref = fmaxf(ref, scale_max_smem[w]);
      if (ref == 0.0f) ref = st.ref;  // no valid token in the tile
    }
    const float move = st.ref / ref;
    o_factor[0] *= move;
    o_factor[1] *= move;
    st.ref = ref;
    p_factor = 1.0f / ref;
  }
  float prob[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    prob[i] = s[i] == -INFINITY ? 0.0f : exp2f(s[i] - st.m[i >> 1]);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    st.l[half] = st.l[half] * factor[half] + prob[2 * half] + prob[2 * half + 1];
  }
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    st.o[n][0] *= o_factor[0];
    st.o[n][1] *= o_factor[0];
    st.o[n][2] *= o_factor[1];
    st.o[n][3] *= o_factor[1];
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    *reinterpret_cast<std::uint32_t*>(p_smem + (g + 8 * half) * kPPitch + (8 * warp + 2 * t) * 2) =
        hw::PackPair<!kFp8>(prob[2 * half] * (token_scale[0] * p_factor),
                            prob[2 * half + 1] * (token_scale[1] * p_factor));
  }
  __syncthreads();

  // O[:, 128w .. 128w + 127] += P · C.
  const std::uint8_t* p_row = p_smem + (lane & 15) * kPPitch + (lane >> 4) * 16;
  const int c_token = (lane & 7) + ((lane >> 3) & 1) * 8;
  const std::uint8_t* c_row = operand + c_token * kPitch + (128 * warp + (lane >> 4) * 8) * 2;
#pragma unroll
  for (int kc = 0; kc < kTile / 16; ++kc) {
    std::uint32_t a[4];
    LoadMatrixX4(a, p_row + kc * 32);
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      std::uint32_t b[4];
      LoadMatrixX4Transposed(b, c_row + kc * 16 * kPitch + np * 32);
      MmaM16N8K16<!kFp8>(st.o[2 * np], a, b[0], b[1]);
      MmaM16N8K16<!kFp8>(st.o[2 * np + 1], a, b[2], b[3]);
    }
  }
}

template <bool kFp8>
__device__ void FinishMla(const MlaParams& p, std::uint8_t* smem, MlaState& st, int seq, int row0,
                          int split) {
  using S = MlaShape<kFp8>;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  float* sum_smem = reinterpret_cast<float*>(smem + S::kSumOffset);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = st.l[half];
    l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
    l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
    if (t == 0) sum_smem[warp * kRowsTile + g + 8 * half] = l;
  }
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= p.rows) continue;
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) l += sum_smem[w * kRowsTile + g + 8 * half];
    const float inv = l > 0.0f ? (kFp8 ? st.ref : 1.0f) / l : 0.0f;
    const float lse = l > 0.0f ? (st.m[half] + log2f(l)) * attention::kLn2 : -INFINITY;
    const std::int64_t out_row = std::int64_t{seq} * p.rows + row;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int d = 128 * warp + 8 * n + 2 * t;
      const float x = st.o[n][2 * half] * inv;
      const float y = st.o[n][2 * half + 1] * inv;
      if (p.workspace.num_splits == 1) {
        attention::StorePair(p.out_dtype, p.out, out_row * kLatent + d, x, y);
      } else {
        *reinterpret_cast<float2*>(p.partial + p.workspace.OutOffset(split, out_row) + d) =
            make_float2(x, y);
      }
    }
    if (warp == 0 && t == 0) {
      if (p.workspace.num_splits == 1) {
        if (p.lse != nullptr) p.lse[out_row] = lse;
      } else {
        p.partial[p.workspace.LseOffset(split, out_row)] = lse;
      }
    }
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) MlaDecodeKernel(MlaParams p) {
  using S = MlaShape<kFp8>;
  KVMESH_DYNAMIC_SHARED(smem);
  const int tile_index = static_cast<int>(blockIdx.x % p.row_tiles);
  const int seq = static_cast<int>(blockIdx.x / p.row_tiles);
  const int split = static_cast<int>(blockIdx.y);
  const int capacity = p.max_blocks_per_seq << p.tpb_shift;
  const int kv_len = min(max(__ldg(p.kv_lens + seq), p.q_len), capacity);
  const KeyRange keys =
      SplitKeyRange(DecodeKeyRange(kv_len, p.q_len, 0), p.workspace.num_splits, split, kTile);
  const std::int32_t* table = p.block_table + std::int64_t{seq} * p.max_blocks_per_seq;
  const int row0 = tile_index * kRowsTile;

  MlaState st;
  const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    st.query_pos[half] = row < p.rows ? kv_len - p.q_len + row / p.num_heads : -1;
    st.m[half] = -INFINITY;
    st.l[half] = 0.0f;
    st.ref = 1.0f;
  }
#pragma unroll
  for (int n = 0; n < 16; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) st.o[n][i] = 0.0f;
  }
  LoadQuery<kFp8>(p, smem + S::kQOffset, seq, row0);

  std::uint8_t* stages = smem + S::kStagesOffset;
  const int num_tiles = keys.empty() ? 0 : (keys.end - keys.begin + kTile - 1) / kTile;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      IssueMlaTile<kFp8>(p, stages + s * S::kStageBytes, table, keys.begin + s * kTile, keys.end);
    }
    hw::CommitAsyncCopies();
  }
#pragma unroll 1
  for (int i = 0; i < num_tiles; ++i) {
    hw::WaitAsyncCopies<kStages - 2>();
    __syncthreads();  // tile i has landed; every thread is done with tile i - 1 (and Q is stored)
    const int next = i + kStages - 1;
    if (next < num_tiles) {
      IssueMlaTile<kFp8>(p, stages + next % kStages * S::kStageBytes, table,
                         keys.begin + next * kTile, keys.end);
    }
    hw::CommitAsyncCopies();
    const std::uint8_t* stage = stages + i % kStages * S::kStageBytes;
    if constexpr (kFp8) {
      ConvertFp8Tile(stage, smem + S::kConvertedOffset);
      __syncthreads();
    }
    ProcessTile<kFp8>(p, smem, stage, keys.begin + i * kTile, st);
  }
  hw::WaitAsyncCopies<0>();
  FinishMla<kFp8>(p, smem, st, seq, row0, split);
}

// ---------------------------------------------------------------------------------------------
// Host side: the parameters of a launch

// Everything one launch needs: the kernel's parameters and element type, its grid, and the combine
// of the splits (when there is more than one).
struct MlaLaunch {
  MlaParams params;
  bool fp8 = false;         // MlaDecodeKernel<true> (fp8, fp8_per_tensor) or <false> (bf16)
  unsigned int grid_x = 0;  // (sequence, 16-row tile)
  unsigned int grid_y = 0;  // split
  attention::CombineParams combine;
  bool needs_combine = false;
};

inline bool Aligned(const void* p, std::uintptr_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// The launch of these arguments. REQUIRES CanImplementMlaDecode(args, workspace).ok() and
// args.num_seqs > 0. kInvalidArgument for misaligned pointers or too many CTAs, kNotSupported for a
// pool dtype without a kernel.
inline Result<MlaLaunch> MakeMlaLaunch(const MlaDecodeArgs& args, Workspace workspace) {
  const KvPoolLayout& layout = args.pool.layout;
  const PagedTensorLayout& data = layout.data();
  const PagedTensorLayout& scale = layout.scale();
  const void* data_base = args.pool.base[static_cast<int>(KvComponent::kData)];
  const void* scale_base = args.pool.base[static_cast<int>(KvComponent::kScale)];
  if (!Aligned(data_base, 16) || (scale.present() && !Aligned(scale_base, 16))) {
    return Status::InvalidArgument("LaunchMlaDecode: pool bases must be 16-byte aligned");
  }
  if (!Aligned(args.out, args.out_dtype == ActDtype::kFP32 ? 8 : 4)) {
    return Status::InvalidArgument("LaunchMlaDecode: out is not aligned to two elements");
  }
  MlaLaunch launch;
  switch (layout.dtype) {
    case KvDtype::kBF16: launch.fp8 = false; break;
    case KvDtype::kFP8:
    case KvDtype::kFP8PerTensor: launch.fp8 = true; break;
    default:
      return Status::NotSupported(
          StrCat("LaunchMlaDecode: pool dtype ", KvDtypeName(layout.dtype), " has no kernel"));
  }
  MlaParams& p = launch.params;
  p.data = static_cast<const std::uint8_t*>(data_base);
  p.num_blocks = args.pool.num_blocks;
  p.data_block_bytes = data.BytesPerBlock();
  p.data_layer_bytes = data.LayerStride() * data.bits / 8;
  p.data_token_bytes = data.TokenStride() * data.bits / 8;
  if (layout.dtype == KvDtype::kFP8) {
    p.scale = static_cast<const std::uint8_t*>(scale_base);
    p.scale_block_bytes = scale.BytesPerBlock();
    p.scale_layer_bytes = scale.LayerStride() * scale.bits / 8;
    p.scale_token_bytes = scale.TokenStride() * scale.bits / 8;
  }
  p.pool_scale = layout.dtype == KvDtype::kFP8PerTensor ? args.pool.pool_scale : 1.0f;
  while ((1 << p.tpb_shift) < data.tokens_per_block) ++p.tpb_shift;
  p.layer = args.layer;
  p.kv_lens = args.kv_lens;
  p.block_table = args.block_table;
  p.max_blocks_per_seq = args.max_blocks_per_seq;
  p.q_len = args.q_len;
  p.num_heads = args.num_heads;
  p.rows = args.q_len * args.num_heads;
  p.row_tiles = (p.rows + kRowsTile - 1) / kRowsTile;
  p.q_nope = args.q_nope;
  p.q_rope = args.q_rope;
  p.q_dtype = args.q_dtype;
  p.score_scale = args.softmax_scale * attention::kLog2e;
  p.out = args.out;
  p.out_dtype = args.out_dtype;
  p.lse = args.lse;
  p.workspace = SplitWorkspaceLayout{.rows = std::int64_t{args.num_seqs} * p.rows,
                                     .width = kLatent,
                                     .num_splits = MlaDecodeNumSplits(args)};
  if (p.workspace.num_splits > 1) p.partial = static_cast<float*>(workspace.data);

  const std::int64_t ctas = std::int64_t{args.num_seqs} * p.row_tiles;
  if (ctas > 0x7FFFFFFF) {
    return Status::InvalidArgument(StrCat("LaunchMlaDecode: ", ctas, " CTAs are too many"));
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
}  // namespace kvmesh::cuda::mla
