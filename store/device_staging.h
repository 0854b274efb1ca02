// DeviceStaging: host-memory staging for primary pools that live where host code cannot read or
// write (device memory). Every byte the tiers take from such a pool, or give to it, passes through
// a staging area: a copy backend (kernels/backend.h; the CUDA backend's block copy kernel on its
// own stream) gathers pool blocks into the area (ToHost) or scatters area blocks into pool blocks
// (ToDevice), and the host side — bundle encode, verify, RocksDB — only ever touches the area.
// OffloadEngine (offload_engine.h) is the user; TieredCache reaches the device-to-device copy
// (CopyBlocks) for copy-on-partial-reuse through BlockManagerEnv::block_copy.
//
// Memory. `areas` staging areas, fixed at creation. Each holds, for every pool, a KvPoolView of
// capacity() blocks in HostMemory (pinned by default, so that the copy engine reaches it; aligned
// in CPU tests), with the pool's layout and pool_scale: capacity() = max(1, staging_area_bytes /
// sum of every pool's BytesPerBlock), the same for every pool. One copy backend per distinct
// device, made at creation by options.make_backend and kept (never one per copy).
//
// Ownership: the staging owns the areas and the backends. The pools' memory is the caller's and
// must outlive the staging. A Lease is a RAII claim on one area, returned on destruction; it must
// not outlive the staging.
//
// Completion semantics (every copy is waited for: the call returns after the backend's
// Synchronize):
//   ToHost     — returns when the bytes are in the staging blocks: from then the pool (source)
//                blocks may be reused or rewritten, and the staging blocks read by the host.
//   ToDevice   — returns when the pool (destination) blocks hold the bytes: from then they may be
//                published, and the staging (source) blocks reused. ToDevicePart likewise, for the
//                part it copies (the rest of the pool block is not written).
//   CopyBlocks — returns when the destination blocks are written.
// On an error (kInvalidArgument before anything was enqueued; kCudaError from the launch or the
// wait) nothing is still in flight when the call returns — a failed launch is waited for too — and
// the destination blocks of that call hold unspecified bytes: the caller must not publish them.
//
// Thread safety: thread-safe. Acquire blocks until an area is free (at most `areas` leases exist
// at once; no allocation after creation). A Lease is confined to the thread using it (one copy at a
// time); distinct leases copy concurrently, but copies on one device are serialised on its backend
// (a backend is externally synchronised: its mutex is held across the launch and the wait).
// REQUIRES of callers: no thread holding a lease waits for another lease (the engine never nests
// them), or the areas can run out.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "kernels/backend.h"
#include "kernels/block_copy.h"
#include "kernels/paged_kv_layout.h"
#include "store/host_memory.h"

namespace kvmesh {

struct DevicePoolsOptions {
  // [pools]: the device of each pool, in block-manager pool order.
  std::vector<int> device;
  // A copy backend with its own stream on that device (MakeCudaBackend in kvnode; an emulated one
  // in the CPU tests). Called once per distinct device, at creation.
  std::function<Result<std::unique_ptr<KernelBackend>>(int device)> make_backend;
  HostMemoryKind staging_memory = HostMemoryKind::kPinned;
  std::int64_t staging_area_bytes = 64ll << 20;  // per area, every pool's blocks together
};

class DeviceStaging {
 public:
  // Cuts a part out of block b of view v as a one-block view (its own layout, e.g. some layers of
  // every component; pointer arithmetic only, nothing read): LayerRangeCodec::BlockView.
  using PartOf = std::function<KvPoolView(const KvPoolView& v, std::int64_t b)>;

  // A claim on one staging area (move-only; released on destruction).
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    // The area's blocks of `pool`: capacity() blocks, the pool's layout and pool_scale. The
    // reference stays valid for the staging's life (it does not move with the lease).
    [[nodiscard]] const KvPoolView& view(int pool) const;
    // Every pool's view, [pools].
    [[nodiscard]] std::span<const KvPoolView> views() const;
    [[nodiscard]] std::int64_t capacity() const;
    // Pool block pairs[i].src_block → staging block pairs[i].dst_block, waited (see above).
    [[nodiscard]] Status ToHost(int pool, std::span<const BlockCopyPair> pairs);
    // Staging block pairs[i].src_block → pool block pairs[i].dst_block, waited.
    [[nodiscard]] Status ToDevice(int pool, std::span<const BlockCopyPair> pairs);
    // A part of staging block `staging_block` → the same part of pool block `block`, waited:
    // part(v, b) cuts the part out of block b of view v (see PartOf). kInvalidArgument: a block
    // out of range, or a cut that does not lie inside its block.
    [[nodiscard]] Status ToDevicePart(int pool, std::int64_t staging_block, std::int64_t block,
                                      const PartOf& part);

   private:
    friend class DeviceStaging;
    Lease(DeviceStaging* staging, int area) : staging_(staging), area_(area) {}
    void Release();

    DeviceStaging* staging_ = nullptr;
    int area_ = -1;
  };

  // kInvalidArgument: no pools, options.device.size() != pools.size(), a negative device, no
  // make_backend, staging_area_bytes <= 0, areas < 1. Errors of make_backend (kCudaError: no such
  // device) and of the staging allocation (kNotSupported: pinned memory without CUDA).
  static Result<std::unique_ptr<DeviceStaging>> Create(std::vector<KvPoolView> pools,
                                                       const DevicePoolsOptions& options,
                                                       int areas);
  // REQUIRES: no lease outstanding.
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Waits for a free area.
  [[nodiscard]] Lease Acquire() KVMESH_EXCLUDES(mu_);

  // A copy between blocks of one pool's memory (args.src and args.dst are both that pool's view,
  // as BlockManager's copy-on-partial-reuse passes them), on the pool's device, waited.
  // kInvalidArgument: the views are not one pool's memory.
  [[nodiscard]] Status CopyBlocks(const BlockCopyArgs& args);

  [[nodiscard]] std::int64_t capacity() const { return capacity_; }  // blocks per pool and area
  [[nodiscard]] int num_areas() const { return static_cast<int>(areas_.size()); }
  [[nodiscard]] int num_backends() const { return static_cast<int>(devices_.size()); }
  // Areas no lease holds now.
  [[nodiscard]] int free_areas() const KVMESH_EXCLUDES(mu_);

 private:
  struct Area {
    HostMemory memory;
    std::vector<KvPoolView> views;  // [pools]
  };
  struct Device {
    int device = 0;
    Mutex mu;  // held across a launch and its wait (the backend is externally synchronised)
    std::unique_ptr<KernelBackend> backend KVMESH_PT_GUARDED_BY(mu);
  };

  DeviceStaging() = default;
  // Runs args on the backend of `pool`'s device and waits for it.
  Status Copy(int pool, const BlockCopyArgs& args);
  void Release(int area) KVMESH_EXCLUDES(mu_);

  std::vector<KvPoolView> pools_;
  std::vector<int> device_index_;  // [pools] → devices_
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Area> areas_;
  std::int64_t capacity_ = 0;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_ KVMESH_GUARDED_BY(mu_);  // free areas (capacity reserved for all)
};

}  // namespace kvmesh
