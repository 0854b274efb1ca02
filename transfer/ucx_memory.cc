#include "transfer/ucx_memory.h"

#include "common/log.h"

namespace kvmesh {

Result<std::unique_ptr<UcxMemoryRegion>> UcxMemoryRegion::Map(UcxContext& context, void* base,
                                                              std::size_t length) {
  if (base == nullptr || length == 0) {
    return Status::InvalidArgument("memory region needs a base and a non-zero length");
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = base;
  params.length = length;
  params.memory_type = UCS_MEMORY_TYPE_HOST;
  ucp_mem_h memh = nullptr;
  const ucs_status_t status = ucp_mem_map(context.get(), &params, &memh);
  if (status != UCS_OK) return UcsToStatus(status, "ucp_mem_map");
  return std::unique_ptr<UcxMemoryRegion>(
      new UcxMemoryRegion(&context, memh, static_cast<std::byte*>(base), length));
}

UcxMemoryRegion::~UcxMemoryRegion() {
  const ucs_status_t status = ucp_mem_unmap(context_->get(), memh_);
  if (status != UCS_OK) KVMESH_LOG_ERROR("ucp_mem_unmap status {}", ucs_status_string(status));
}

}  // namespace kvmesh
