// Device code of the CUDA block copy (kernels/cuda/block_copy.cu) and the host code that plans it.
// Included by block_copy.cu and, with host shims for the CUDA built-ins, by
// tests/kernels/cuda_emulation_test.cc, which runs the kernel body on the CPU. Everything has
// internal linkage (an unnamed namespace in a header, on purpose). The CPU twin is
// kernels/cpu/block_copy.cc: a copy has no arithmetic, so the same bytes land in the same places.
//
// The work of one pair is, per present component, a set of equally long contiguous "runs":
//   kWhole  same order, whole blocks: one run of BytesPerBlock
//   kSpans  same order, the first n tokens: HND one run per (layer, kv, head) of n rows, NHD one
//           run per (layer, kv) of n × heads rows; source and destination offsets are equal
//   kRows   HND <-> NHD: one run per (layer, kv, head, token) row, offsets from each side's layout
// Runs are cut into units of W bytes (16 when every size, stride and base allows, else the largest
// power of two that divides them all). A CTA copies up to kUnitsPerCta units of one component of
// one pair; grid.y is the pair, grid.x walks the components' pieces. Each thread keeps four loads
// in flight before it stores.
//
// The kernel parameters carry the pairs by value (kBlockCopyPairsPerLaunch at a time), so the
// pair list never has to be in device memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "common/strings.h"
#include "kernels/block_copy_cuda.h"

namespace kvmesh::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr std::uint32_t kUnitsPerCta = 4096;  // 64 KiB with 16-byte units

enum class RunKind : std::uint8_t { kWhole, kSpans, kRows };

struct ComponentPlan {
  PagedTensorLayout src;
  PagedTensorLayout dst;
  const std::uint8_t* src_base;
  std::uint8_t* dst_base;
  std::int64_t block_bytes;
  RunKind kind;
  std::int32_t width;           // bytes per unit: 1, 2, 4, 8 or 16
  std::int32_t n;               // tokens copied
  std::uint32_t units_per_run;  // run bytes / width
  std::uint32_t units;          // units of one pair
  std::uint32_t cta_begin;      // first grid.x of this component
};

struct CopyParams {
  ComponentPlan comp[kNumKvComponents];
  std::int32_t num_comps;
  std::int32_t num_pairs;
  BlockCopyPair pairs[kBlockCopyPairsPerLaunch];
};
static_assert(sizeof(CopyParams) <= 4000, "kernel parameters are limited to 4 KiB");

// Byte offsets of run `run` inside the source and destination blocks.
__device__ __forceinline__ void RunOffsets(const ComponentPlan& c, std::uint32_t run,
                                           std::int64_t& src_off, std::int64_t& dst_off) {
  const PagedTensorLayout& s = c.src;
  switch (c.kind) {
    case RunKind::kWhole: src_off = dst_off = 0; return;
    case RunKind::kSpans: {
      int h = 0;
      if (s.order == KvLayout::kHND) {
        h = static_cast<int>(run % s.num_heads);
        run /= s.num_heads;
      }
      const int kv = static_cast<int>(run % s.kv_factor);
      const int l = static_cast<int>(run / s.kv_factor);
      src_off = dst_off = s.ByteOffset(0, l, kv, h, 0, 0);
      return;
    }
    case RunKind::kRows: {
      const int t = static_cast<int>(run % c.n);
      run /= c.n;
      const int h = static_cast<int>(run % s.num_heads);
      run /= s.num_heads;
      const int kv = static_cast<int>(run % s.kv_factor);
      const int l = static_cast<int>(run / s.kv_factor);
      src_off = s.ByteOffset(0, l, kv, h, t, 0);
      dst_off = c.dst.ByteOffset(0, l, kv, h, t, 0);
      return;
    }
  }
}

template <int W>
struct Unit;
template <>
struct Unit<16> {
  using Type = uint4;
};
template <>
struct Unit<8> {
  using Type = uint2;
};
template <>
struct Unit<4> {
  using Type = std::uint32_t;
};
template <>
struct Unit<2> {
  using Type = std::uint16_t;
};
template <>
struct Unit<1> {
  using Type = std::uint8_t;
};

template <int W>
__device__ __forceinline__ void CopyUnits(const ComponentPlan& c, const std::uint8_t* src,
                                          std::uint8_t* dst, std::uint32_t begin,
                                          std::uint32_t end) {
  using T = typename Unit<W>::Type;
  for (std::uint32_t u0 = begin + threadIdx.x; u0 < end; u0 += kUnroll * kThreads) {
    T v[kUnroll];
    std::int64_t dst_at[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const std::uint32_t u = u0 + k * kThreads;
      if (u >= end) break;
      std::int64_t so = 0, doff = 0;
      std::uint32_t within = u;
      if (c.kind != RunKind::kWhole) {
        RunOffsets(c, u / c.units_per_run, so, doff);
        within = u % c.units_per_run;
      }
      v[k] = *reinterpret_cast<const T*>(src + so + std::int64_t{within} * W);
      dst_at[k] = doff + std::int64_t{within} * W;
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (u0 + k * kThreads >= end) break;
      *reinterpret_cast<T*>(dst + dst_at[k]) = v[k];
    }
  }
}

