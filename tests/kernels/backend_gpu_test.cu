// The CUDA backend object (kernels/backend.h): made on device 0, it runs append and block copy on
// its own stream with the same bytes as the CPU twins, Synchronize() waits for them, and a device
// that does not exist is kCudaError. Its memory operations: Allocate gives device memory (freed
// with the buffer), Upload has completed when it returns (the source may be overwritten at once),
// Download has filled its destination once Synchronize() returns; and an append whose pool and
// arguments were allocated and uploaded through the backend (the synthetic engine's path) writes
// the CPU backend's bytes.
//
// Label gpu: skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/backend.h"
#include "tests/kernels/append_kv_test_util.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvmesh {
namespace {

using testing::AppendBatch;
using testing::AppendInputs;
using testing::CudaPool;
using testing::DeviceArrays;
using testing::ExpectSameComponents;
using testing::HostPool;
using testing::MakeAppendBatch;
using testing::MakeArgs;
using testing::MakeInputs;
using testing::SmallGeometry;

TEST(CudaBackendGpu, RunsAppendAndCopyLikeTheCpuTwins) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  auto backend = MakeCudaBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  KernelBackend& cuda = *backend.value();
  EXPECT_EQ(cuda.kind(), BackendKind::kCuda);

  const KvPoolLayout layout =
      MakeKvPoolLayout(SmallGeometry(KvDtype::kNVFP4, KvLayout::kNHD, 4, 16, 64)).value();
  const AppendBatch b = MakeAppendBatch({20, 5}, {3, 0}, 16, 10, 12);
  HostPool host(layout, 10, 100.0f, 13);
  CudaPool device(host.view);
  const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 14);
  ASSERT_TRUE(cpu::AppendKv(MakeArgs(host.view, b, in, ActDtype::kBF16, 1, false), nullptr).ok());
  // Copy sequence 0's two blocks into two blocks no sequence uses.
  std::vector<std::int64_t> unused;
  for (std::int64_t id = 0; id < 10; ++id) {
    if (std::find(b.block_table.begin(), b.block_table.end(), id) == b.block_table.end()) {
      unused.push_back(id);
    }
  }
  ASSERT_GE(unused.size(), 2u);
  const BlockCopyPair pairs[] = {{b.block_table[0], unused[0]}, {b.block_table[1], unused[1]}};
  BlockCopyArgs copy;
  copy.src = copy.dst = host.view;
  copy.pairs = pairs;
  copy.num_pairs = 2;
  ASSERT_TRUE(cpu::BlockCopy(copy, nullptr).ok());

  const DeviceArrays arrays(b, in.encoded, 2, 0);
  AppendKvArgs a = MakeArgs(device.view, b, in, ActDtype::kBF16, 1, false);
  a.cu_tokens = arrays.cu();
  a.start_pos = arrays.start();
  a.block_table = arrays.table();
  a.k = arrays.input(0);
  a.v = arrays.input(1);
  ASSERT_TRUE(cuda.AppendKv(a).ok());
  copy.src = copy.dst = device.view;
  ASSERT_TRUE(cuda.BlockCopy(copy).ok());
  ASSERT_TRUE(cuda.Synchronize().ok());
  ExpectSameComponents(device, host);
}

// Review finding: uploads went through pageable cudaMemcpy on the legacy stream and the kernels ran
// on the backend's non-blocking stream, which does not wait for it. The tests' upload
// (cuda_test_util.h) returns only when the device holds the bytes: nothing is left pending on the
// legacy stream, and a non-blocking stream reads the last bytes at once. (Without the wait the
// legacy stream is usually still busy with the last DMA chunk of a 64 MiB pageable copy here.)
TEST(CudaBackendGpu, UploadsAreCompleteWhenTheyReturn) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  std::vector<std::uint8_t> host(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) host[i] = static_cast<std::uint8_t>(i * 131 + 7);
  testing::CudaBuffer device(kBytes);
  testing::CopyToBuffer(device, host.data(), kBytes);
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  testing::CudaBuffer tail(4096, testing::CudaBuffer::Kind::kPinnedHost);
  ASSERT_EQ(cudaMemcpyAsync(tail.get(), device.as<std::uint8_t>() + kBytes - 4096, 4096,
                            cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::memcmp(tail.get(), host.data() + kBytes - 4096, 4096), 0);
  (void)cudaStreamDestroy(s);
}

TEST(CudaBackendGpu, AllocatesDeviceMemoryAndFreesIt) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status();
  KernelBackend& cuda = *made.value();
  EXPECT_FALSE(cuda.host_addressable());
  {
    Result<BackendBuffer> small = cuda.Allocate(1000);
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ(small->size(), 1000u);
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, small->data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
    EXPECT_EQ(attr.device, 0);
  }
  Result<BackendBuffer> empty = cuda.Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  // The buffer's memory goes back to the device when it dies.
  constexpr std::size_t kBig = std::size_t{512} << 20;
  std::size_t free_before = 0, free_during = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  {
    Result<BackendBuffer> big = cuda.Allocate(kBig);
    ASSERT_TRUE(big.ok()) << big.status();
    ASSERT_EQ(cudaMemGetInfo(&free_during, &total), cudaSuccess);
  }
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_LE(free_during + kBig, free_before + (std::size_t{64} << 20));
  EXPECT_GE(free_after + (std::size_t{64} << 20), free_before);
  // More than any device has.
  const Result<BackendBuffer> huge = cuda.Allocate(std::size_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status();
  // The failure is reported once: the next call works.
  EXPECT_TRUE(cuda.Allocate(64).ok());
  EXPECT_TRUE(cuda.Synchronize().ok());
}

