// CPU paged decode attention against the dense float64 reference
// (tests/kernels/attention_reference.h) over every cache dtype, both layouts, head_dim 64/128/256,
// GQA groups 1/4/8, tokens_per_block 16..128, q_len 1..8, sliding window on/off, q in
// fp32/bf16/fp16, out in fp32/bf16, and 1, several or automatic splits; sequences of 1, 3, 7, 17,
// 65, 128 and 1100 tokens (mid-block ends, several splits; 400 instead of 1100 in every other
// case), in shuffled blocks of layer 1 of a 2-layer pool whose unwritten bytes are NaN.
//
// Tolerances (the reference attends over the same dequantised values, so quantisation error is not
// part of them; what remains is FP32 accumulation and exp/log in FP32):
//   out, fp32: max |out - ref| <= 5e-6 * max|V| for every cache dtype (FP32 accumulation over up to
//              1100 keys; measured at most 7e-7)
//   out, bf16: max |out - ref| <= 5e-3 * max|V| (one BF16 rounding of the output: unit roundoff
//              2^-8 = 3.9e-3 of |out| <= max|V|; measured at most 2.5e-3)
//   lse:       max |lse - ref| <= 5e-6 * max(1, |ref|) (measured at most 1.4e-6)
// The per-dtype table below states them; they are the same because the accumulation is.
#include "kernels/decode_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "common/thread_pool.h"
#include "tests/kernels/attention_reference.h"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh {
namespace {

using testing::AttentionErrors;
using testing::DecodeCase;
using testing::DecodeProblem;

struct Tolerance {
  double out = 0.0;
  double lse = 0.0;
};

// Per cache dtype and output dtype (see the file comment). The same for bf16, fp16, fp8,
// fp8_per_tensor, int8 and nvfp4: the reference attends over the same dequantised values, so what
// is left is FP32 accumulation, which does not depend on the storage format.
Tolerance DecodeTolerance(KvDtype /*dtype*/, ActDtype out_dtype) {
  return Tolerance{out_dtype == ActDtype::kBF16 ? 5e-3 : 5e-6, 5e-6};
}

struct RunResult {
  Status status;
  std::vector<float> out;
  std::vector<float> lse;
};

RunResult RunCpu(const DecodeProblem& p, ThreadPool* executor, int num_splits_override = -1) {
  RunResult r;
  std::vector<std::uint8_t> out_bytes(p.Rows() * p.spec.head_dim * ActDtypeBytes(p.spec.out_dtype));
  r.lse.assign(p.Rows(), 0.0f);
  DecodeAttentionArgs args = p.Args(out_bytes.data(), r.lse.data());
  if (num_splits_override >= 0) args.num_splits = num_splits_override;
  std::vector<float> workspace((DecodeAttentionWorkspaceBytes(args) + 3) / 4 + 4);
  r.status = cpu::DecodeAttention(
      args, Workspace{workspace.data(), workspace.size() * sizeof(float)}, executor);
  r.out = testing::OutputValues(p.spec.out_dtype, out_bytes);
  return r;
}

void ExpectMatchesReference(const DecodeCase& c, ThreadPool* executor) {
  SCOPED_TRACE(c.Name());
  const DecodeProblem p(c);
  const RunResult r = RunCpu(p, executor);
  ASSERT_TRUE(r.status.ok()) << r.status;
  const testing::ReferenceAttention ref =
      testing::ReferenceDecodeAttention(p.Args(nullptr, nullptr));
  const AttentionErrors e = testing::CompareAttention(r.out, r.lse, ref.out, ref.lse, p.max_abs_v);
  const Tolerance tol = DecodeTolerance(c.dtype, c.out_dtype);
  EXPECT_TRUE(e.finite);
  EXPECT_LE(e.max_out_error, tol.out);
  EXPECT_LE(e.max_lse_error, tol.lse);
}

TEST(DecodeAttentionSweep, GridCoversEveryValue) {
  std::set<int> dims, groups, tpbs, q_lens, windows, q_dtypes, out_dtypes, splits, dtype_layouts;
  for (const DecodeCase& c : testing::DecodeSweepCases()) {
    dims.insert(c.head_dim);
    groups.insert(c.num_q_heads / c.num_kv_heads);
    tpbs.insert(c.tokens_per_block);
    q_lens.insert(c.q_len);
    windows.insert(c.window);
    q_dtypes.insert(static_cast<int>(c.q_dtype));
    out_dtypes.insert(static_cast<int>(c.out_dtype));
    splits.insert(c.num_splits);
    dtype_layouts.insert(static_cast<int>(c.dtype) * 2 + static_cast<int>(c.layout));
  }
  EXPECT_EQ(dims.size(), 3u);
  EXPECT_EQ(groups, (std::set<int>{1, 4, 8}));
  EXPECT_EQ(tpbs.size(), 4u);
  EXPECT_EQ(q_lens.size(), 8u);
  EXPECT_EQ(windows.size(), 2u);
  EXPECT_EQ(q_dtypes.size(), 3u);
  EXPECT_EQ(out_dtypes.size(), 2u);
  EXPECT_EQ(splits.size(), 3u);
  EXPECT_EQ(dtype_layouts.size(), 12u);
}

TEST(DecodeAttentionSweep, MatchesFloat64Reference) {
  ThreadPool pool(2);
  int i = 0;
  for (const DecodeCase& c : testing::DecodeSweepCases()) {
    ExpectMatchesReference(c, i++ % 2 == 0 ? &pool : nullptr);
  }
}

TEST(DecodeAttention, SplitCountsAgree) {
  DecodeCase c;
  c.dtype = KvDtype::kFP8;
  c.head_dim = 128;
  c.num_kv_heads = 2;
  c.num_q_heads = 8;
  c.tokens_per_block = 32;
  c.q_len = 3;
  c.kv_lens = {1500, 17, 1031};
  const DecodeProblem p(c);
  ThreadPool pool(2);
  const RunResult one = RunCpu(p, &pool, 1);
  ASSERT_TRUE(one.status.ok()) << one.status;
  for (const int splits : {2, 7, 64}) {
    SCOPED_TRACE(splits);
    const RunResult many = RunCpu(p, &pool, splits);
    ASSERT_TRUE(many.status.ok()) << many.status;
    const AttentionErrors e = testing::CompareAttention(
        many.out, many.lse, std::vector<double>(one.out.begin(), one.out.end()),
        std::vector<double>(one.lse.begin(), one.lse.end()), p.max_abs_v);
    EXPECT_LE(e.max_out_error, 5e-6);
    EXPECT_LE(e.max_lse_error, 5e-6);
  }
}

TEST(DecodeAttention, ThreadCountDoesNotChangeTheBytes) {
  DecodeCase c;
  c.dtype = KvDtype::kNVFP4;
  c.layout = KvLayout::kNHD;
  c.kv_lens = {700, 5, 333};
  c.q_len = 2;
  const DecodeProblem p(c);
  ThreadPool pool(3);
  const RunResult inline_run = RunCpu(p, nullptr);
  const RunResult pooled = RunCpu(p, &pool);
  ASSERT_TRUE(inline_run.status.ok());
  ASSERT_TRUE(pooled.status.ok());
  EXPECT_EQ(inline_run.out, pooled.out);
  EXPECT_EQ(inline_run.lse, pooled.lse);
}

TEST(DecodeAttention, NumSplitsPolicy) {
  DecodeCase c;
  c.kv_lens = {4000};
  c.tokens_per_block = 64;
  const DecodeProblem p(c);
  DecodeAttentionArgs args = p.Args(nullptr, nullptr);
  // One sequence, 2 KV heads: as many splits as 256-key pieces of the table's 64 blocks allow.
  ASSERT_EQ(args.max_blocks_per_seq, 64);
  EXPECT_EQ(DecodeAttentionNumSplits(args), 64 * 64 / 256);
  args.sliding_window = 300;  // at most 300 + q_len - 1 keys
  EXPECT_EQ(DecodeAttentionNumSplits(args), 1);
  args.num_splits = 9;
  EXPECT_EQ(DecodeAttentionNumSplits(args), 9);
  args.num_splits = 1;
  EXPECT_EQ(DecodeAttentionWorkspaceBytes(args), 0u);
  args.num_splits = 4;
  // rows = 1 sequence * 1 token * 8 heads: out 4 * 8 * 128 floats, lse 4 * 8.
  EXPECT_EQ(DecodeAttentionWorkspaceBytes(args), (4u * 8 * 128 + 4 * 8) * sizeof(float));
}

// Bad arguments: each error names the problem.
class DecodeAttentionBadArgs : public ::testing::Test {
 protected:
  void ExpectError(const DecodeCase& c, const std::function<void(DecodeAttentionArgs&)>& edit,
                   const std::string& needle) {
    const DecodeProblem p(c);
    std::vector<float> out(p.Rows() * c.head_dim);
    std::vector<float> workspace(1 << 20);
    DecodeAttentionArgs args = p.Args(out.data(), nullptr);
    edit(args);
    Workspace ws{workspace.data(), workspace.size() * sizeof(float)};
    if (needle == "workspace") ws.bytes = 16;
    const Status s = cpu::DecodeAttention(args, ws, nullptr);
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  }
};

TEST_F(DecodeAttentionBadArgs, UnsupportedShapes) {
  DecodeCase c;
  c.kv_lens = {20, 30};
  DecodeCase d96 = c;
  d96.head_dim = 96;
  ExpectError(
      d96, [](DecodeAttentionArgs&) {}, "head_dim 96");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.q_len = 9; }, "q_len 9");
  DecodeCase t8 = c;
  t8.tokens_per_block = 8;
  ExpectError(
      t8, [](DecodeAttentionArgs&) {}, "tokens_per_block 8");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.num_q_heads = 7; }, "num_q_heads 7");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.layer = 2; }, "layer 2");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.out_dtype = ActDtype::kFP16; }, "out_dtype");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.num_splits = 5; }, "workspace");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.num_splits = 1000; }, "num_splits 1000");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.q = nullptr; }, "q is null");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.sliding_window = -1; }, "sliding_window -1");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.softmax_scale = NAN; }, "softmax_scale");
}

