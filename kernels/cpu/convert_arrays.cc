// CPU twin of the conversion kernels (kernels/cuda/conversions_kernels.cu): the same per-element
// and per-head steps (kernels/convert_arrays.h), run in order on the calling thread.
#include "kernels/convert_arrays.h"

namespace kvmesh::cpu {

Status ConvertElements(const ConvertElementsArgs& args) {
  KVMESH_RETURN_IF_ERROR(CanImplementConvertElements(args));
  for (std::int64_t i = 0; i < args.count; ++i) ConvertElementAt(args, i);
  return Status::Ok();
}

Status QuantizeHeads(const QuantizeHeadsArgs& args) {
  KVMESH_RETURN_IF_ERROR(CanImplementQuantizeHeads(args));
  for (std::int64_t h = 0; h < args.num_heads; ++h) QuantizeHeadAt(args, h);
  return Status::Ok();
}

Status DequantizeHeads(const DequantizeHeadsArgs& args) {
  KVMESH_RETURN_IF_ERROR(CanImplementDequantizeHeads(args));
  for (std::int64_t h = 0; h < args.num_heads; ++h) DequantizeHeadAt(args, h);
  return Status::Ok();
}

}  // namespace kvmesh::cpu
