// AttachedPools (node/attached_pools.h) on hand-written AttachResponses, without a node: a host
// pool in a memfd maps with device -1 and shares its bytes; a CUDA IPC description is checked
// before any CUDA call (handle and UUID lengths, components inside the object, the pool's device)
// and, where it cannot be opened (a build without CUDA, a machine without the device, a UUID no
// local device has), gives the documented error instead of crashing; the descriptors are closed on
// every path. Label cpu: with a device, the one CUDA case that reaches cudaIpcOpenMemHandle sees a
// handle no process exported, and still fails cleanly.
#include "node/attached_pools.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#if KVMESH_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kBlocks = 4;

// One bf16 K/V component: 2 layers, 2 heads, 16 tokens, 64 dims.
PagedTensorLayout DataLayout() {
  PagedTensorLayout l;
  l.order = KvLayout::kHND;
  l.num_layers = 2;
  l.kv_factor = 2;
  l.num_heads = 2;
  l.tokens_per_block = 16;
  l.inner = 64;
  l.bits = 16;
  return l;
}

std::uint64_t PoolBytes() {
  return static_cast<std::uint64_t>(DataLayout().BytesPerBlock()) * kBlocks;
}

// A pool whose data component is memory object `memory_index` at `offset`, on `device`.
void AddPool(rpc::AttachResponse& a, std::uint32_t memory_index, std::uint64_t offset, int device) {
  rpc::PoolDescriptor* d = a.add_pools();
  d->set_pool(a.pools_size() - 1);
  d->set_key("full/2x64");
  d->set_dtype(static_cast<std::uint32_t>(KvDtype::kBF16));
  d->set_num_blocks(kBlocks);
  d->set_pool_scale(1.0f);
  d->set_device(device);
  d->add_layers(0);
  d->add_layers(1);
  const PagedTensorLayout l = DataLayout();
  rpc::PoolComponentMemory* m = d->add_components();
  m->set_component(static_cast<std::uint32_t>(KvComponent::kData));
  m->set_memory_index(memory_index);
  m->set_offset(offset);
  m->set_bytes(PoolBytes());
  m->set_bytes_per_block(static_cast<std::uint64_t>(l.BytesPerBlock()));
  m->set_order(static_cast<std::uint32_t>(l.order));
  m->set_num_layers(l.num_layers);
  m->set_kv_factor(l.kv_factor);
  m->set_num_heads(l.num_heads);
  m->set_tokens_per_block(l.tokens_per_block);
  m->set_inner(l.inner);
  m->set_bits(l.bits);
}

void AddMemfd(rpc::AttachResponse& a, std::uint64_t bytes) {
  rpc::MemoryObject* mo = a.add_memory();
  mo->set_kind(rpc::MemoryObject::KIND_MEMFD);
  mo->set_bytes(bytes);
  mo->set_device(-1);
}

rpc::MemoryObject* AddCuda(rpc::AttachResponse& a, std::uint64_t bytes, int device) {
  rpc::MemoryObject* mo = a.add_memory();
  mo->set_kind(rpc::MemoryObject::KIND_CUDA_IPC);
  mo->set_bytes(bytes);
  mo->set_device(device);
  mo->set_cuda_ipc_handle(std::string(AttachedPools::kCudaIpcHandleBytes, '\x5a'));
  return mo;
}

// A CUDA pool on device 0 in one object of exactly its size.
rpc::AttachResponse CudaPool() {
  rpc::AttachResponse a;
  a.set_tokens_per_block(16);
  AddCuda(a, PoolBytes(), 0);
  AddPool(a, 0, 0, 0);
  return a;
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

int CudaDevices() {
#if KVMESH_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  (void)cudaGetLastError();
  return count;
#else
  return 0;
#endif
}

TEST(AttachedPools, MapsAHostPoolAndSharesItsBytes) {
  const std::uint64_t offset = 4096;
  auto shm = SharedMemory::Create("kvmesh-attach-test", offset + PoolBytes(), false);
  ASSERT_TRUE(shm.ok()) << shm.status();
  rpc::AttachResponse a;
  AddMemfd(a, offset + PoolBytes());
  AddPool(a, 0, offset, -1);
  auto pools = AttachedPools::Map(a, {::dup(shm->fd())});
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_EQ(pools->num_pools(), 1);
  EXPECT_EQ(pools->device(0), -1);
  auto* base = static_cast<std::uint8_t*>(pools->view(0).base[0]);
  ASSERT_NE(base, nullptr);
  base[0] = 0x7e;  // a second mapping of the same pages
  EXPECT_EQ(static_cast<std::uint8_t*>(shm->data())[offset], 0x7e);
  EXPECT_EQ(pools->view(0).num_blocks, kBlocks);
}

TEST(AttachedPools, HostPoolMustSayItIsOnTheHost) {
  auto shm = SharedMemory::Create("kvmesh-attach-test", PoolBytes(), false);
  ASSERT_TRUE(shm.ok()) << shm.status();
  rpc::AttachResponse a;
  AddMemfd(a, PoolBytes());
  AddPool(a, 0, 0, /*device=*/0);
  const int fd = ::dup(shm->fd());
  const auto pools = AttachedPools::Map(a, {fd});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("host memory"));
  EXPECT_FALSE(IsOpen(fd));  // taken, also on error
}

TEST(AttachedPools, TooFewDescriptorsIsCorruption) {
  rpc::AttachResponse a;
  AddMemfd(a, PoolBytes());
  AddPool(a, 0, 0, -1);
  const auto pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("descriptors"));
}

