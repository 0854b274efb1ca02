// The backend objects (kernels/backend.h): the CPU backend runs every kernel exactly as the CPU
// twins do (same bytes), returns their errors, and has nothing to synchronise; MakeCudaBackend
// gives kNotSupported without CUDA and kCudaError for a device that does not exist (the CUDA
// backend itself is exercised by tests/kernels/append_kv_gpu_test.cu, label gpu).
#include "kernels/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/thread_pool.h"
#include "tests/kernels/append_kv_test_util.h"

namespace kvmesh {
namespace {

using testing::AppendBatch;
using testing::AppendInputs;
using testing::HostPool;
using testing::MakeAppendBatch;
using testing::MakeArgs;
using testing::MakeInputs;

KvPoolGeometry SmallGqa(KvDtype dtype) {
  KvPoolGeometry g;
  g.dtype = dtype;
  g.num_layers = 2;
  g.num_kv_heads = 2;
  g.tokens_per_block = 16;
  g.head_dim = 64;
  return g;
}

TEST(Backend, Names) {
  EXPECT_EQ(BackendKindName(BackendKind::kCpu), "cpu");
  EXPECT_EQ(BackendKindName(BackendKind::kCuda), "cuda");
  EXPECT_EQ(ActDtypeName(ActDtype::kFP32), "fp32");
  EXPECT_EQ(ActDtypeName(ActDtype::kBF16), "bf16");
  EXPECT_EQ(ActDtypeName(ActDtype::kFP16), "fp16");
}

TEST(CpuBackend, AppendAndCopyEqualTheCpuTwins) {
  ThreadPool executor(2);
  const std::unique_ptr<KernelBackend> backend = MakeCpuBackend(&executor);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->kind(), BackendKind::kCpu);
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4}) {
    const KvPoolLayout layout = MakeKvPoolLayout(SmallGqa(dtype)).value();
    const AppendBatch b = MakeAppendBatch({5, 40}, {11, 0}, 16, 12, 1);
    HostPool via_backend(layout, 12, 200.0f, 2);
    HostPool direct(via_backend);
    const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 3);

    ASSERT_TRUE(
        backend->AppendKv(MakeArgs(via_backend.view, b, in, ActDtype::kBF16, 1, false)).ok());
    ASSERT_TRUE(
        cpu::AppendKv(MakeArgs(direct.view, b, in, ActDtype::kBF16, 1, false), nullptr).ok());

    // Copy sequence 1's first two blocks over two blocks nobody uses, the first 9 tokens, NHD.
    std::vector<std::int64_t> unused;
    for (std::int64_t id = 0; id < 12; ++id) {
      if (std::find(b.block_table.begin(), b.block_table.end(), id) == b.block_table.end()) {
        unused.push_back(id);
      }
    }
    const std::int32_t* seq1 = b.block_table.data() + b.max_blocks_per_seq;
    const BlockCopyPair pairs[] = {{seq1[0], unused[0]}, {seq1[1], unused[1]}};
    BlockCopyArgs copy;
    copy.src = copy.dst = via_backend.view;
    copy.pairs = pairs;
    copy.num_pairs = 2;
    copy.num_tokens = 9;
    ASSERT_TRUE(backend->BlockCopy(copy).ok());
    copy.src = copy.dst = direct.view;
    ASSERT_TRUE(cpu::BlockCopy(copy, nullptr).ok());
    ASSERT_TRUE(backend->Synchronize().ok());
    for (int c = 0; c < kNumKvComponents; ++c) {
      EXPECT_EQ(via_backend.storage[c], direct.storage[c]) << KvDtypeName(dtype) << " " << c;
    }
  }
}

TEST(CpuBackend, ReturnsTheTwinsErrors) {
  const std::unique_ptr<KernelBackend> backend = MakeCpuBackend(nullptr);
  const KvPoolLayout layout = MakeKvPoolLayout(SmallGqa(KvDtype::kFP8)).value();
  AppendBatch b = MakeAppendBatch({3}, {0}, 16, 4, 1);
  b.block_table[0] = 4;  // out of range
  HostPool pool(layout, 4, 1.0f, 2);
  HostPool before(pool);
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kFP32, false, 3);
  EXPECT_EQ(backend->AppendKv(MakeArgs(pool.view, b, in, ActDtype::kFP32, 0, false)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.storage[0], before.storage[0]);
  AppendIndexKArgs index;
  index.pool = pool.view;
  EXPECT_EQ(backend->AppendIndexK(index).code(), StatusCode::kInvalidArgument);
  const BlockCopyPair self[] = {{1, 1}};
  BlockCopyArgs copy;
  copy.src = copy.dst = pool.view;
  copy.pairs = self;
  copy.num_pairs = 1;
  EXPECT_EQ(backend->BlockCopy(copy).code(), StatusCode::kInvalidArgument);
}