TEST(CudaBackendGpu, UploadIsCompleteOnReturnAndDownloadOnSynchronize) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status();
  KernelBackend& cuda = *made.value();
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  // A pinned source: the DMA engine reads it asynchronously, so only Upload's wait keeps the
  // overwrite below from reaching the device.
  testing::CudaBuffer pinned(kBytes, testing::CudaBuffer::Kind::kPinnedHost);
  ASSERT_NE(pinned.get(), nullptr);
  auto* src = pinned.as<std::uint8_t>();
  for (std::size_t i = 0; i < kBytes; ++i) src[i] = static_cast<std::uint8_t>(i * 131 + 7);
  const std::vector<std::uint8_t> sent(src, src + kBytes);
  Result<BackendBuffer> device = cuda.Allocate(kBytes);
  ASSERT_TRUE(device.ok()) << device.status();
  ASSERT_TRUE(cuda.Upload(device->data(), src, kBytes).ok());
  std::memset(src, 0, kBytes);
  // Into pageable memory, and into the (now zero) pinned buffer.
  std::vector<std::uint8_t> back(kBytes);
  ASSERT_TRUE(cuda.Download(back.data(), device->data(), kBytes).ok());
  ASSERT_TRUE(cuda.Download(src, device->data(), kBytes).ok());
  ASSERT_TRUE(cuda.Synchronize().ok());
  EXPECT_EQ(testing::FirstDifferentByte(back, sent), -1);
  EXPECT_EQ(std::memcmp(src, sent.data(), kBytes), 0);
  // A pageable source, at an offset.
  std::vector<std::uint8_t> pageable(4097, 0x5a);
  ASSERT_TRUE(
      cuda.Upload(static_cast<std::uint8_t*>(device->data()) + 3, pageable.data(), 4097).ok());
  std::vector<std::uint8_t> part(4097);
  ASSERT_TRUE(
      cuda.Download(part.data(), static_cast<std::uint8_t*>(device->data()) + 3, 4097).ok());
  ASSERT_TRUE(cuda.Synchronize().ok());
  EXPECT_EQ(part, pageable);
  EXPECT_EQ(cuda.Upload(nullptr, src, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda.Download(src, nullptr, 1).code(), StatusCode::kInvalidArgument);
}

// The pool and every argument of an append allocated and uploaded through a backend, the append
// run, the pool downloaded: the same code on the CPU and the CUDA backend, the same bytes.
std::vector<std::vector<std::uint8_t>> AppendThroughBackend(KernelBackend& backend,
                                                            const HostPool& initial,
                                                            const AppendBatch& b,
                                                            const AppendInputs& in) {
  std::vector<std::vector<std::uint8_t>> out(kNumKvComponents);
  std::vector<BackendBuffer> keep;
  auto upload = [&](const void* src, std::size_t bytes) -> void* {
    Result<BackendBuffer> buf = backend.Allocate(bytes);
    EXPECT_TRUE(buf.ok()) << buf.status();
    if (!buf.ok()) return nullptr;
    EXPECT_TRUE(backend.Upload(buf->data(), src, bytes).ok());
    keep.push_back(std::move(buf).value());
    return keep.back().data();
  };
  KvPoolView view = initial.view;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!view.layout.components[c].present()) continue;
    view.base[c] = upload(initial.storage[c].data(), initial.storage[c].size());
  }
  AppendKvArgs a = MakeArgs(view, b, in, ActDtype::kBF16, 1, false);
  if (!backend.host_addressable()) {
    a.cu_tokens =
        static_cast<const std::int32_t*>(upload(b.cu_tokens.data(), b.cu_tokens.size() * 4));
    a.start_pos =
        static_cast<const std::int32_t*>(upload(b.start_pos.data(), b.start_pos.size() * 4));
    a.block_table =
        static_cast<const std::int32_t*>(upload(b.block_table.data(), b.block_table.size() * 4));
    a.k = upload(in.encoded[0].data(), in.encoded[0].size());
    a.v = upload(in.encoded[1].data(), in.encoded[1].size());
  }
  const Status appended = backend.AppendKv(a);
  EXPECT_TRUE(appended.ok()) << appended;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!view.layout.components[c].present()) continue;
    out[c].resize(initial.storage[c].size());
    EXPECT_TRUE(backend.Download(out[c].data(), view.base[c], out[c].size()).ok());
  }
  const Status synced = backend.Synchronize();
  EXPECT_TRUE(synced.ok()) << synced;
  return out;
}

TEST(CudaBackendGpu, AppendWithUploadedArgumentsEqualsTheCpuBackend) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  auto made = MakeCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status();
  ThreadPool executor(2);
  const std::unique_ptr<KernelBackend> cpu_backend = MakeCpuBackend(&executor);
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4}) {
    SCOPED_TRACE(KvDtypeName(dtype));
    const KvPoolLayout layout =
        MakeKvPoolLayout(SmallGeometry(dtype, KvLayout::kHND, 2, 16, 64)).value();
    const AppendBatch b = MakeAppendBatch({7, 17, 1}, {3, 0, 40}, 16, 12, 21);
    const HostPool initial(layout, 12, 50.0f, 22);
    const AppendInputs in = MakeInputs(layout.data(), b, ActDtype::kBF16, false, 23);
    const auto want = AppendThroughBackend(*cpu_backend, initial, b, in);
    const auto got = AppendThroughBackend(*made.value(), initial, b, in);
    for (int c = 0; c < kNumKvComponents; ++c) {
      EXPECT_EQ(testing::FirstDifferentByte(got[c], want[c]), -1) << "component " << c;
    }
  }
}

TEST(CudaBackendGpu, MissingDeviceIsCudaError) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  const auto missing = MakeCudaBackend(4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kCudaError) << missing.status();
}

}  // namespace
}  // namespace kvmesh