__global__ void __launch_bounds__(kThreads) BlockCopyKernel(CopyParams p) {
  const BlockCopyPair pair = p.pairs[blockIdx.y];
  int ci = 0;
  while (ci + 1 < p.num_comps && blockIdx.x >= p.comp[ci + 1].cta_begin) ++ci;
  const ComponentPlan& c = p.comp[ci];
  const std::uint32_t begin = (blockIdx.x - c.cta_begin) * kUnitsPerCta;
  const std::uint32_t end = min(c.units, begin + kUnitsPerCta);
  const std::uint8_t* src = c.src_base + pair.src_block * c.block_bytes;
  std::uint8_t* dst = c.dst_base + pair.dst_block * c.block_bytes;
  switch (c.width) {
    case 16: CopyUnits<16>(c, src, dst, begin, end); break;
    case 8: CopyUnits<8>(c, src, dst, begin, end); break;
    case 4: CopyUnits<4>(c, src, dst, begin, end); break;
    case 2: CopyUnits<2>(c, src, dst, begin, end); break;
    default: CopyUnits<1>(c, src, dst, begin, end); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: one plan per present component, the same for every pair.

// A number whose largest power-of-two factor is the pointer's alignment, capped at 16.
std::int64_t AlignmentWitness(const void* p) {
  return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p) % 16) | 16;
}

Status PlanComponent(const BlockCopyArgs& args, int ci, int n, ComponentPlan& c) {
  const PagedTensorLayout& s = args.src.layout.components[ci];
  const PagedTensorLayout& d = args.dst.layout.components[ci];
  c.src = s;
  c.dst = d;
  c.src_base = static_cast<const std::uint8_t*>(args.src.base[ci]);
  c.dst_base = static_cast<std::uint8_t*>(args.dst.base[ci]);
  c.block_bytes = s.BytesPerBlock();
  c.n = n;
  const std::int64_t row = s.RowBytes();
  std::int64_t run_bytes = 0;
  std::int64_t runs = 0;
  // Every stride a run offset is built from; the unit width must divide all of them.
  std::int64_t g = std::gcd(AlignmentWitness(c.src_base), AlignmentWitness(c.dst_base));
  g = std::gcd(g, c.block_bytes);
  const std::int64_t layer = s.LayerStride() * s.bits / 8;
  const std::int64_t kv = s.KvStride() * s.bits / 8;
  if (s.order == d.order && n == s.tokens_per_block) {
    c.kind = RunKind::kWhole;
    run_bytes = c.block_bytes;
    runs = 1;
  } else if (s.order == d.order) {
    c.kind = RunKind::kSpans;
    const bool hnd = s.order == KvLayout::kHND;
    run_bytes = hnd ? n * row : std::int64_t{n} * s.num_heads * row;
    runs = std::int64_t{s.num_layers} * s.kv_factor * (hnd ? s.num_heads : 1);
    g = std::gcd(std::gcd(g, layer), kv);
    if (hnd) g = std::gcd(g, s.HeadStride() * s.bits / 8);
  } else {
    c.kind = RunKind::kRows;
    run_bytes = row;
    runs = std::int64_t{s.num_layers} * s.kv_factor * s.num_heads * n;
    g = std::gcd(std::gcd(g, layer), kv);
    for (const PagedTensorLayout* t : {&s, &d}) {
      g = std::gcd(g, t->HeadStride() * t->bits / 8);
      g = std::gcd(g, t->TokenStride() * t->bits / 8);
    }
  }
  g = std::gcd(g, run_bytes);
  c.width = 1;
  while (c.width < 16 && g % (c.width * 2) == 0) c.width *= 2;
  const std::int64_t units = runs * (run_bytes / c.width);
  if (c.block_bytes >= (std::int64_t{1} << 31) || units >= (std::int64_t{1} << 31)) {
    return Status::NotSupported(StrCat("block copy: a block of ", c.block_bytes,
                                       " bytes in one component is beyond the kernel's 2 GiB"));
  }
  c.units_per_run = static_cast<std::uint32_t>(run_bytes / c.width);
  c.units = static_cast<std::uint32_t>(units);
  return Status::Ok();
}

// Plans every present component of a copy of `n` tokens per block; `ctas` is grid.x.
Status PlanBlockCopy(const BlockCopyArgs& args, int n, CopyParams& p, std::uint32_t& ctas) {
  ctas = 0;
  for (int ci = 0; ci < kNumKvComponents; ++ci) {
    if (!args.src.layout.components[ci].present()) continue;
    ComponentPlan& c = p.comp[p.num_comps++];
    KVMESH_RETURN_IF_ERROR(PlanComponent(args, ci, n, c));
    c.cta_begin = ctas;
    ctas += (c.units + kUnitsPerCta - 1) / kUnitsPerCta;
  }
  return Status::Ok();
}

// Puts pairs [first, first + count) into the parameters.
void SetPairs(const BlockCopyArgs& args, std::int64_t first, std::int64_t count, CopyParams& p) {
  p.num_pairs = static_cast<std::int32_t>(count);
  std::copy(args.pairs + first, args.pairs + first + count, p.pairs);
}

}  // namespace
}  // namespace kvmesh::cuda
