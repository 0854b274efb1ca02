// EmulatedDevice: device memory and a copy backend for machines without a GPU — a test device for
// the device data path (store/device_staging.h), used by the CPU tests and by kvnode's `device:
// emulated`. Nothing about it is a GPU: it exists so that everything the node does with pools the
// host cannot address (staging every tier copy, the partial-reuse copy on the device, the flush,
// kvctl inspect) runs, and is checked, on any machine.
//
// Memory. Each allocation is a memfd mapped twice: once PROT_NONE — those addresses are the
// "device pointers" put into the views the node's host code gets — and once read-write, the alias,
// which only the emulated backend uses (and tests, to fill and check blocks; and engines, which
// map the memfd themselves: for them the pool is host memory). Host code that dereferences a
// device pointer dies with SIGSEGV: a run that passes proves the staged path never touched device
// memory from the host.
//
// Backend. The backend (made by BackendFactory, one per DevicePoolsOptions::make_backend call)
// behaves like the CUDA backend's stream for block copies: BlockCopy validates
// (CanImplementBlockCopy), maps device addresses of its own device to their alias (an address of
// another emulated device is kInvalidArgument), copies the pairs (the caller may reuse its array at
// once) and DEFERS the copy — queued until Synchronize() runs it with cpu::BlockCopy — so a missing
// Synchronize shows as wrong bytes. Its other kernel methods are kNotSupported. Injected failures
// (FailNextCopies): kCudaError from the launch (nothing queued), or from the Synchronize that would
// have run the copy (the copy is dropped). A backend is externally synchronised like a CUDA stream;
// two calls overlapping on one backend are counted (stats().overlapping_calls), so a test can
// require none.
//
// Thread safety: thread-safe. Ownership: the device owns every mapping and memfd (unmapped and
// closed at destruction) and must outlive its backends and every view of its memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "kernels/backend.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

struct EmulatedDeviceStats {
  std::int64_t backends_made = 0;
  std::int64_t launches = 0;  // BlockCopy calls that queued a copy
  std::int64_t synchronizes = 0;
  std::int64_t to_host_pairs = 0;    // pairs copied out of device memory into host memory
  std::int64_t to_device_pairs = 0;  // pairs copied from host memory into device memory
  std::int64_t device_to_device_pairs = 0;
  std::int64_t injected_failures = 0;
  std::int64_t overlapping_calls = 0;  // calls on one backend that overlapped (must be 0)
};

class EmulatedDevice {
 public:
  // Where an injected failure shows.
  enum class FailAt : std::uint8_t { kLaunch, kSynchronize };

  // One allocation: `bytes` (a whole number of pages) at `device` (PROT_NONE) and `alias`
  // (read-write), backed by the memfd `fd` (owned by the device; an engine may map it).
  struct Memory {
    std::byte* device = nullptr;
    std::byte* alias = nullptr;
    std::size_t bytes = 0;
    int fd = -1;
  };

  // A pool laid out in one allocation (components on 256-byte boundaries).
  struct Pool {
    KvPoolView device;  // PROT_NONE addresses: for the code under test
    KvPoolView alias;   // the same bytes, read-write: for the backend and the test
  };

  EmulatedDevice() = default;
  ~EmulatedDevice();
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;

  // Zeroed memory of at least `bytes` (> 0) on device `ordinal`. kResourceExhausted / kIoError
  // when the memfd or a mapping cannot be had.
  Result<Memory> Allocate(std::size_t bytes, int ordinal = 0) KVMESH_EXCLUDES(mu_);
  // A zeroed pool of `blocks` blocks on device `ordinal`.
  Result<Pool> AllocatePool(const KvPoolLayout& layout, std::int64_t blocks, float pool_scale,
                            int ordinal = 0) KVMESH_EXCLUDES(mu_);

  // For DevicePoolsOptions::make_backend: a new backend for the given ordinal.
  std::function<Result<std::unique_ptr<KernelBackend>>(int)> BackendFactory();

  // The next n copies (launches) fail with kCudaError, at the launch or at the Synchronize that
  // would have run them.
  void FailNextCopies(int n, FailAt at = FailAt::kLaunch) KVMESH_EXCLUDES(mu_);

  [[nodiscard]] EmulatedDeviceStats stats() const KVMESH_EXCLUDES(mu_);

 private:
  friend class EmulatedCopyBackend;
  struct Region {
    std::byte* device = nullptr;
    std::byte* alias = nullptr;
    std::size_t bytes = 0;
    int ordinal = 0;
    int fd = -1;
  };
  // The region holding p, or null.
  const Region* Find(const void* p) const KVMESH_REQUIRES(mu_);
  // Maps a view's device bases of `ordinal` to their alias: kInvalidArgument for a base on another
  // device. Sets *on_device when any base was device memory.
  Status Translate(int ordinal, KvPoolView& view, bool* on_device) const KVMESH_EXCLUDES(mu_);
  // Takes an injected failure for one launch: false if none is pending.
  bool TakeFailure(FailAt* at) KVMESH_EXCLUDES(mu_);

  mutable Mutex mu_;
  std::vector<Region> regions_ KVMESH_GUARDED_BY(mu_);
  int fail_next_ KVMESH_GUARDED_BY(mu_) = 0;
  FailAt fail_at_ KVMESH_GUARDED_BY(mu_) = FailAt::kLaunch;
  EmulatedDeviceStats stats_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
