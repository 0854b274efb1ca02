// Device code of the CUDA append (kernels/cuda/append_kv.cu) and the host code that turns the
// arguments into kernel parameters. Included by append_kv.cu and, with host shims for the CUDA
// built-ins, by tests/kernels/cuda_emulation_test.cc, which runs the kernel body on the CPU.
//
// One kernel serves both appends. A "row" is the unit that shares a scale: one (token, kv, head)
// head vector of AppendKv, or one quant block of one token's indexer K. A group of G lanes (a power
// of two, 1..32, inside one warp) owns a row; lane i handles 16-element chunks i, i + G, ... Chunks
// are loaded and stored as 16-byte vectors when every address allows it (`vec`), element by element
// otherwise. Per-row scales need the row's amax: each lane takes the max of its chunks' FP32 bit
// patterns (HeadAmax) and the group reduces with __shfl_xor_sync — max is exact, so the order does
// not change the result. NVFP4 block scales cover exactly one chunk and need no reduction.
//
// Rows whose block id or position is out of range are skipped (the host cannot read device-side
// tables before the launch; see kernels/append_kv.h). The kernel counts rows from cu_tokens itself
// (64-bit: a launch may have more than 2^31 rows when the host did not know the token count), so
// the host's token count only sizes the grid (AppendCtas): a wrong one costs speed, never rows.
//
// Everything here has internal linkage (an unnamed namespace in a header, on purpose): the CUDA
// build and the CPU emulation each get their own copy, never one another's symbols.
//
// Must not be compiled with -ftz=true or --use_fast_math (see kernels/quantize.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/append_kv.h"
#include "kernels/index_k_quantize.h"
#include "kernels/quantize.h"

namespace kvmesh::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 16;  // elements per lane and step
// Launches of up to kMaxRows32 rows (tokens × kv × heads × quant blocks) locate a row with 32-bit
// divisions, larger ones with 64-bit divisions (a warp-uniform choice).
constexpr std::int64_t kMaxRows32 = (std::int64_t{1} << 31) - 1;

// What a row is quantised to.
enum class RowFormat : std::uint8_t {
  kBf16,      // no scale
  kFp16,      // no scale
  kFp8Fixed,  // fp8 with the pool's scale
  kFp8Row,    // fp8 with an FP32 scale per row (fp8 pool; fp8 indexer)
  kInt8Row,   // int8 with an FP32 scale per row
  kFp4Row,    // e2m1 with an FP32 scale per row (fp4 indexer)
  kNvfp4,     // e2m1 with a UE4M3 scale per chunk and the pool's global scale
};

__host__ __device__ constexpr bool HasRowScale(RowFormat f) {
  return f == RowFormat::kFp8Row || f == RowFormat::kInt8Row || f == RowFormat::kFp4Row;
}
__host__ __device__ constexpr int FormatBits(RowFormat f) {
  return f == RowFormat::kBf16 || f == RowFormat::kFp16      ? 16
         : f == RowFormat::kFp4Row || f == RowFormat::kNvfp4 ? 4
                                                             : 8;
}

struct AppendParams {
  // The ragged batch (device memory).
  std::int32_t num_seqs;
  const std::int32_t* cu_tokens;
  const std::int32_t* start_pos;
  const std::int32_t* block_table;
  std::int32_t max_blocks_per_seq;
  std::int64_t num_blocks;
  std::int32_t tokens_per_block;
  std::int32_t tokens_per_block_log2;
  std::int32_t layer;
  // Rows: token × kv × head × sub; a row has row_len elements.
  std::int32_t kv_factor;
  std::int32_t heads;
  std::int32_t subs;
  std::int32_t row_len;
  std::int32_t head_len;  // input elements per head (row_len × subs)
  const void* input[2];
  std::int64_t token_stride;
  // Output.
  PagedTensorLayout data;
  PagedTensorLayout scale;
  std::uint8_t* data_base;
  std::uint8_t* scale_base;
  RowFormat format;
  float pool_scale;
  // Mapping.
  std::int32_t group;   // lanes per row
  std::int32_t chunks;  // chunks per row
  bool vec;             // 16-byte vectors everywhere
};

