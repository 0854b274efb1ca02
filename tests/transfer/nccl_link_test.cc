// NcclLink (transfer/nccl_link.h) between two GPUs of this host, one thread per rank: scattered
// blocks of a pool-like buffer on device 0 land in other scattered blocks on device 1, byte for
// byte; a rank whose peer never joins, and a send nobody receives, end at their deadlines with the
// communicator aborted. Labelled multigpu (and gpu): skips on hosts with fewer than 2 GPUs; a bad
// unique id is refused on any host.
#include "transfer/nccl_link.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace kvmesh {
namespace {

using namespace std::chrono_literals;

int CudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  (void)cudaGetLastError();
  return count;
}

#define SKIP_WITHOUT_TWO_GPUS() \
  if (CudaDevices() < 2) GTEST_SKIP() << "needs 2 CUDA devices, this host has " << CudaDevices()

struct DeviceBuffer {
  DeviceBuffer(int device, std::size_t bytes) : device(device) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
  }
  ~DeviceBuffer() {
    (void)cudaSetDevice(device);
    (void)cudaFree(ptr);
  }
  int device;
  void* ptr = nullptr;
};

std::byte* At(void* base, std::size_t offset) { return static_cast<std::byte*>(base) + offset; }

TEST(NcclLinkTest, RefusesABadUniqueIdOnAnyHost) {
  Result<std::unique_ptr<NcclLink>> l = NcclLink::Create("too short", 0, 0, 100ms);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << l.status();
  l = NcclLink::Create(std::string(NCCL_UNIQUE_ID_BYTES, '\0'), 2, 0, 100ms);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << l.status();
}

TEST(NcclLinkTest, ScatteredBlocksMoveBetweenTwoGpus) {
  SKIP_WITHOUT_TWO_GPUS();
  constexpr std::size_t kBlock = 256u << 10;
  constexpr std::size_t kBlocks = 64;
  constexpr std::size_t kMoved = 24;
  DeviceBuffer src(0, kBlock * kBlocks);
  DeviceBuffer dst(1, kBlock * kBlocks);
  std::vector<std::uint8_t> host(kBlock * kBlocks);
  for (std::size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<std::uint8_t>(i * 7 + i / 4099);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst.ptr, 0xA5, host.size()), cudaSuccess);
  // Block 5k+3 of the source goes to block 63-2k of the destination.
  std::vector<DeviceSlice> from, to;
  for (std::size_t k = 0; k < kMoved; ++k) {
    from.push_back({At(src.ptr, ((5 * k + 3) % kBlocks) * kBlock), kBlock});
    to.push_back({At(dst.ptr, (kBlocks - 1 - 2 * k) * kBlock), kBlock});
  }
  Result<std::string> id = NcclLink::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  Status sent, received;
  std::thread receiver([&] {
    auto link = NcclLink::Create(*id, 1, 1, 20s);
    if (!link.ok()) {
      received = link.status();
      return;
    }
    cudaStream_t s = nullptr;
    (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    received = (*link)->Receive(to, s);
    if (received.ok()) received = (*link)->Wait(s, 20s);
    (void)cudaStreamDestroy(s);
  });
  {
    auto link = NcclLink::Create(*id, 0, 0, 20s);
    if (!link.ok()) {
      sent = link.status();
    } else {
      cudaStream_t s = nullptr;
      (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      sent = (*link)->Send(from, s);
      if (sent.ok()) sent = (*link)->Wait(s, 20s);
      (void)cudaStreamDestroy(s);
    }
  }
  receiver.join();
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(received.ok()) << received;
  std::vector<std::uint8_t> back(host.size());
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<bool> written(kBlocks, false);
  for (std::size_t k = 0; k < kMoved; ++k) {
    const std::size_t s = (5 * k + 3) % kBlocks, d = kBlocks - 1 - 2 * k;
    written[d] = true;
    EXPECT_EQ(std::memcmp(back.data() + d * kBlock, host.data() + s * kBlock, kBlock), 0)
        << "block " << s << " -> " << d;
  }
  for (std::size_t d = 0; d < kBlocks; ++d) {
    if (written[d]) continue;
    for (std::size_t i = 0; i < kBlock; ++i) {
      ASSERT_EQ(back[d * kBlock + i], 0xA5) << "block " << d << " was not a destination";
    }
  }
}

TEST(NcclLinkTest, APeerThatNeverJoinsTimesOut) {
  SKIP_WITHOUT_TWO_GPUS();
  Result<std::string> id = NcclLink::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const auto start = std::chrono::steady_clock::now();
  auto link = NcclLink::Create(*id, 0, 0, 500ms);
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.status().code(), StatusCode::kTimedOut) << link.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(NcclLinkTest, ASendNobodyReceivesIsAbortedAtItsDeadline) {
  SKIP_WITHOUT_TWO_GPUS();
  DeviceBuffer src(0, 1 << 20);
  Result<std::string> id = NcclLink::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::unique_ptr<NcclLink> other;
  std::thread joiner([&] {
    auto l = NcclLink::Create(*id, 1, 1, 20s);
    if (l.ok()) other = std::move(*l);
  });
  auto link = NcclLink::Create(*id, 0, 0, 20s);
  joiner.join();
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_NE(other, nullptr);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<DeviceSlice> slices = {{src.ptr, 1 << 20}};
  ASSERT_TRUE((*link)->Send(slices, s).ok());
  const Status st = (*link)->Wait(s, 300ms);
  EXPECT_EQ(st.code(), StatusCode::kTimedOut) << st;
  EXPECT_TRUE((*link)->aborted());
  EXPECT_EQ((*link)->Send(slices, s).code(), StatusCode::kFailedPrecondition);
  link->reset();  // aborted: nothing waits
  other.reset();  // its finalize cannot complete with rank 0 gone: aborted after its bound
  (void)cudaStreamDestroy(s);
}

}  // namespace
}  // namespace kvmesh
