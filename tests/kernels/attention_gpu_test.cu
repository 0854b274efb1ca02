// CUDA paged decode attention and MLA decode against the CPU backend (label gpu; every test skips
// without a CUDA device), over the same sweeps as the CPU tests
// (tests/kernels/attention_test_util.h): every cache dtype, both layouts, head_dim 64/128/256, GQA
// groups 1/4/8, tokens_per_block 16..128, q_len 1..8, sliding window, fp32/bf16/fp16 queries,
// fp32/bf16 outputs, 1, several or automatic splits, and sequences of 1..1100 tokens in shuffled
// blocks of a pool whose unwritten bytes are NaN.
//
// Tolerances against the CPU (both dequantise the same codes; they differ in the order of FP32
// operations, the folding of scales and exp2f):
//   decode, out fp32:  max |gpu - cpu| <= 2e-5 * max|V|        lse: <= 2e-5 * max(1, |lse|)
//   decode, out bf16:  <= 8e-3 * max|V| (the two may round to neighbouring BF16 values: 2^-8 each)
//   MLA (tensor cores: q, latent and P enter as BF16 for bf16 pools, FP16 for fp8 pools):
//                      out <= 1e-2 * max|c| (fp32 or bf16 out), lse <= 5e-3 * max(1, |lse|)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/decode_attention_cuda.h"
#include "kernels/mla_decode.h"
#include "kernels/mla_decode_cuda.h"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh {
namespace {

using testing::AttentionErrors;
using testing::DecodeCase;
using testing::DecodeProblem;
using testing::MlaCase;
using testing::MlaProblem;

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Device memory owned by the test (RAII).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) EXPECT_EQ(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes_ > 0) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  void* data() const { return data_; }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A host pool copied to the device, and its device view.
struct DevicePool {
  explicit DevicePool(const testing::HostKvPool& host)
      : components{DeviceBuffer(host.storage[0]), DeviceBuffer(host.storage[1]),
                   DeviceBuffer(host.storage[2]), DeviceBuffer(host.storage[3])},
        view(host.view) {
    for (int c = 0; c < kNumKvComponents; ++c) {
      view.base[c] = host.view.base[c] != nullptr ? components[c].data() : nullptr;
    }
  }
  DeviceBuffer components[kNumKvComponents];
  KvPoolView view;
};

// (Filled by construction: nvcc flags assigning a [[nodiscard]] Status.)
struct Outputs {
  Status status;
  std::vector<float> out;
  std::vector<float> lse;
};

// ---------------------------------------------------------------------------------------------
// Decode attention

Outputs RunDecodeCpu(const DecodeProblem& p, int splits) {
  std::vector<std::uint8_t> out(p.Rows() * p.spec.head_dim * ActDtypeBytes(p.spec.out_dtype));
  std::vector<float> lse(p.Rows(), 0.0f);
  DecodeAttentionArgs args = p.Args(out.data(), lse.data());
  if (splits >= 0) args.num_splits = splits;
  std::vector<float> ws(DecodeAttentionWorkspaceBytes(args) / 4 + 4);
  const Status status = cpu::DecodeAttention(args, Workspace{ws.data(), ws.size() * 4}, nullptr);
  return Outputs{status, testing::OutputValues(p.spec.out_dtype, out), lse};
}

Outputs RunDecodeGpu(const DecodeProblem& p, int splits) {
  const DevicePool pool(p.pool);
  const DeviceBuffer kv_lens(p.tables.kv_lens);
  const DeviceBuffer table(p.tables.block_table);
  const DeviceBuffer q(p.q);
  const DeviceBuffer out(p.Rows() * p.spec.head_dim * ActDtypeBytes(p.spec.out_dtype));
  const DeviceBuffer lse(p.Rows() * sizeof(float));
  DecodeAttentionArgs args = p.Args(out.data(), static_cast<float*>(lse.data()));
  if (splits >= 0) args.num_splits = splits;
  args.pool = pool.view;
  args.kv_lens = static_cast<const std::int32_t*>(kv_lens.data());
  args.block_table = static_cast<const std::int32_t*>(table.data());
  args.q = q.data();
  const std::size_t ws_bytes = DecodeAttentionWorkspaceBytes(args);
  const DeviceBuffer ws(ws_bytes);
  const Status status = cuda::LaunchDecodeAttention(args, Workspace{ws.data(), ws_bytes}, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return Outputs{status, testing::OutputValues(p.spec.out_dtype, out.Download<std::uint8_t>()),
                 lse.Download<float>()};
}

void ExpectGpuMatchesCpu(const Outputs& gpu, const Outputs& cpu, double max_abs_v, double out_tol,
                         double lse_tol) {
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  ASSERT_TRUE(gpu.status.ok()) << gpu.status;
  const AttentionErrors e = testing::CompareAttention(
      gpu.out, gpu.lse, std::vector<double>(cpu.out.begin(), cpu.out.end()),
      std::vector<double>(cpu.lse.begin(), cpu.lse.end()), max_abs_v);
  EXPECT_TRUE(e.finite);
  EXPECT_LE(e.max_out_error, out_tol);
  EXPECT_LE(e.max_lse_error, lse_tol);
}

double DecodeOutTolerance(ActDtype out) { return out == ActDtype::kBF16 ? 8e-3 : 2e-5; }

TEST(DecodeAttentionGpu, MatchesCpuOnTheSweep) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (const DecodeCase& c : testing::DecodeSweepCases()) {
    SCOPED_TRACE(c.Name());
    const DecodeProblem p(c);
    ExpectGpuMatchesCpu(RunDecodeGpu(p, -1), RunDecodeCpu(p, -1), p.max_abs_v,
                        DecodeOutTolerance(c.out_dtype), 2e-5);
  }
}