TEST(AttachedPools, CudaHandleOfTheWrongLengthIsCorruption) {
  for (std::size_t length : {std::size_t{0}, std::size_t{63}, std::size_t{65}}) {
    rpc::AttachResponse a = CudaPool();
    a.mutable_memory(0)->set_cuda_ipc_handle(std::string(length, '\x01'));
    const auto pools = AttachedPools::Map(a, {});
    ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
    EXPECT_THAT(pools.status().message(), HasSubstr("cuda_ipc_handle"));
    EXPECT_THAT(pools.status().message(), HasSubstr("memory object 0"));
  }
  rpc::AttachResponse a = CudaPool();
  a.mutable_memory(0)->set_device_uuid(std::string(15, '\x02'));
  const auto pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("device_uuid"));
}

// Checked against the described object before anything is opened: with CUDA absent this would
// otherwise be kNotSupported, without a device kCudaError.
TEST(AttachedPools, ComponentOutsideACudaObjectIsCorruptionBeforeAnyCudaCall) {
  rpc::AttachResponse a = CudaPool();
  a.mutable_pools(0)->mutable_components(0)->set_offset(4096);
  auto pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("outside its memory object"));

  a = CudaPool();
  a.mutable_memory(0)->set_bytes(PoolBytes() - 1);
  pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();

  a = CudaPool();
  a.mutable_pools(0)->set_device(1);  // the pool says device 1, its memory is on device 0
  pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("device"));

  a = CudaPool();
  a.mutable_memory(0)->set_device(-1);
  pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
}

// A valid description of device memory this process cannot open: a clear error, no crash.
TEST(AttachedPools, CudaMemoryThatCannotBeOpenedIsAClearError) {
  const auto pools = AttachedPools::Map(CudaPool(), {});
  ASSERT_FALSE(pools.ok());
#if KVMESH_HAVE_CUDA
  // No device: kCudaError naming it. A device: the handle was exported by no process, so
  // cudaIpcOpenMemHandle fails (kCudaError naming the call).
  EXPECT_EQ(pools.status().code(), StatusCode::kCudaError) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("CUDA device 0"));
  if (CudaDevices() > 0) {
    EXPECT_THAT(pools.status().message(), HasSubstr("cudaIpcOpenMemHandle"));
  }
#else
  EXPECT_EQ(pools.status().code(), StatusCode::kNotSupported) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("this build has no CUDA"));
#endif
  // An ordinal past the last device.
  rpc::AttachResponse past = CudaPool();
  past.mutable_memory(0)->set_device(4096);
  past.mutable_pools(0)->set_device(4096);
  const auto missing = AttachedPools::Map(past, {});
  ASSERT_FALSE(missing.ok());
#if KVMESH_HAVE_CUDA
  EXPECT_EQ(missing.status().code(), StatusCode::kCudaError) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("CUDA device 4096"));
#else
  EXPECT_EQ(missing.status().code(), StatusCode::kNotSupported) << missing.status();
#endif
}

// The node's device named by a UUID no local device has: kFailedPrecondition naming the UUID (with
// a device to compare against); without one, the same errors as above.
TEST(AttachedPools, UnknownDeviceUuid) {
  rpc::AttachResponse a = CudaPool();
  std::string uuid(AttachedPools::kDeviceUuidBytes, '\0');
  for (std::size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<char>(0xf0 + i);
  a.mutable_memory(0)->set_device_uuid(uuid);
  const auto pools = AttachedPools::Map(a, {});
  ASSERT_FALSE(pools.ok());
  EXPECT_THAT(pools.status().message(), HasSubstr("GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff"));
#if KVMESH_HAVE_CUDA
  EXPECT_EQ(pools.status().code(),
            CudaDevices() > 0 ? StatusCode::kFailedPrecondition : StatusCode::kCudaError)
      << pools.status();
#else
  EXPECT_EQ(pools.status().code(), StatusCode::kNotSupported) << pools.status();
#endif
}

// Host and device objects in one response: the descriptors are those of the memfd objects only,
// in order; when the CUDA object cannot be opened the mapped memfd is released and every
// descriptor closed.
TEST(AttachedPools, DescriptorsBelongToTheMemfdObjectsAndAreClosedOnError) {
  auto shm = SharedMemory::Create("kvmesh-attach-test", PoolBytes(), false);
  ASSERT_TRUE(shm.ok()) << shm.status();
  rpc::AttachResponse a;
  AddMemfd(a, PoolBytes());
  AddCuda(a, PoolBytes(), 0);
  AddPool(a, 0, 0, -1);
  AddPool(a, 1, 0, 0);
  const int fd = ::dup(shm->fd());
  const int extra = ::dup(shm->fd());
  const auto pools = AttachedPools::Map(a, {fd, extra});
  if (CudaDevices() == 0) {
    ASSERT_FALSE(pools.ok());
    EXPECT_NE(pools.status().code(), StatusCode::kCorruption) << pools.status();
  }
  EXPECT_FALSE(IsOpen(fd));
  EXPECT_FALSE(IsOpen(extra));
  // The same with only the memfd pool: it maps, with one descriptor.
  rpc::AttachResponse host;
  AddMemfd(host, PoolBytes());
  AddPool(host, 0, 0, -1);
  const auto mapped = AttachedPools::Map(host, {::dup(shm->fd())});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(mapped->device(0), -1);
}

TEST(AttachedPools, UnknownKindIsCorruption) {
  rpc::AttachResponse a = CudaPool();
  a.mutable_memory(0)->set_kind(rpc::MemoryObject::KIND_UNSPECIFIED);
  const auto pools = AttachedPools::Map(a, {});
  ASSERT_EQ(pools.status().code(), StatusCode::kCorruption) << pools.status();
  EXPECT_THAT(pools.status().message(), HasSubstr("kind"));
}

}  // namespace
}  // namespace kvmesh
