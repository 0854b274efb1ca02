// The CUDA decode-attention, split-combine and MLA kernels' device code (kernels/cuda/*.cuh), run
// on the CPU through the emulation of cuda_emulation.h (threads as fibers, warp collectives,
// barriers, cp.async groups, ldmatrix, mma.sync), against the CPU twins within the GPU test's
// tolerances (attention_compare_util.h), over the sweeps the GPU test runs (attention_test_util.h).
// The host code that prepares a launch is the launcher's own (MakeDecodeLaunch, MakeMlaLaunch,
// DispatchDecode). Label cpu: on machines without a GPU this is the only execution the kernels get;
// a wrong fragment index, a missing barrier or wait, or a read of unwritten shared memory shows
// here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/kernels/cuda_emulation.h"
// The device code, compiled as C++ against the emulation above.
#include "kernels/cuda/decode_attention.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "tests/kernels/attention_compare_util.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::AttentionOutputs;
using testing::DecodeCase;
using testing::DecodeProblem;
using testing::EmulatedLaunch;
using testing::EmulateGrid;
using testing::EmulateKernel;
using testing::MlaCase;
using testing::MlaProblem;

// Longest sequence the emulated sweeps keep (the GPU test runs up to 1100 tokens; a fiber switch
// per lane per shuffle makes each emulated key cost microseconds).
constexpr int kMaxEmulatedKeys = 160;

template <typename Case>
Case Shortened(Case c) {
  for (int& len : c.kv_lens) len = std::max(std::min(len, kMaxEmulatedKeys), c.q_len);
  return c;
}

Status EmulateCombine(const cuda::attention::CombineParams& c) {
  // No collectives: every thread in turn.
  return EmulateGrid(&cuda::attention::CombineSplitsKernel<cuda::attention::kCombineThreads>, c,
                     static_cast<unsigned int>(c.layout.rows), 1, cuda::attention::kCombineThreads,
                     false);
}

// What cuda::LaunchDecodeAttention does, with the kernels emulated.
Status EmulateDecodeAttention(const DecodeAttentionArgs& args, Workspace ws) {
  KVMESH_RETURN_IF_ERROR(CanImplementDecodeAttention(args, ws));
  if (args.num_seqs == 0) return Status::Ok();
  KVMESH_ASSIGN_OR_RETURN(const cuda::decode::DecodeLaunch launch,
                          cuda::decode::MakeDecodeLaunch(args, ws));
  KVMESH_RETURN_IF_ERROR(cuda::decode::DispatchDecode(
      launch.instance, [&]<int kHeadDim, cuda::decode::Codec kCodec, int kRows>() {
        return EmulateKernel(
            &cuda::decode::DecodeAttentionKernel<kHeadDim, kCodec, kRows>, launch.params,
            EmulatedLaunch{
                launch.grid_x, launch.grid_y, cuda::decode::kThreads,
                static_cast<std::size_t>(cuda::decode::SharedBytesOf<kHeadDim, kCodec, kRows>())});
      }));
  return launch.needs_combine ? EmulateCombine(launch.combine) : Status::Ok();
}

Status EmulateMlaDecode(const MlaDecodeArgs& args, Workspace ws) {
  KVMESH_RETURN_IF_ERROR(CanImplementMlaDecode(args, ws));
  if (args.num_seqs == 0) return Status::Ok();
  KVMESH_ASSIGN_OR_RETURN(const cuda::mla::MlaLaunch launch, cuda::mla::MakeMlaLaunch(args, ws));
  const auto run = [&]<bool kFp8>() {
    return EmulateKernel(&cuda::mla::MlaDecodeKernel<kFp8>, launch.params,
                         EmulatedLaunch{launch.grid_x, launch.grid_y, cuda::mla::kThreads,
                                        cuda::mla::MlaShape<kFp8>::kSharedBytes});
  };
  KVMESH_RETURN_IF_ERROR(launch.fp8 ? run.template operator()<true>()
                                    : run.template operator()<false>());
  return launch.needs_combine ? EmulateCombine(launch.combine) : Status::Ok();
}

AttentionOutputs RunDecodeEmulated(const DecodeProblem& p, int splits) {
  std::vector<std::uint8_t> out(p.Rows() * p.spec.head_dim * ActDtypeBytes(p.spec.out_dtype), 0xFF);
  std::vector<float> lse(p.Rows(), 0.0f);
  DecodeAttentionArgs args = p.Args(out.data(), lse.data());
  if (splits >= 0) args.num_splits = splits;
  std::vector<float> ws(DecodeAttentionWorkspaceBytes(args) / 4 + 4);
  const Status status = EmulateDecodeAttention(args, Workspace{ws.data(), ws.size() * 4});
  return AttentionOutputs{status, testing::OutputValues(p.spec.out_dtype, out), lse};
}

AttentionOutputs RunMlaEmulated(const MlaProblem& p, int splits) {
  std::vector<std::uint8_t> out(p.Rows() * MlaProblem::kLatent * ActDtypeBytes(p.spec.out_dtype),
                                0xFF);
  std::vector<float> lse(p.Rows(), 0.0f);
  MlaDecodeArgs args = p.Args(out.data(), lse.data());
  if (splits >= 0) args.num_splits = splits;
  std::vector<float> ws(MlaDecodeWorkspaceBytes(args) / 4 + 4);
  const Status status = EmulateMlaDecode(args, Workspace{ws.data(), ws.size() * 4});
  return AttentionOutputs{status, testing::OutputValues(p.spec.out_dtype, out), lse};
}

TEST(DecodeAttentionEmulation, MatchesCpuOnTheSweep) {
  for (const DecodeCase& sweep_case : testing::DecodeSweepCases()) {
    const DecodeCase c = Shortened(sweep_case);
    SCOPED_TRACE(c.Name());
    const DecodeProblem p(c);
    testing::ExpectMatchesCpu(RunDecodeEmulated(p, -1), testing::RunDecodeCpu(p, -1), p.max_abs_v,
                              testing::DecodeOutTolerance(c.out_dtype),
                              testing::kDecodeLseTolerance);
  }
}

TEST(DecodeAttentionEmulation, NegativeInfinityScoreIsNotVisible) {
  for (const KvDtype dtype : {KvDtype::kBF16, KvDtype::kFP16}) {
    for (const int splits : {1, 3}) {
      DecodeCase c;
      c.dtype = dtype;
      c.q_dtype = dtype == KvDtype::kBF16 ? ActDtype::kBF16 : ActDtype::kFP16;
      c.head_dim = 64;
      c.num_kv_heads = 2;
      c.num_q_heads = 4;
      c.kv_lens = {40, 7, 130};
      c.num_splits = splits;
      SCOPED_TRACE(c.Name());
      DecodeProblem p(c);
      testing::PlantNegativeInfinityKeys(p);
      testing::ExpectMatchesCpu(RunDecodeEmulated(p, -1), testing::RunDecodeCpu(p, -1), p.max_abs_v,
                                testing::DecodeOutTolerance(c.out_dtype),
                                testing::kDecodeLseTolerance);
    }
  }
}

TEST(MlaDecodeEmulation, MatchesCpuOnTheSweep) {
  for (const MlaCase& sweep_case : testing::MlaSweepCases()) {
    const MlaCase c = Shortened(sweep_case);
    SCOPED_TRACE(c.Name());
    const MlaProblem p(c);
    testing::ExpectMatchesCpu(RunMlaEmulated(p, -1), testing::RunMlaCpu(p, -1), p.max_abs_v,
                              testing::kMlaOutTolerance, testing::kMlaLseTolerance);
  }
}

}  // namespace
}  // namespace kvmesh
