// Every CUDA decode-attention kernel instantiation (KVMESH_DECODE_INSTANCES in
// kernels/cuda/decode_attention.cuh) is run by at least one case of the sweep that the GPU test and
// the CPU emulation run (DecodeSweepCases), and no case asks for one that does not exist: a new
// instantiation cannot go untested (review finding: five of the 18 ran in no GPU test). The case's
// instantiation is the launcher's own choice (InstanceOf). Label cpu.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "tests/kernels/cuda_emulation.h"
// The host part of the kernel's header, compiled as C++ against the emulation above.
#include "kernels/cuda/decode_attention.cuh"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh {
namespace {

using Key = std::tuple<int, int, int>;  // head_dim, codec, rows

Key KeyOf(const cuda::decode::DecodeInstance& i) {
  return {i.head_dim, static_cast<int>(i.codec), i.rows};
}

TEST(DecodeAttentionInstances, EveryInstantiationHasASweepCaseAndNoCaseLacksOne) {
  std::set<Key> instances;
  for (const cuda::decode::DecodeInstance& i : cuda::decode::kDecodeInstances) {
    EXPECT_TRUE(instances.insert(KeyOf(i)).second) << "listed twice: " << i.head_dim;
  }
  EXPECT_EQ(instances.size(), 18u);
  std::set<Key> covered;
  for (const testing::DecodeCase& c : testing::DecodeSweepCases()) {
    DecodeAttentionArgs args;  // what InstanceOf reads: the pool layout, heads, q_len
    args.pool.layout = testing::DecodeProblem::Layout(c);
    args.num_q_heads = c.num_q_heads;
    args.q_len = c.q_len;
    const Key k = KeyOf(cuda::decode::InstanceOf(args));
    EXPECT_TRUE(instances.count(k) == 1) << c.Name() << " selects no instantiation";
    covered.insert(k);
  }
  for (const Key& k : instances) {
    EXPECT_TRUE(covered.count(k) == 1) << "no sweep case runs head_dim " << std::get<0>(k)
                                       << " codec " << std::get<1>(k) << " rows " << std::get<2>(k);
  }
}

}  // namespace
}  // namespace kvmesh