// ---------------------------------------------------------------------------------------------
// Loads: 16 input elements, widened to FP32 (missing elements are 0 and do not change an amax).

// HeadAmax of kernels/quantize.h over a chunk in registers: the largest |x| of the finite
// elements, as FP32 bits (non-negative floats order like their bit patterns).
__device__ __forceinline__ std::uint32_t ChunkAmaxBits(const float (&x)[kChunk]) {
  std::uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    const std::uint32_t a = FloatToBits(x[i]) & kFloatAbsMask;
    if (a < kFloatInfBits && a > m) m = a;
  }
  return m;
}

__device__ __forceinline__ void LoadChunkVec(const float* src, float (&x)[kChunk]) {
  const auto* p = reinterpret_cast<const float4*>(src);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = p[i];
    x[4 * i] = v.x;
    x[4 * i + 1] = v.y;
    x[4 * i + 2] = v.z;
    x[4 * i + 3] = v.w;
  }
}

template <typename In>
__device__ __forceinline__ void LoadChunkVec(const In* src, float (&x)[kChunk]) {
  static_assert(sizeof(In) == 2);
  const auto* p = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 v = p[i];
    const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      x[8 * i + 2 * j] = WidenToFloat(In{static_cast<std::uint16_t>(w[j] & 0xFFFFu)});
      x[8 * i + 2 * j + 1] = WidenToFloat(In{static_cast<std::uint16_t>(w[j] >> 16)});
    }
  }
}

