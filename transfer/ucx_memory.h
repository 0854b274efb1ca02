// UcxMemoryRegion: RAII registration of existing host memory with a UCP context (ucp_mem_map of
// the caller's range, no allocation; ucp_mem_unmap on destruction).
//
// Registration is done once per region — a whole pool's memory, a host tier's slot array — never
// per block: every operation on a slice of the region passes the region's memory handle to UCX
// (UCP_OP_ATTR_FIELD_MEMH), so no block is registered on the data path.
//
// Ownership: the caller owns the memory; it must stay mapped for the region's lifetime. The region
// must outlive every operation that uses it (the TransferEngine refuses to deregister a region in
// use).
//
// Thread safety: created, used and destroyed on the thread that owns the context's workers.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>

#include "common/result.h"
#include "transfer/ucx_context.h"

namespace kvmesh {

class UcxMemoryRegion {
 public:
  // kInvalidArgument: a null base or a zero length. Other codes: ucp_mem_map failed.
  static Result<std::unique_ptr<UcxMemoryRegion>> Map(UcxContext& context, void* base,
                                                      std::size_t length);
  ~UcxMemoryRegion();
  UcxMemoryRegion(const UcxMemoryRegion&) = delete;
  UcxMemoryRegion& operator=(const UcxMemoryRegion&) = delete;

  [[nodiscard]] ucp_mem_h memh() const { return memh_; }
  [[nodiscard]] std::byte* base() const { return base_; }
  [[nodiscard]] std::size_t length() const { return length_; }

 private:
  UcxMemoryRegion(UcxContext* context, ucp_mem_h memh, std::byte* base, std::size_t length)
      : context_(context), memh_(memh), base_(base), length_(length) {}

  UcxContext* context_;
  ucp_mem_h memh_;
  std::byte* base_;
  std::size_t length_;
};

}  // namespace kvmesh
