// Helpers shared by the kernel tests on the CPU, in the CUDA emulation and on the GPU: small pool
// geometries, readable case names, byte comparison of whole host pools, random block-copy pairs.
// Host code with gtest, no CUDA (the .cu tests include it too).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ios>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/append_kv.h"
#include "kernels/block_copy.h"
#include "kernels/kv_format.h"
#include "kernels/paged_kv_layout.h"
#include "tests/kernels/append_kv_test_util.h"

// ASSERT_TRUE(expr.ok()) that prints the Status when it fails.
#define KVMESH_ASSERT_OK(expr)          \
  do {                                  \
    const ::kvmesh::Status s_ = (expr); \
    ASSERT_TRUE(s_.ok()) << s_;         \
  } while (0)

namespace kvmesh::testing {

// A two-layer K/V pool geometry.
inline KvPoolGeometry SmallGeometry(KvDtype dtype, KvLayout layout, int heads, int tokens_per_block,
                                    int head_dim) {
  KvPoolGeometry g;
  g.dtype = dtype;
  g.layout = layout;
  g.num_layers = 2;
  g.kv_factor = 2;
  g.num_kv_heads = heads;
  g.tokens_per_block = tokens_per_block;
  g.head_dim = head_dim;
  return g;
}

// "fp8 HND bf16": for SCOPED_TRACE.
inline std::string CaseName(KvDtype d, KvLayout l, ActDtype a) {
  return std::string(KvDtypeName(d)) + " " + std::string(KvLayoutName(l)) + " " +
         std::string(ActDtypeName(a));
}

// Every component byte for byte; a failure names the component and the first differing byte.
inline void ExpectSamePool(const HostPool& actual, const HostPool& expected) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& x = actual.storage[c];
    const auto& y = expected.storage[c];
    ASSERT_EQ(x.size(), y.size());
    const auto diff = std::mismatch(x.begin(), x.end(), y.begin());
    if (diff.first != x.end()) {
      ADD_FAILURE() << "component " << KvComponentName(static_cast<KvComponent>(c)) << " byte "
                    << (diff.first - x.begin()) << ": got 0x" << std::hex << int{*diff.first}
                    << ", expected 0x" << int{*diff.second};
    }
  }
}

// `count` pairs: random source blocks of `src_blocks` (distinct while count <= src_blocks) and
// distinct random destinations of `dst_blocks`. REQUIRES: count <= dst_blocks.
inline std::vector<BlockCopyPair> RandomPairs(std::int64_t count, std::int64_t src_blocks,
                                              std::int64_t dst_blocks, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int64_t> src(src_blocks), dst(dst_blocks);
  std::iota(src.begin(), src.end(), 0);
  std::iota(dst.begin(), dst.end(), 0);
  std::shuffle(src.begin(), src.end(), rng);
  std::shuffle(dst.begin(), dst.end(), rng);
  std::vector<BlockCopyPair> pairs;
  pairs.reserve(count);
  for (std::int64_t i = 0; i < count; ++i) pairs.push_back({src[i % src_blocks], dst[i]});
  return pairs;
}

}  // namespace kvmesh::testing