// Decode attention and MLA decode through the backend: the same bytes as the CPU twins.
TEST(CpuBackend, AttentionEqualsTheCpuTwins) {
  ThreadPool executor(2);
  const std::unique_ptr<KernelBackend> backend = MakeCpuBackend(&executor);
  const KvPoolLayout layout = MakeKvPoolLayout(SmallGqa(KvDtype::kFP8)).value();
  const AppendBatch b = MakeAppendBatch({37}, {0}, 16, 6, 4);
  HostPool pool(layout, 6, 1.0f, 5);
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kFP32, false, 6);
  ASSERT_TRUE(backend->AppendKv(MakeArgs(pool.view, b, in, ActDtype::kFP32, 0, false)).ok());

  const std::vector<float> q = testing::MakeInputValues(2 * 4, 64, 7);
  const std::vector<std::int32_t> kv_lens = {37};
  DecodeAttentionArgs a;
  a.pool = pool.view;
  a.num_seqs = 1;
  a.q_len = 2;
  a.num_q_heads = 4;
  a.kv_lens = kv_lens.data();
  a.block_table = b.block_table.data();
  a.max_blocks_per_seq = b.max_blocks_per_seq;
  a.q_dtype = ActDtype::kFP32;
  a.q = q.data();
  a.softmax_scale = 0.125f;
  a.num_splits = 2;
  std::vector<float> out_backend(2 * 4 * 64), out_direct(2 * 4 * 64);
  std::vector<std::uint8_t> workspace(DecodeAttentionWorkspaceBytes(a) + 16);
  void* aligned =
      workspace.data() + (16 - reinterpret_cast<std::uintptr_t>(workspace.data()) % 16) % 16;
  const Workspace ws{aligned, DecodeAttentionWorkspaceBytes(a)};
  a.out = out_backend.data();
  const Status s = backend->DecodeAttention(a, ws);
  ASSERT_TRUE(s.ok()) << s;
  a.out = out_direct.data();
  ASSERT_TRUE(cpu::DecodeAttention(a, ws, &executor).ok());
  EXPECT_EQ(std::memcmp(out_backend.data(), out_direct.data(), out_backend.size() * 4), 0);

  // MLA: one latent head of 576 in a bf16 pool.
  KvPoolGeometry g;
  g.num_layers = 1;
  g.kv_factor = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = 16;
  g.head_dim = 576;
  const KvPoolLayout mla_layout = MakeKvPoolLayout(g).value();
  HostPool mla(mla_layout, 6, 1.0f, 8);
  const AppendInputs latent = MakeInputs(mla_layout.data(), b, ActDtype::kFP32, false, 9);
  ASSERT_TRUE(backend->AppendKv(MakeArgs(mla.view, b, latent, ActDtype::kFP32, 0, false)).ok());
  const std::vector<float> q_nope = testing::MakeInputValues(3, 512, 10);
  const std::vector<float> q_rope = testing::MakeInputValues(3, 64, 11);
  MlaDecodeArgs m;
  m.pool = mla.view;
  m.num_seqs = 1;
  m.num_heads = 3;
  m.kv_lens = kv_lens.data();
  m.block_table = b.block_table.data();
  m.max_blocks_per_seq = b.max_blocks_per_seq;
  m.q_dtype = ActDtype::kFP32;
  m.q_nope = q_nope.data();
  m.q_rope = q_rope.data();
  m.softmax_scale = 0.07f;
  std::vector<float> mla_backend(3 * 512), mla_direct(3 * 512);
  std::vector<std::uint8_t> mla_workspace(MlaDecodeWorkspaceBytes(m) + 16);
  void* mla_aligned = mla_workspace.data() +
                      (16 - reinterpret_cast<std::uintptr_t>(mla_workspace.data()) % 16) % 16;
  const Workspace mws{mla_aligned, MlaDecodeWorkspaceBytes(m)};
  m.out = mla_backend.data();
  const Status ms = backend->MlaDecode(m, mws);
  ASSERT_TRUE(ms.ok()) << ms;
  m.out = mla_direct.data();
  ASSERT_TRUE(cpu::MlaDecode(m, mws, &executor).ok());
  EXPECT_EQ(std::memcmp(mla_backend.data(), mla_direct.data(), mla_backend.size() * 4), 0);
}

// Without a device (this CI machine) the CUDA backend cannot be made: kNotSupported when built
// without CUDA, kCudaError when built with it. With a device, device 0 works.
TEST(CudaBackend, FactoryCodes) {
  Result<std::unique_ptr<KernelBackend>> made = MakeCudaBackend(0);
#if defined(KVMESH_HAVE_CUDA)
  if (made.ok()) {
    EXPECT_EQ(made.value()->kind(), BackendKind::kCuda);
    EXPECT_TRUE(made.value()->Synchronize().ok());
  } else {
    EXPECT_EQ(made.status().code(), StatusCode::kCudaError) << made.status();
    EXPECT_FALSE(made.status().message().empty());
  }
  const auto missing = MakeCudaBackend(4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kCudaError) << missing.status();
#else
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kNotSupported) << made.status();
#endif
}

}  // namespace
}  // namespace kvmesh
