// An emulated device for the CPU tests of device pools (store/device_staging.h): pool memory that
// host code cannot touch, and a copy backend that can.
//
// Memory. Each pool's memory is a memfd mapped twice: once PROT_NONE — those addresses are the
// "device pointers" put into the views the engine gets (Pool::device) — and once read-write, the
// alias (Pool::alias) that only the emulated backend and the test use (to fill and check blocks).
// Store code that dereferences a device view pointer dies with SIGSEGV: a test that passes proves
// the staged path never touched device memory from the host.
//
// Backend. EmulatedCopyBackend (made by BackendFactory, one per DevicePoolsOptions::make_backend
// call) behaves like the CUDA backend's stream: BlockCopy validates (CanImplementBlockCopy), maps
// device addresses of its own device to their alias (an address of another emulated device is
// kInvalidArgument), copies the pairs (the caller may reuse its array at once) and DEFERS the copy
// — queued until Synchronize() runs it with cpu::BlockCopy — so a missing Synchronize shows as
// wrong bytes. Its other kernel methods are kNotSupported. Injected failures (FailNextCopies):
// kCudaError from the launch (nothing queued), or from the Synchronize that would have run the copy
// (the copy is dropped). A backend is externally synchronised like a CUDA stream; two calls
// overlapping on one backend are counted (stats().overlapping_calls), so a test can require none.
//
// Thread safety: EmulatedDevice is thread-safe (pools are allocated before the engine starts).
// Ownership: the device owns every mapping (unmapped at destruction) and must outlive its
// backends.
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

namespace kvmesh::store_test {

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

  struct Pool {
    KvPoolView device;  // PROT_NONE addresses: for the engine
    KvPoolView alias;   // the same bytes, read-write: for the backend and the test
  };

  EmulatedDevice() = default;
  ~EmulatedDevice();
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;

  // A zeroed pool of `blocks` blocks on device `ordinal`. Aborts the test binary on a system error.
  Pool AllocatePool(const KvPoolLayout& layout, std::int64_t blocks, float pool_scale,
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

}  // namespace kvmesh::store_test
