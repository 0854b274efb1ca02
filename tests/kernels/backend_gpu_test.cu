// The CUDA backend object (kernels/backend.h): made on device 0, it runs append and block copy on
// its own stream with the same bytes as the CPU twins, Synchronize() waits for them, and a device
// that does not exist is kCudaError.
//
// Label gpu: skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

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

TEST(CudaBackendGpu, MissingDeviceIsCudaError) {
  KVMESH_SKIP_WITHOUT_CUDA_DEVICE();
  const auto missing = MakeCudaBackend(4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kCudaError) << missing.status();
}

}  // namespace
}  // namespace kvmesh