TEST_F(DecodeAttentionBadArgs, PoolWithoutScalesOrKv) {
  DecodeCase c;
  c.dtype = KvDtype::kFP8;
  c.kv_lens = {20};
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.pool.base[1] = nullptr; }, "scale component");
  ExpectError(
      c, [](DecodeAttentionArgs& a) { a.pool.base[0] = nullptr; }, "data component");
  DecodeCase n = c;
  n.dtype = KvDtype::kNVFP4;
  ExpectError(
      n, [](DecodeAttentionArgs& a) { a.pool.pool_scale = 0.0f; }, "pool_scale 0");
}

TEST_F(DecodeAttentionBadArgs, ValuesInMemory) {
  DecodeCase c;
  c.kv_lens = {20, 30};
  c.q_len = 4;
  // kv_lens below q_len, above the table's capacity; a block id out of the pool.
  const DecodeProblem p(c);
  std::vector<float> out(p.Rows() * c.head_dim);
  std::vector<std::int32_t> lens = {3, 30};
  DecodeAttentionArgs args = p.Args(out.data(), nullptr);
  args.num_splits = 1;
  args.kv_lens = lens.data();
  Status s = cpu::DecodeAttention(args, Workspace{}, nullptr);
  EXPECT_NE(s.message().find("kv_lens[0] 3"), std::string::npos) << s;
  lens = {20, 100000};
  s = cpu::DecodeAttention(args, Workspace{}, nullptr);
  EXPECT_NE(s.message().find("kv_lens[1] 100000"), std::string::npos) << s;
  std::vector<std::int32_t> table = p.tables.block_table;
  table[1] = 1 << 20;  // sequence 0, block 1
  args.kv_lens = p.tables.kv_lens.data();
  args.block_table = table.data();
  s = cpu::DecodeAttention(args, Workspace{}, nullptr);
  EXPECT_NE(s.message().find("block_table[0][1]"), std::string::npos) << s;
}

