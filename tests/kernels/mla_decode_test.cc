// CPU MLA decode (weight-absorbed, 512 + 64) against the dense float64 reference over bf16, fp8 and
// fp8_per_tensor latent pools, both layouts, 1..128 heads (also counts that do not fill a 16- or
// 32-row tile), tokens_per_block 16..128, q_len 1..8, q in fp32/bf16/fp16, out in fp32/bf16, and
// 1, several or automatic splits, with sequences of 1, 3, 7, 17, 65 and 700 tokens (300 where a
// case has more than 16 query rows).
//
// Tolerances (same dequantised values in the reference; FP32 accumulation over 576-wide dots whose
// scores reach about 20, so a little looser than decode attention's):
//   bf16, fp8, fp8_per_tensor pools, out fp32: max |out - ref| <= 1e-5 * max|c| (measured
//   <= 2.4e-6) out bf16: <= 5e-3 * max|c| (BF16 unit roundoff 2^-8; measured <= 2.9e-3) lse: <=
//   1e-5 * max(1, |ref|) (measured <= 3.3e-6)
#include "kernels/mla_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "common/thread_pool.h"
#include "tests/kernels/attention_reference.h"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh {
namespace {

using testing::AttentionErrors;
using testing::MlaCase;
using testing::MlaProblem;

// Per pool dtype and output dtype; the same for every pool dtype (see the file comment).
double MlaOutTolerance(KvDtype /*dtype*/, ActDtype out_dtype) {
  return out_dtype == ActDtype::kBF16 ? 5e-3 : 1e-5;
}
constexpr double kLseTolerance = 1e-5;

struct RunResult {
  Status status;
  std::vector<float> out;
  std::vector<float> lse;
};

RunResult RunCpu(const MlaProblem& p, ThreadPool* executor, int num_splits_override = -1) {
  RunResult r;
  std::vector<std::uint8_t> out_bytes(p.Rows() * MlaProblem::kLatent *
                                      ActDtypeBytes(p.spec.out_dtype));
  r.lse.assign(p.Rows(), 0.0f);
  MlaDecodeArgs args = p.Args(out_bytes.data(), r.lse.data());
  if (num_splits_override >= 0) args.num_splits = num_splits_override;
  std::vector<float> workspace((MlaDecodeWorkspaceBytes(args) + 3) / 4 + 4);
  r.status =
      cpu::MlaDecode(args, Workspace{workspace.data(), workspace.size() * sizeof(float)}, executor);
  r.out = testing::OutputValues(p.spec.out_dtype, out_bytes);
  return r;
}

TEST(MlaDecodeSweep, GridCoversEveryValue) {
  std::set<int> heads, tpbs, q_lens, q_dtypes, out_dtypes, splits, dtype_layouts;
  for (const MlaCase& c : testing::MlaSweepCases()) {
    heads.insert(c.num_heads);
    tpbs.insert(c.tokens_per_block);
    q_lens.insert(c.q_len);
    q_dtypes.insert(static_cast<int>(c.q_dtype));
    out_dtypes.insert(static_cast<int>(c.out_dtype));
    splits.insert(c.num_splits);
    dtype_layouts.insert(static_cast<int>(c.dtype) * 2 + static_cast<int>(c.layout));
  }
  EXPECT_EQ(heads.size(), 4u);
  EXPECT_EQ(tpbs.size(), 4u);
  EXPECT_EQ(q_lens.size(), 8u);
  EXPECT_EQ(q_dtypes.size(), 3u);
  EXPECT_EQ(out_dtypes.size(), 2u);
  EXPECT_EQ(splits.size(), 3u);
  EXPECT_EQ(dtype_layouts.size(), 6u);
}

TEST(MlaDecodeSweep, MatchesFloat64Reference) {
  ThreadPool pool(2);
  int i = 0;
  for (const MlaCase& c : testing::MlaSweepCases()) {
    SCOPED_TRACE(c.Name());
    const MlaProblem p(c);
    const RunResult r = RunCpu(p, i++ % 2 == 0 ? &pool : nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status;
    const testing::ReferenceAttention ref = testing::ReferenceMlaDecode(p.Args(nullptr, nullptr));
    const AttentionErrors e =
        testing::CompareAttention(r.out, r.lse, ref.out, ref.lse, p.max_abs_v);
    EXPECT_TRUE(e.finite);
    EXPECT_LE(e.max_out_error, MlaOutTolerance(c.dtype, c.out_dtype));
    EXPECT_LE(e.max_lse_error, kLseTolerance);
  }
}

TEST(MlaDecode, SplitCountsAgree) {
  MlaCase c;
  c.dtype = KvDtype::kFP8;
  c.num_heads = 16;
  c.q_len = 2;
  c.kv_lens = {1200, 9, 700};
  const MlaProblem p(c);
  ThreadPool pool(2);
  const RunResult one = RunCpu(p, &pool, 1);
  ASSERT_TRUE(one.status.ok()) << one.status;
  for (const int splits : {2, 9, 40}) {
    SCOPED_TRACE(splits);
    const RunResult many = RunCpu(p, &pool, splits);
    ASSERT_TRUE(many.status.ok()) << many.status;
    const AttentionErrors e = testing::CompareAttention(
        many.out, many.lse, std::vector<double>(one.out.begin(), one.out.end()),
        std::vector<double>(one.lse.begin(), one.lse.end()), p.max_abs_v);
    EXPECT_LE(e.max_out_error, 1e-5);
    EXPECT_LE(e.max_lse_error, kLseTolerance);
  }
}

TEST(MlaDecode, NumSplitsPolicy) {
  MlaCase c;
  c.num_heads = 128;
  c.kv_lens = {3000, 3000};
  const MlaProblem p(c);
  MlaDecodeArgs args = p.Args(nullptr, nullptr);
  // 2 sequences × 8 tiles of 16 rows = 16 units; 528 / 16 = 33, but only 12 pieces of 256 keys
  // fit the table (47 blocks + 1 spare of 64 tokens = 3072 keys).
  ASSERT_EQ(args.max_blocks_per_seq, 48);
  EXPECT_EQ(MlaDecodeNumSplits(args), 48 * 64 / 256);
  args.num_splits = 1;
  EXPECT_EQ(MlaDecodeWorkspaceBytes(args), 0u);
  args.num_splits = 2;
  EXPECT_EQ(MlaDecodeWorkspaceBytes(args), (2u * 256 * 512 + 2 * 256) * sizeof(float));
}

class MlaDecodeBadArgs : public ::testing::Test {
 protected:
  void ExpectError(const MlaCase& c, const std::function<void(MlaDecodeArgs&)>& edit,
                   const std::string& needle, Workspace ws = Workspace{}) {
    const MlaProblem p(c);
    std::vector<float> out(p.Rows() * MlaProblem::kLatent);
    MlaDecodeArgs args = p.Args(out.data(), nullptr);
    args.num_splits = 1;
    edit(args);
    const Status s = cpu::MlaDecode(args, ws, nullptr);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  }
};

TEST_F(MlaDecodeBadArgs, UnsupportedShapesAndPools) {
  MlaCase c;
  c.kv_lens = {20, 40};
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.kv_lora_rank = 256; }, "kv_lora_rank 256");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.q_len = 9; }, "q_len 9");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.num_heads = 129; }, "num_heads 129");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.num_heads = 0; }, "num_heads 0");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.layer = 5; }, "layer 5");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.q_rope = nullptr; }, "q_rope is null");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.num_splits = 4; }, "workspace");
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.out_dtype = ActDtype::kFP16; }, "out_dtype");
  MlaCase t8 = c;
  t8.tokens_per_block = 8;
  ExpectError(
      t8, [](MlaDecodeArgs&) {}, "tokens_per_block 8");
  MlaCase nvfp4 = c;
  nvfp4.dtype = KvDtype::kNVFP4;
  ExpectError(
      nvfp4, [](MlaDecodeArgs&) {}, "pool dtype nvfp4");
  // A decode-attention pool (K and V) is not a latent pool.
  ExpectError(
      c, [](MlaDecodeArgs& a) { a.pool.layout.components[0].kv_factor = 2; },
      "not an MLA latent pool");
}

TEST_F(MlaDecodeBadArgs, ValuesInMemory) {
  MlaCase c;
  c.kv_lens = {20, 40};
  c.q_len = 2;
  std::vector<std::int32_t> lens = {1, 40};
  ExpectError(
      c, [&](MlaDecodeArgs& a) { a.kv_lens = lens.data(); }, "kv_lens[0] 1");
}

}  // namespace
}  // namespace kvmesh
