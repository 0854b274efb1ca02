// CUDA paged decode attention and MLA decode against the CPU backend (label gpu; the tests that
// need a device skip without one), over the same sweeps as the CPU tests and the CPU emulation of
// the device code (tests/kernels/attention_test_util.h): every cache dtype, both layouts, head_dim
// 64/128/256, GQA groups 1/4/8, tokens_per_block 16..128, q_len 1..8, sliding window,
// fp32/bf16/fp16 queries, fp32/bf16 outputs, 1, several or automatic splits, sequences of 1..1100
// tokens in shuffled blocks of a pool whose unwritten bytes are NaN, every kernel instantiation
// (checked by attention_instances_test.cc), MLA fp8 pools with tiny and huge scales. Tolerances:
// tests/kernels/attention_compare_util.h.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/decode_attention_cuda.h"
#include "kernels/mla_decode.h"
#include "kernels/mla_decode_cuda.h"
#include "tests/kernels/attention_compare_util.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/cuda_test_util.h"

namespace kvmesh {
namespace {

using testing::AttentionOutputs;
using testing::CopyFromBuffer;
using testing::CopyToBuffer;
using testing::CudaBuffer;
using testing::CudaPool;
using testing::DecodeCase;
using testing::DecodeProblem;
using testing::MlaCase;
using testing::MlaProblem;

template <typename T>
std::unique_ptr<CudaBuffer> Upload(const std::vector<T>& host) {
  auto d = std::make_unique<CudaBuffer>(host.size() * sizeof(T));
  CopyToBuffer(*d, host.data(), host.size() * sizeof(T));
  return d;
}

std::vector<float> DownloadFloats(const CudaBuffer& d, std::size_t n) {
  const std::vector<std::uint8_t> bytes = CopyFromBuffer(d.get(), n * sizeof(float));
  std::vector<float> v(n);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// ---------------------------------------------------------------------------------------------
// Decode attention

AttentionOutputs RunDecodeGpu(const DecodeProblem& p, int splits) {
  const CudaPool pool(p.pool.view);
  const auto kv_lens = Upload(p.tables.kv_lens);
  const auto table = Upload(p.tables.block_table);
  const auto q = Upload(p.q);
  const std::size_t out_bytes = p.Rows() * p.spec.head_dim * ActDtypeBytes(p.spec.out_dtype);
  const CudaBuffer out(out_bytes);
  const CudaBuffer lse(p.Rows() * sizeof(float));
  DecodeAttentionArgs args = p.Args(out.get(), lse.as<float>());
  if (splits >= 0) args.num_splits = splits;
  args.pool = pool.view;
  args.kv_lens = kv_lens->as<std::int32_t>();
  args.block_table = table->as<std::int32_t>();
  args.q = q->get();
  const std::size_t ws_bytes = DecodeAttentionWorkspaceBytes(args);
  const CudaBuffer ws(ws_bytes);
  const Status status = cuda::LaunchDecodeAttention(args, Workspace{ws.get(), ws_bytes}, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return AttentionOutputs{
      status, testing::OutputValues(p.spec.out_dtype, CopyFromBuffer(out.get(), out_bytes)),
      DownloadFloats(lse, p.Rows())};
}

void ExpectDecodeMatchesCpu(const DecodeProblem& p, int splits) {
  testing::ExpectMatchesCpu(RunDecodeGpu(p, splits), testing::RunDecodeCpu(p, splits), p.max_abs_v,
                            testing::DecodeOutTolerance(p.spec.out_dtype),
                            testing::kDecodeLseTolerance);
}

TEST(DecodeAttentionGpu, MatchesCpuOnTheSweep) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (const DecodeCase& c : testing::DecodeSweepCases()) {
    SCOPED_TRACE(c.Name());
    ExpectDecodeMatchesCpu(DecodeProblem(c), -1);
  }
}

TEST(DecodeAttentionGpu, SplitCountsAgree) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  DecodeCase c;
  c.dtype = KvDtype::kFP8;
  c.num_kv_heads = 2;
  c.num_q_heads = 8;
  c.tokens_per_block = 32;
  c.q_len = 3;
  c.kv_lens = {1500, 17, 1031};
  const DecodeProblem p(c);
  const AttentionOutputs cpu = testing::RunDecodeCpu(p, 1);
  for (const int splits : {1, 2, 7, 64}) {
    SCOPED_TRACE(splits);
    testing::ExpectMatchesCpu(RunDecodeGpu(p, splits), cpu, p.max_abs_v, 2e-5, 2e-5);
  }
}

TEST(DecodeAttentionGpu, LongContextManySequences) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (const KvDtype dtype : {KvDtype::kBF16, KvDtype::kNVFP4}) {
    DecodeCase c;
    c.dtype = dtype;
    c.layout = KvLayout::kNHD;
    c.num_kv_heads = 8;
    c.num_q_heads = 32;
    c.tokens_per_block = 64;
    c.kv_lens = {4099, 1, 2048, 777, 3001, 64};
    SCOPED_TRACE(c.Name());
    ExpectDecodeMatchesCpu(DecodeProblem(c), -1);
  }
}

// Review finding: a -inf score on a row's first visible key gave NaN (exp2f(-inf - -inf)).
TEST(DecodeAttentionGpu, NegativeInfinityScoreIsNotVisible) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (const int splits : {1, 3}) {
    DecodeCase c;
    c.head_dim = 64;
    c.num_kv_heads = 2;
    c.num_q_heads = 4;
    c.kv_lens = {40, 7, 130};
    c.num_splits = splits;
    SCOPED_TRACE(c.Name());
    DecodeProblem p(c);
    testing::PlantNegativeInfinityKeys(p);
    ExpectDecodeMatchesCpu(p, -1);
  }
}