TEST(DecodeAttention, EmptyBatchIsOk) {
  DecodeCase c;
  c.kv_lens = {5};
  const DecodeProblem p(c);
  DecodeAttentionArgs args = p.Args(nullptr, nullptr);
  args.num_seqs = 0;
  args.q = nullptr;
  EXPECT_TRUE(cpu::DecodeAttention(args, Workspace{}, nullptr).ok());
}

// A hand-computed case: two keys, one query, so the softmax can be checked by arithmetic.
TEST(DecodeAttention, TwoKeysByHand) {
  DecodeCase c;
  c.dtype = KvDtype::kBF16;
  c.head_dim = 64;
  c.num_kv_heads = 1;
  c.num_q_heads = 1;
  c.q_dtype = ActDtype::kFP32;
  c.kv_lens = {2};
  DecodeProblem p(c);
  // k0 = e0, k1 = 2 e0; v0 = 1, v1 = 3 (all dims); q = e0 * 8 with scale 1/8: scores 1 and 2.
  std::vector<float> k0(64, 0.0f), k1(64, 0.0f), v0(64, 1.0f), v1(64, 3.0f);
  k0[0] = 1.0f;
  k1[0] = 2.0f;
  const std::int32_t block = p.tables.block_table[0];
  p.pool.WriteRow(block, DecodeProblem::kLayer, 0, 0, 0, k0.data());
  p.pool.WriteRow(block, DecodeProblem::kLayer, 0, 0, 1, k1.data());
  p.pool.WriteRow(block, DecodeProblem::kLayer, 1, 0, 0, v0.data());
  p.pool.WriteRow(block, DecodeProblem::kLayer, 1, 0, 1, v1.data());
  std::vector<float> q(64, 0.0f);
  q[0] = 8.0f;
  std::vector<float> out(64);
  float lse = 0.0f;
  DecodeAttentionArgs args = p.Args(out.data(), &lse);
  args.q = q.data();
  args.softmax_scale = 0.125f;
  ASSERT_TRUE(cpu::DecodeAttention(args, Workspace{}, nullptr).ok());
  const double p1 = std::exp(2.0) / (std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(out[0], 1.0 * (1 - p1) + 3.0 * p1, 1e-6);
  EXPECT_NEAR(out[63], 1.0 * (1 - p1) + 3.0 * p1, 1e-6);
  EXPECT_NEAR(lse, std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
}

}  // namespace
}  // namespace kvmesh
