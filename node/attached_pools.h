// AttachedPools: an engine's view of a node's pools — the memory objects of an AttachResponse
// mapped into this process (node/shared_memory.h), one KvPoolView per pool over them.
//
// Everything the node sent is checked before it is used as an address: each component's layout
// must describe exactly bytes_per_block bytes, bytes_per_block * num_blocks must equal its
// `bytes`, and [offset, offset + bytes) must lie inside its memory object; a pool must have a
// data component. A description that fails is kCorruption naming the pool and the field.
//
// Move-only; the views are valid while the object lives (the mappings are released with it).
// Thread safety: immutable after Map; the memory is shared (engine_service.h says who writes
// which block when).
#pragma once

#include <vector>

#include "common/result.h"
#include "kernels/paged_kv_layout.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/shared_memory.h"

namespace kvmesh {

class AttachedPools {
 public:
  // Maps the descriptors `fds` (in the order of attach.memory; ownership is taken of all of them,
  // also on error). CUDA IPC memory objects are kNotSupported here (host engines only).
  static Result<AttachedPools> Map(const rpc::AttachResponse& attach, std::vector<int> fds);

  AttachedPools() = default;
  AttachedPools(AttachedPools&&) noexcept = default;
  AttachedPools& operator=(AttachedPools&&) noexcept = default;

  [[nodiscard]] const rpc::AttachResponse& description() const { return attach_; }
  [[nodiscard]] const std::vector<KvPoolView>& views() const { return views_; }
  [[nodiscard]] const KvPoolView& view(int pool) const { return views_[pool]; }
  [[nodiscard]] int num_pools() const { return static_cast<int>(views_.size()); }

 private:
  rpc::AttachResponse attach_;
  std::vector<SharedMemory> memory_;
  std::vector<KvPoolView> views_;
};

}  // namespace kvmesh