// A small problem that runs the split kernel of two codecs and the combine: the case
// scripts/gpu-check runs under compute-sanitizer (racecheck, memcheck).
TEST(DecodeAttentionGpu, SmallCaseForSanitizers) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (const KvDtype dtype : {KvDtype::kFP8, KvDtype::kNVFP4}) {
    DecodeCase c;
    c.dtype = dtype;
    c.num_kv_heads = 2;
    c.num_q_heads = 8;
    c.tokens_per_block = 32;
    c.kv_lens = {70, 5};
    c.num_splits = 2;
    SCOPED_TRACE(c.Name());
    ExpectDecodeMatchesCpu(DecodeProblem(c), -1);
  }
}

TEST(DecodeAttentionGpu, RejectsBadArgumentsBeforeLaunching) {
  DecodeCase c;
  c.kv_lens = {20};
  const DecodeProblem p(c);
  float never_written = 0.0f;  // the launcher returns before anything runs
  DecodeAttentionArgs args = p.Args(&never_written, nullptr);
  args.q_len = 9;
  const Status q_len = cuda::LaunchDecodeAttention(args, Workspace{}, nullptr);
  EXPECT_NE(q_len.message().find("q_len 9"), std::string::npos) << q_len;
  args = p.Args(&never_written, nullptr);
  args.num_splits = 4;
  const Status workspace = cuda::LaunchDecodeAttention(args, Workspace{}, nullptr);
  EXPECT_NE(workspace.message().find("workspace"), std::string::npos) << workspace;
}

// ---------------------------------------------------------------------------------------------
// MLA decode

AttentionOutputs RunMlaGpu(const MlaProblem& p, int splits) {
  const CudaPool pool(p.pool.view);
  const auto kv_lens = Upload(p.tables.kv_lens);
  const auto table = Upload(p.tables.block_table);
  const auto q_nope = Upload(p.q_nope);
  const auto q_rope = Upload(p.q_rope);
  const std::size_t out_bytes = p.Rows() * MlaProblem::kLatent * ActDtypeBytes(p.spec.out_dtype);
  const CudaBuffer out(out_bytes);
  const CudaBuffer lse(p.Rows() * sizeof(float));
  MlaDecodeArgs args = p.Args(out.get(), lse.as<float>());
  if (splits >= 0) args.num_splits = splits;
  args.pool = pool.view;
  args.kv_lens = kv_lens->as<std::int32_t>();
  args.block_table = table->as<std::int32_t>();
  args.q_nope = q_nope->get();
  args.q_rope = q_rope->get();
  const std::size_t ws_bytes = MlaDecodeWorkspaceBytes(args);
  const CudaBuffer ws(ws_bytes);
  const Status status = cuda::LaunchMlaDecode(args, Workspace{ws.get(), ws_bytes}, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return AttentionOutputs{
      status, testing::OutputValues(p.spec.out_dtype, CopyFromBuffer(out.get(), out_bytes)),
      DownloadFloats(lse, p.Rows())};
}

void ExpectMlaMatchesCpu(const MlaProblem& p, int splits) {
  testing::ExpectMatchesCpu(RunMlaGpu(p, splits), testing::RunMlaCpu(p, splits), p.max_abs_v,
                            testing::kMlaOutTolerance, testing::kMlaLseTolerance);
}

TEST(MlaDecodeGpu, MatchesCpuOnTheSweep) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  for (const MlaCase& c : testing::MlaSweepCases()) {
    SCOPED_TRACE(c.Name());
    ExpectMlaMatchesCpu(MlaProblem(c), -1);
  }
}