TEST(DecodeAttentionGpu, SplitCountsAgree) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  DecodeCase c;
  c.dtype = KvDtype::kFP8;
  c.num_kv_heads = 2;
  c.num_q_heads = 8;
  c.tokens_per_block = 32;
  c.q_len = 3;
  c.kv_lens = {1500, 17, 1031};
  const DecodeProblem p(c);
  const Outputs cpu = RunDecodeCpu(p, 1);
  for (const int splits : {1, 2, 7, 64}) {
    SCOPED_TRACE(splits);
    ExpectGpuMatchesCpu(RunDecodeGpu(p, splits), cpu, p.max_abs_v, 2e-5, 2e-5);
  }
}

TEST(DecodeAttentionGpu, LongContextManySequences) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (const KvDtype dtype : {KvDtype::kBF16, KvDtype::kNVFP4}) {
    DecodeCase c;
    c.dtype = dtype;
    c.layout = KvLayout::kNHD;
    c.num_kv_heads = 8;
    c.num_q_heads = 32;
    c.tokens_per_block = 64;
    c.kv_lens = {4099, 1, 2048, 777, 3001, 64};
    SCOPED_TRACE(c.Name());
    const DecodeProblem p(c);
    ExpectGpuMatchesCpu(RunDecodeGpu(p, -1), RunDecodeCpu(p, -1), p.max_abs_v, 2e-5, 2e-5);
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

Outputs RunMlaCpu(const MlaProblem& p, int splits) {
  std::vector<std::uint8_t> out(p.Rows() * MlaProblem::kLatent * ActDtypeBytes(p.spec.out_dtype));
  std::vector<float> lse(p.Rows(), 0.0f);
  MlaDecodeArgs args = p.Args(out.data(), lse.data());
  if (splits >= 0) args.num_splits = splits;
  std::vector<float> ws(MlaDecodeWorkspaceBytes(args) / 4 + 4);
  const Status status = cpu::MlaDecode(args, Workspace{ws.data(), ws.size() * 4}, nullptr);
  return Outputs{status, testing::OutputValues(p.spec.out_dtype, out), lse};
}

Outputs RunMlaGpu(const MlaProblem& p, int splits) {
  const DevicePool pool(p.pool);
  const DeviceBuffer kv_lens(p.tables.kv_lens);
  const DeviceBuffer table(p.tables.block_table);
  const DeviceBuffer q_nope(p.q_nope);
  const DeviceBuffer q_rope(p.q_rope);
  const DeviceBuffer out(p.Rows() * MlaProblem::kLatent * ActDtypeBytes(p.spec.out_dtype));
  const DeviceBuffer lse(p.Rows() * sizeof(float));
  MlaDecodeArgs args = p.Args(out.data(), static_cast<float*>(lse.data()));
  if (splits >= 0) args.num_splits = splits;
  args.pool = pool.view;
  args.kv_lens = static_cast<const std::int32_t*>(kv_lens.data());
  args.block_table = static_cast<const std::int32_t*>(table.data());
  args.q_nope = q_nope.data();
  args.q_rope = q_rope.data();
  const std::size_t ws_bytes = MlaDecodeWorkspaceBytes(args);
  const DeviceBuffer ws(ws_bytes);
  const Status status = cuda::LaunchMlaDecode(args, Workspace{ws.data(), ws_bytes}, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return Outputs{status, testing::OutputValues(p.spec.out_dtype, out.Download<std::uint8_t>()),
                 lse.Download<float>()};
}

constexpr double kMlaOutTolerance = 1e-2;
constexpr double kMlaLseTolerance = 5e-3;

TEST(MlaDecodeGpu, MatchesCpuOnTheSweep) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (const MlaCase& c : testing::MlaSweepCases()) {
    SCOPED_TRACE(c.Name());
    const MlaProblem p(c);
    ExpectGpuMatchesCpu(RunMlaGpu(p, -1), RunMlaCpu(p, -1), p.max_abs_v, kMlaOutTolerance,
                        kMlaLseTolerance);
  }
}

TEST(MlaDecodeGpu, SplitCountsAgree) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  MlaCase c;
  c.dtype = KvDtype::kFP8;
  c.num_heads = 16;
  c.q_len = 2;
  c.kv_lens = {1200, 9, 700};
  const MlaProblem p(c);
  const Outputs cpu = RunMlaCpu(p, 1);
  for (const int splits : {1, 3, 40}) {
    SCOPED_TRACE(splits);
    ExpectGpuMatchesCpu(RunMlaGpu(p, splits), cpu, p.max_abs_v, kMlaOutTolerance, kMlaLseTolerance);
  }
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

}  // namespace
}  // namespace kvmesh
