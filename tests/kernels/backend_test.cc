// The backend objects (kernels/backend.h): the CPU backend runs every kernel exactly as the CPU
// twins do (same bytes), returns their errors, and has nothing to synchronise; its memory
// operations (Allocate, Upload, Download) give aligned host buffers and exact copies, and engine
// code that uploads its arguments through them gets the twins' bytes; MakeCudaBackend gives
// kNotSupported without CUDA and kCudaError for a device that does not exist (the CUDA backend
// itself is exercised by tests/kernels/backend_gpu_test.cu, label gpu).
#include "kernels/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
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

TEST(BackendBuffer, ReleasesOnceWithItsDeviceAndMoves) {
  static int released = 0;
  static int released_device = 0;
  released = 0;
  const BackendBuffer::Release count = [](void* data, int device) noexcept {
    ++released;
    released_device = device;
    delete[] static_cast<std::uint8_t*>(data);
  };
  {
    BackendBuffer a(new std::uint8_t[8], 8, count, 3);
    EXPECT_EQ(a.size(), 8u);
    EXPECT_FALSE(a.empty());
    BackendBuffer b(std::move(a));
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved from is empty, by contract
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(b.size(), 8u);
    BackendBuffer c;
    c = std::move(b);
    EXPECT_EQ(released, 0);
    c = BackendBuffer(new std::uint8_t[4], 4, count, 5);  // frees the first one
    EXPECT_EQ(released, 1);
    EXPECT_EQ(released_device, 3);
  }
  EXPECT_EQ(released, 2);
  EXPECT_EQ(released_device, 5);
}

TEST(CpuBackend, AllocatesAlignedHostMemory) {
  const std::unique_ptr<KernelBackend> backend = MakeCpuBackend(nullptr);
  EXPECT_TRUE(backend->host_addressable());
  for (std::size_t bytes : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{1000}}) {
    Result<BackendBuffer> b = backend->Allocate(bytes);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->size(), bytes);
    ASSERT_NE(b->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b->data()) % 64, 0u) << bytes;
    std::memset(b->data(), 0xab, bytes);  // writable over its whole size (ASan checks it)
  }
  Result<BackendBuffer> empty = backend->Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->size(), 0u);
  const Result<BackendBuffer> huge = backend->Allocate(~std::size_t{0} - 8);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status();
}

TEST(CpuBackend, UploadAndDownloadRoundTrip) {
  const std::unique_ptr<KernelBackend> backend = MakeCpuBackend(nullptr);
  std::vector<std::uint8_t> host(4099);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint8_t>(i * 131 + 7);
  Result<BackendBuffer> buffer = backend->Allocate(host.size());
  ASSERT_TRUE(buffer.ok());
  ASSERT_TRUE(backend->Upload(buffer->data(), host.data(), host.size()).ok());
  const std::vector<std::uint8_t> sent = host;
  std::fill(host.begin(), host.end(), 0);  // the source may be reused once Upload returned
  std::vector<std::uint8_t> back(host.size());
  ASSERT_TRUE(backend->Download(back.data(), buffer->data(), back.size()).ok());
  ASSERT_TRUE(backend->Synchronize().ok());
  EXPECT_EQ(back, sent);
  // A part, at an offset.
  std::vector<std::uint8_t> part(100);
  ASSERT_TRUE(
      backend->Download(part.data(), static_cast<std::uint8_t*>(buffer->data()) + 17, part.size())
          .ok());
  ASSERT_TRUE(backend->Synchronize().ok());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), sent.begin() + 17));
  // Null pointers are refused unless nothing is copied.
  EXPECT_EQ(backend->Upload(nullptr, host.data(), 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->Download(back.data(), nullptr, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend->Upload(nullptr, nullptr, 0).ok());
  EXPECT_TRUE(backend->Download(nullptr, nullptr, 0).ok());
}

// Engine-shaped code (node/synthetic_engine.cc): pool and arguments allocated and uploaded through
// the backend, the append run on them, the pool downloaded — the CPU twin's bytes.
TEST(CpuBackend, AppendThroughUploadedArgumentsEqualsTheTwin) {
  ThreadPool executor(2);
  const std::unique_ptr<KernelBackend> backend = MakeCpuBackend(&executor);
  const KvPoolLayout layout = MakeKvPoolLayout(SmallGqa(KvDtype::kFP8)).value();
  const AppendBatch b = MakeAppendBatch({7, 17}, {3, 0}, 16, 8, 21);
  HostPool direct(layout, 8, 50.0f, 22);
  const HostPool initial(direct);
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 23);
  ASSERT_TRUE(cpu::AppendKv(MakeArgs(direct.view, b, in, ActDtype::kBF16, 1, false), nullptr).ok());

  auto upload = [&](const void* src, std::size_t bytes) {
    BackendBuffer buf = backend->Allocate(bytes).value();
    EXPECT_TRUE(backend->Upload(buf.data(), src, bytes).ok());
    return buf;
  };
  KvPoolView view = initial.view;
  std::vector<BackendBuffer> pool;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!layout.components[c].present()) continue;
    pool.push_back(upload(initial.storage[c].data(), initial.storage[c].size()));
    view.base[c] = pool.back().data();
  }
  const BackendBuffer cu = upload(b.cu_tokens.data(), b.cu_tokens.size() * 4);
  const BackendBuffer start = upload(b.start_pos.data(), b.start_pos.size() * 4);
  const BackendBuffer table = upload(b.block_table.data(), b.block_table.size() * 4);
  const BackendBuffer k = upload(in.encoded[0].data(), in.encoded[0].size());
  const BackendBuffer v = upload(in.encoded[1].data(), in.encoded[1].size());
  AppendKvArgs a = MakeArgs(view, b, in, ActDtype::kBF16, 1, false);
  a.cu_tokens = static_cast<const std::int32_t*>(cu.data());
  a.start_pos = static_cast<const std::int32_t*>(start.data());
  a.block_table = static_cast<const std::int32_t*>(table.data());
  a.k = k.data();
  a.v = v.data();
  ASSERT_TRUE(backend->AppendKv(a).ok());
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!layout.components[c].present()) continue;
    std::vector<std::uint8_t> got(direct.storage[c].size());
    ASSERT_TRUE(backend->Download(got.data(), view.base[c], got.size()).ok());
    ASSERT_TRUE(backend->Synchronize().ok());
    EXPECT_EQ(got, direct.storage[c]) << "component " << c;
  }
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