TEST(MlaDecodeGpu, SplitCountsAgree) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  MlaCase c;
  c.dtype = KvDtype::kFP8;
  c.num_heads = 16;
  c.q_len = 2;
  c.kv_lens = {1200, 9, 700};
  const MlaProblem p(c);
  const AttentionOutputs cpu = testing::RunMlaCpu(p, 1);
  for (const int splits : {1, 3, 40}) {
    SCOPED_TRACE(splits);
    testing::ExpectMatchesCpu(RunMlaGpu(p, splits), cpu, p.max_abs_v, testing::kMlaOutTolerance,
                              testing::kMlaLseTolerance);
  }
}

TEST(MlaDecodeGpu, SmallCaseForSanitizers) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  MlaCase c;
  c.dtype = KvDtype::kFP8;
  c.num_heads = 16;
  c.kv_lens = {70, 3};
  c.num_splits = 2;
  ExpectMlaMatchesCpu(MlaProblem(c), -1);
}

TEST(MlaDecodeGpu, RejectsBadArgumentsBeforeLaunching) {
  MlaCase c;
  c.kv_lens = {20};
  const MlaProblem p(c);
  MlaDecodeArgs args = p.Args(nullptr, nullptr);
  args.num_heads = 200;
  const Status s = cuda::LaunchMlaDecode(args, Workspace{}, nullptr);
  EXPECT_NE(s.message().find("num_heads 200"), std::string::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// Errors are reported by the launcher that saw them (review finding: a failed
// cudaFuncSetAttribute stayed CUDA's last error, and the next, unrelated launcher's launch check
// reported it as its own). With a device: an error left by an earlier call is not reported by a
// launch that succeeds, and nothing is left behind. Without one, only that each launcher names its
// own failed call is checked, then the test skips: without a driver CUDA's initialisation error
// stays the last error whatever anyone clears.

__global__ void NothingKernel() {}

// Leaves a (non-sticky) error as the thread's last error, as a failed runtime call of somebody else
// does: a dynamic shared memory limit no device has.
void LeaveStaleError() {
  EXPECT_NE(
      cudaFuncSetAttribute(&NothingKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 30),
      cudaSuccess);
}

TEST(AttentionLaunchErrors, ReportedOnlyByTheLauncherThatSawThem) {
  const bool device = testing::HaveCudaDevice();
  DecodeCase dc;
  dc.kv_lens = {20, 3};
  const DecodeProblem decode(dc);
  MlaCase mc;
  mc.kv_lens = {20, 3};
  const MlaProblem mla(mc);
  for (int launcher = 0; launcher < 2; ++launcher) {
    SCOPED_TRACE(launcher == 0 ? "decode" : "mla");
    LeaveStaleError();
    if (!device) {
      // Host pointers: the launcher's first runtime call fails before anything could read them.
      std::vector<float> out(64 * 1024), lse(1024);
      DecodeAttentionArgs da = decode.Args(out.data(), lse.data());
      MlaDecodeArgs ma = mla.Args(out.data(), lse.data());
      da.num_splits = ma.num_splits = 1;  // no workspace
      const Status s = launcher == 0 ? cuda::LaunchDecodeAttention(da, Workspace{}, nullptr)
                                     : cuda::LaunchMlaDecode(ma, Workspace{}, nullptr);
      EXPECT_EQ(s.code(), StatusCode::kCudaError) << s;
      EXPECT_NE(s.message().find("cudaFuncSetAttribute"), std::string::npos) << s;
      continue;
    }
    const AttentionOutputs out = launcher == 0 ? RunDecodeGpu(decode, 1) : RunMlaGpu(mla, 1);
    EXPECT_TRUE(out.status.ok()) << out.status;  // not the stale error left before the launch
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the launcher left an error behind";
  }
  if (!device) GTEST_SKIP() << "no CUDA device: the stale-error half of the test did not run";
}

}  // namespace
}  // namespace kvmesh