template <typename In>
__device__ __forceinline__ void LoadChunk(const In* src, int n, bool vec, float (&x)[kChunk]) {
  if (vec) {
    LoadChunkVec(src, x);
    return;
  }
#pragma unroll
  for (int i = 0; i < kChunk; ++i) x[i] = i < n ? WidenToFloat(src[i]) : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// Quantise one chunk into packed little-endian words (up to 32 bytes) and store them.

__device__ __forceinline__ void PutByte(std::uint32_t (&w)[8], int i, std::uint32_t b) {
  w[i >> 2] |= (b & 0xFFu) << (8 * (i & 3));
}

// The bytes of the chunk, little-endian in w: `scale` is the row scale (row formats), `sf` and
// `nv_factor` the nvfp4 block scale and its encode factor.
__device__ __forceinline__ void QuantizeChunk(RowFormat f, const float (&x)[kChunk], float scale,
                                              float pool_scale, std::uint8_t sf, float nv_factor,
                                              std::uint32_t (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = 0;
  switch (f) {
    case RowFormat::kBf16:
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        w[i >> 1] |= std::uint32_t{FloatToBf16Rne(x[i])} << (16 * (i & 1));
      break;
    case RowFormat::kFp16:
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        w[i >> 1] |= std::uint32_t{FloatToHalfRne(x[i])} << (16 * (i & 1));
      break;
    case RowFormat::kFp8Fixed:
#pragma unroll
      for (int i = 0; i < kChunk; ++i) PutByte(w, i, QuantizeFp8Element(x[i], pool_scale));
      break;
    case RowFormat::kFp8Row:
#pragma unroll
      for (int i = 0; i < kChunk; ++i) PutByte(w, i, QuantizeFp8Element(x[i], scale));
      break;
    case RowFormat::kInt8Row:
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        PutByte(w, i, static_cast<std::uint8_t>(QuantizeInt8Element(x[i], scale)));
      }
      break;
    case RowFormat::kFp4Row:
#pragma unroll
      for (int i = 0; i < kChunk; i += 2) {
        PutByte(w, i / 2,
                QuantizeFp4ScaledElement(x[i], scale) |
                    (QuantizeFp4ScaledElement(x[i + 1], scale) << 4));
      }
      break;
    case RowFormat::kNvfp4:
#pragma unroll
      for (int i = 0; i < kChunk; i += 2) {
        PutByte(w, i / 2,
                QuantizeNvfp4Element(x[i], sf, nv_factor) |
                    (QuantizeNvfp4Element(x[i + 1], sf, nv_factor) << 4));
      }
      break;
  }
}

// Stores `bytes` bytes of w at dst (vec: 8, 16 or 32 bytes, aligned to min(16, bytes)).
__device__ __forceinline__ void StoreBytes(std::uint8_t* dst, int bytes, bool vec,
                                           const std::uint32_t (&w)[8]) {
  if (vec) {
    if (bytes == 8) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
    } else {
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(w[0], w[1], w[2], w[3]);
      if (bytes == 32) reinterpret_cast<uint4*>(dst)[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) {  // unrolled so that w stays in registers
    if (i < bytes) dst[i] = static_cast<std::uint8_t>(w[i >> 2] >> (8 * (i & 3)));
  }
}

// ---------------------------------------------------------------------------------------------
// Row location.

struct RowTarget {
  bool valid;
  std::int64_t block;
  int slot;
  int kv, head, sub;
  std::int32_t token;
};

// The rows of the launch: every (token, kv, head, sub) of the batch, as cu_tokens says (not
// clamped: more than 2^31 rows are located with 64-bit divisions).
__host__ __device__ __forceinline__ std::int64_t LaunchRows(const AppendParams& p) {
  const std::int32_t first = p.cu_tokens[0];
  const std::int32_t end = p.cu_tokens[p.num_seqs];
  return end > first ? std::int64_t{end - first} * p.kv_factor * p.heads * p.subs : 0;
}

// Index is std::uint32_t (REQUIRES r <= kMaxRows32) or std::uint64_t: the row's indices come from
// divisions, and 32-bit ones are several times cheaper than 64-bit ones on the GPU (they are per
// row, beside 16..64 bytes of memory traffic per lane).
template <typename Index>
__host__ __device__ __forceinline__ RowTarget LocateRow(const AppendParams& p, std::int32_t first,
                                                        std::int64_t r) {
  RowTarget t{};
  auto rest = static_cast<Index>(r);
  t.sub = static_cast<int>(rest % static_cast<Index>(p.subs));
  rest /= static_cast<Index>(p.subs);
  t.head = static_cast<int>(rest % static_cast<Index>(p.heads));
  rest /= static_cast<Index>(p.heads);
  t.kv = static_cast<int>(rest % static_cast<Index>(p.kv_factor));
  t.token = first + static_cast<std::int32_t>(rest / static_cast<Index>(p.kv_factor));
  // The last sequence whose first row is at or before the token.
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.cu_tokens[mid] <= t.token) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const std::int64_t pos = std::int64_t{p.start_pos[lo]} + (t.token - p.cu_tokens[lo]);
  const std::int64_t blk = pos >> p.tokens_per_block_log2;  // tokens_per_block is a power of two
  if (pos < 0 || blk >= p.max_blocks_per_seq) return t;
  t.block = p.block_table[std::int64_t{lo} * p.max_blocks_per_seq + blk];
  t.slot = static_cast<int>(pos & (p.tokens_per_block - 1));
  t.valid = t.block >= 0 && t.block < p.num_blocks;
  return t;
}

template <typename In>
__global__ void __launch_bounds__(kThreads) AppendRowsKernel(AppendParams p) {
  const std::int32_t first = p.cu_tokens[0];
  const std::int64_t rows = LaunchRows(p);
  const bool wide_rows = rows > kMaxRows32;  // uniform over the grid
  const int g = p.group;
  const int lane = static_cast<int>(threadIdx.x) & (g - 1);
  const int groups_per_warp = 32 / g;
  const std::int64_t warp = (std::int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  const std::int64_t warps = std::int64_t{gridDim.x} * (kThreads / 32);
  const int group_in_warp = static_cast<int>(threadIdx.x % 32) / g;
  const int bits = FormatBits(p.format);
  const int chunk_bytes = kChunk * bits / 8;
  const float max_code = p.format == RowFormat::kFp8Row    ? kFp8MaxCodeValue
                         : p.format == RowFormat::kInt8Row ? kInt8MaxCodeValue
                                                           : kE2M1MaxCodeValue;

  // Warp-uniform loop: every lane of a warp runs the same iterations, so the shuffles are safe.
  for (std::int64_t base = warp * groups_per_warp; base < rows; base += warps * groups_per_warp) {
    const std::int64_t r = base + group_in_warp;
    RowTarget t{};
    if (r < rows) {
      t = wide_rows ? LocateRow<std::uint64_t>(p, first, r) : LocateRow<std::uint32_t>(p, first, r);
    }
    const In* in = nullptr;
    if (t.valid) {
      in = static_cast<const In*>(p.input[t.kv]) + std::int64_t{t.token} * p.token_stride +
           std::int64_t{t.head} * p.head_len + std::int64_t{t.sub} * p.row_len;
    }
    // Pass 1: the lane's first chunk stays in registers; further chunks only feed the amax.
    float x[kChunk];
    std::uint32_t amax_bits = 0;
    if (t.valid && lane < p.chunks) {
      LoadChunk(in + lane * kChunk, min(kChunk, p.row_len - lane * kChunk), p.vec, x);
      if (HasRowScale(p.format)) {
        amax_bits = ChunkAmaxBits(x);
        for (int c = lane + g; c < p.chunks; c += g) {
          float y[kChunk];
          LoadChunk(in + c * kChunk, min(kChunk, p.row_len - c * kChunk), p.vec, y);
          amax_bits = max(amax_bits, ChunkAmaxBits(y));
        }
      }
    }
    if (HasRowScale(p.format)) {
      for (int offset = g / 2; offset > 0; offset /= 2) {
        amax_bits = max(amax_bits, __shfl_xor_sync(0xFFFFFFFFu, amax_bits, offset));
      }
    }
    if (!t.valid || lane >= p.chunks) continue;

    // Pass 2: quantise and store every chunk of the lane.
    const float scale =
        HasRowScale(p.format) ? ScaleFromAmax(BitsToFloat(amax_bits), max_code) : 1.0f;
    std::uint8_t* out = p.data_base + p.data.ByteOffset(t.block, p.layer, t.kv, t.head, t.slot, 0) +
                        std::int64_t{t.sub} * p.row_len * bits / 8;
    if (HasRowScale(p.format) && lane == 0) {
      reinterpret_cast<float*>(
          p.scale_base)[p.scale.ElementOffset(t.block, p.layer, t.kv, t.head, t.slot, t.sub)] =
          scale;
    }
    for (int c = lane; c < p.chunks; c += g) {
      const int n = min(kChunk, p.row_len - c * kChunk);
      if (c != lane) LoadChunk(in + c * kChunk, n, p.vec, x);
      std::uint8_t sf = 0;
      float nv_factor = 0.0f;
      if (p.format == RowFormat::kNvfp4) {
        sf = Nvfp4BlockScale(BitsToFloat(ChunkAmaxBits(x)), p.pool_scale);
        nv_factor = sf == 0u ? 0.0f : Nvfp4EncodeFactor(sf, p.pool_scale);
        p.scale_base[p.scale.ByteOffset(t.block, p.layer, t.kv, t.head, t.slot, 0) + c] = sf;
      }
      std::uint32_t w[8];
      QuantizeChunk(p.format, x, scale, p.pool_scale, sf, nv_factor, w);
      StoreBytes(out + c * chunk_bytes, n * bits / 8, p.vec, w);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// CTAs of a launch: with the host's token count (>= 0), enough for one row group per lane group, at
// least one and at most 4 resident waves; without it (-1), one resident wave that loops over the
// rows. Never 0: the count is a hint (a 0 that is wrong must not skip the rows; an empty batch
// costs one short launch).
inline std::int64_t AppendCtas(const AppendParams& p, std::int32_t total_tokens,
                               std::int64_t resident_ctas) {
  if (total_tokens < 0) return resident_ctas;
  const std::int64_t rows = std::int64_t{total_tokens} * p.kv_factor * p.heads * p.subs;
  const std::int64_t rows_per_cta = kThreads / p.group;
  return std::clamp<std::int64_t>((rows + rows_per_cta - 1) / rows_per_cta, 1, 4 * resident_ctas);
}

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

RowFormat FormatOf(KvDtype d) {
  switch (d) {
    case KvDtype::kBF16: return RowFormat::kBf16;
    case KvDtype::kFP16: return RowFormat::kFp16;
    case KvDtype::kFP8: return RowFormat::kFp8Row;
    case KvDtype::kFP8PerTensor: return RowFormat::kFp8Fixed;
    case KvDtype::kINT8: return RowFormat::kInt8Row;
    case KvDtype::kNVFP4: return RowFormat::kNvfp4;
  }
  return RowFormat::kBf16;
}

// Lanes per row and whether every chunk can use 16-byte vectors.
void ChooseMapping(AppendParams& p, ActDtype act) {
  p.chunks = (p.row_len + kChunk - 1) / kChunk;
  p.group = 1;
  while (p.group < p.chunks && p.group < 32) p.group *= 2;
  const int eb = ActDtypeBytes(act);
  bool vec = p.row_len % kChunk == 0 && p.data.inner % kChunk == 0 &&
             (p.token_stride * eb) % 16 == 0 && (std::int64_t{p.head_len} * eb) % 16 == 0 &&
             Aligned16(p.data_base);
  for (int kv = 0; kv < p.kv_factor; ++kv) vec = vec && Aligned16(p.input[kv]);
  p.vec = vec;
}

void SetBatch(AppendParams& p, std::int32_t num_seqs, const std::int32_t* cu_tokens,
              const std::int32_t* start_pos, const std::int32_t* block_table,
              std::int32_t max_blocks_per_seq, std::int64_t num_blocks, int tokens_per_block) {
  p.tokens_per_block = tokens_per_block;
  p.tokens_per_block_log2 = 0;
  while ((1 << p.tokens_per_block_log2) < tokens_per_block) ++p.tokens_per_block_log2;
  p.num_seqs = num_seqs;
  p.cu_tokens = cu_tokens;
  p.start_pos = start_pos;
  p.block_table = block_table;
  p.max_blocks_per_seq = max_blocks_per_seq;
  p.num_blocks = num_blocks;
}

AppendParams MakeAppendKvParams(const AppendKvArgs& args) {
  const KvPoolLayout& layout = args.pool.layout;
  AppendParams p{};
  SetBatch(p, args.num_seqs, args.cu_tokens, args.start_pos, args.block_table,
           args.max_blocks_per_seq, args.pool.num_blocks, layout.tokens_per_block());
  p.layer = args.layer;
  p.kv_factor = layout.data().kv_factor;
  p.heads = layout.data().num_heads;
  p.subs = 1;
  p.row_len = layout.data().inner;
  p.head_len = p.row_len;
  p.input[0] = args.k;
  p.input[1] = p.kv_factor == 2 ? args.v : args.k;
  p.token_stride = args.token_stride == 0 ? std::int64_t{p.heads} * p.row_len : args.token_stride;
  p.data = layout.data();
  p.scale = layout.scale();
  p.data_base = static_cast<std::uint8_t*>(args.pool.base[0]);
  p.scale_base = static_cast<std::uint8_t*>(args.pool.base[1]);
  p.format = FormatOf(layout.dtype);
  p.pool_scale = args.pool.pool_scale;
  ChooseMapping(p, args.act_dtype);
  return p;
}

AppendParams MakeAppendIndexKParams(const AppendIndexKArgs& args) {
  const KvPoolLayout& layout = args.pool.layout;
  AppendParams p{};
  SetBatch(p, args.num_seqs, args.cu_tokens, args.start_pos, args.block_table,
           args.max_blocks_per_seq, args.pool.num_blocks, layout.index_k().tokens_per_block);
  p.layer = args.index_layer;
  p.kv_factor = 1;
  p.heads = 1;
  p.subs = layout.index_scale().inner;
  p.row_len = layout.index_k().inner / p.subs;
  p.head_len = layout.index_k().inner;
  p.input[0] = p.input[1] = args.index_k;
  p.token_stride = args.token_stride == 0 ? p.head_len : args.token_stride;
  p.data = layout.index_k();
  p.scale = layout.index_scale();
  p.data_base = static_cast<std::uint8_t*>(args.pool.base[2]);
  p.scale_base = static_cast<std::uint8_t*>(args.pool.base[3]);
  p.format = p.data.bits == 8 ? RowFormat::kFp8Row : RowFormat::kFp4Row;
  p.pool_scale = 1.0f;
  ChooseMapping(p, args.act_dtype);
  return p;
}

}  // namespace
}  // namespace kvmesh::cuda
