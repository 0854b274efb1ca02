// The CPU twins of decode attention and MLA decode run on a problem of attention_test_util.h, and
// the comparison of another implementation's outputs with theirs — shared by the GPU test
// (attention_gpu_test.cu) and the CPU emulation of the CUDA device code
// (attention_emulation_test.cc). Host code with gtest, no CUDA.
//
// Tolerances against the CPU (both dequantise the same codes; they differ in the order of FP32
// operations, the folding of scales and exp2f):
//   decode, out fp32:  max |x - cpu| <= 2e-5 * max|V|        lse: <= 2e-5 * max(1, |lse|)
//   decode, out bf16:  <= 8e-3 * max|V| (the two may round to neighbouring BF16 values: 2^-8 each)
//   MLA (tensor cores: q, latent and P enter as BF16 for bf16 pools, FP16 for fp8 pools):
//                      out <= 1e-2 * max|c| (fp32 or bf16 out), lse <= 2e-2 * max(1, |lse|)
//   (MLA lse: an fp32 query rounded to BF16 is off by up to 2^-9 of each element, and over the
//   576-wide dot of a record of magnitude ~5 that moves a score by ~1e-2: 1.4e-2 was seen in the
//   emulation on bf16_HND_h16_tpb32_qlen4_qfp32, where 5e-3 — the first tolerance, never run on a
//   device — failed.)
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/mla_decode.h"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh::testing {

// (Filled by construction: nvcc flags assigning a [[nodiscard]] Status.)
struct AttentionOutputs {
  Status status;
  std::vector<float> out;
  std::vector<float> lse;
};

// splits < 0: the case's own num_splits.
inline AttentionOutputs RunDecodeCpu(const DecodeProblem& p, int splits) {
  std::vector<std::uint8_t> out(p.Rows() * p.spec.head_dim * ActDtypeBytes(p.spec.out_dtype));
  std::vector<float> lse(p.Rows(), 0.0f);
  DecodeAttentionArgs args = p.Args(out.data(), lse.data());
  if (splits >= 0) args.num_splits = splits;
  std::vector<float> ws(DecodeAttentionWorkspaceBytes(args) / 4 + 4);
  const Status status = cpu::DecodeAttention(args, Workspace{ws.data(), ws.size() * 4}, nullptr);
  return AttentionOutputs{status, OutputValues(p.spec.out_dtype, out), lse};
}

inline AttentionOutputs RunMlaCpu(const MlaProblem& p, int splits) {
  std::vector<std::uint8_t> out(p.Rows() * MlaProblem::kLatent * ActDtypeBytes(p.spec.out_dtype));
  std::vector<float> lse(p.Rows(), 0.0f);
  MlaDecodeArgs args = p.Args(out.data(), lse.data());
  if (splits >= 0) args.num_splits = splits;
  std::vector<float> ws(MlaDecodeWorkspaceBytes(args) / 4 + 4);
  const Status status = cpu::MlaDecode(args, Workspace{ws.data(), ws.size() * 4}, nullptr);
  return AttentionOutputs{status, OutputValues(p.spec.out_dtype, out), lse};
}

inline void ExpectMatchesCpu(const AttentionOutputs& got, const AttentionOutputs& cpu,
                             double max_abs_v, double out_tol, double lse_tol) {
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  ASSERT_TRUE(got.status.ok()) << got.status;
  const AttentionErrors e =
      CompareAttention(got.out, got.lse, std::vector<double>(cpu.out.begin(), cpu.out.end()),
                       std::vector<double>(cpu.lse.begin(), cpu.lse.end()), max_abs_v);
  EXPECT_TRUE(e.finite);
  EXPECT_LE(e.max_out_error, out_tol);
  EXPECT_LE(e.max_lse_error, lse_tol);
}

inline double DecodeOutTolerance(ActDtype out) { return out == ActDtype::kBF16 ? 8e-3 : 2e-5; }
inline constexpr double kDecodeLseTolerance = 2e-5;
inline constexpr double kMlaOutTolerance = 1e-2;
inline constexpr double kMlaLseTolerance = 2e-2;

}  // namespace kvmesh::testing
