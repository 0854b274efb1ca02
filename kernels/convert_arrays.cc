#include "kernels/convert_arrays.h"

#include <cmath>

#include "common/strings.h"

namespace kvmesh {
namespace {

bool ValidDtype(KvDtype d) { return static_cast<int>(d) < kNumKvDtypes; }
bool ValidInputType(HeadInputType t) { return static_cast<int>(t) <= 2; }
bool UsesPoolScale(KvDtype d) { return d == KvDtype::kFP8PerTensor || d == KvDtype::kNVFP4; }
bool UsesScales(KvDtype d) {
  return d == KvDtype::kFP8 || d == KvDtype::kINT8 || d == KvDtype::kNVFP4;
}

// The checks QuantizeHeads and DequantizeHeads share.
Status CheckHeads(std::string_view what, KvDtype dtype, std::int64_t num_heads,
                  std::int32_t head_dim, float pool_scale, bool have_scales) {
  if (!ValidDtype(dtype)) {
    return Status::InvalidArgument(
        StrCat(what, ": dtype ", static_cast<int>(dtype), " is not a cache dtype"));
  }
  if (num_heads < 0) {
    return Status::InvalidArgument(StrCat(what, ": num_heads ", num_heads, " is negative"));
  }
  if (head_dim <= 0) {
    return Status::InvalidArgument(StrCat(what, ": head_dim ", head_dim, " is not positive"));
  }
  if (dtype == KvDtype::kNVFP4 && head_dim % kNvfp4BlockSize != 0) {
    return Status::InvalidArgument(
        StrCat(what, ": head_dim ", head_dim, " is not a multiple of 16, which nvfp4 needs"));
  }
  if (UsesPoolScale(dtype) && !(std::isfinite(pool_scale) && pool_scale > 0.0f)) {
    return Status::InvalidArgument(StrCat(what, ": pool_scale ", pool_scale, " for ",
                                          KvDtypeName(dtype), " is not finite and positive"));
  }
  if (num_heads > 0 && UsesScales(dtype) && !have_scales) {
    return Status::InvalidArgument(
        StrCat(what, ": scales is null, which ", KvDtypeName(dtype), " needs"));
  }
  return Status::Ok();
}

}  // namespace

std::string_view ConvertOpName(ConvertOp op) {
  switch (op) {
    case ConvertOp::kFloatToE4M3: return "float_to_e4m3";
    case ConvertOp::kE4M3ToFloat: return "e4m3_to_float";
    case ConvertOp::kFloatToE2M1: return "float_to_e2m1";
    case ConvertOp::kE2M1ToFloat: return "e2m1_to_float";
    case ConvertOp::kFloatToBf16: return "float_to_bf16";
    case ConvertOp::kBf16ToFloat: return "bf16_to_float";
    case ConvertOp::kFloatToFp16: return "float_to_fp16";
    case ConvertOp::kFp16ToFloat: return "fp16_to_float";
    case ConvertOp::kFloatToInt8: return "float_to_int8";
  }
  return "unknown";
}

int ConvertOpInputBytes(ConvertOp op) {
  switch (op) {
    case ConvertOp::kFloatToE4M3:
    case ConvertOp::kFloatToE2M1:
    case ConvertOp::kFloatToBf16:
    case ConvertOp::kFloatToFp16:
    case ConvertOp::kFloatToInt8: return 4;
    case ConvertOp::kE4M3ToFloat:
    case ConvertOp::kE2M1ToFloat: return 1;
    case ConvertOp::kBf16ToFloat:
    case ConvertOp::kFp16ToFloat: return 2;
  }
  return 0;
}

int ConvertOpOutputBytes(ConvertOp op) {
  switch (op) {
    case ConvertOp::kFloatToE4M3:
    case ConvertOp::kFloatToE2M1:
    case ConvertOp::kFloatToInt8: return 1;
    case ConvertOp::kFloatToBf16:
    case ConvertOp::kFloatToFp16: return 2;
    case ConvertOp::kE4M3ToFloat:
    case ConvertOp::kE2M1ToFloat:
    case ConvertOp::kBf16ToFloat:
    case ConvertOp::kFp16ToFloat: return 4;
  }
  return 0;
}

Status CanImplementConvertElements(const ConvertElementsArgs& args) {
  if (static_cast<int>(args.op) >= kNumConvertOps) {
    return Status::InvalidArgument(
        StrCat("ConvertElements: op ", static_cast<int>(args.op), " is not a conversion"));
  }
  if (args.count < 0) {
    return Status::InvalidArgument(StrCat("ConvertElements: count ", args.count, " is negative"));
  }
  if (args.count > 0 && (args.input == nullptr || args.output == nullptr)) {
    return Status::InvalidArgument(StrCat("ConvertElements: ", ConvertOpName(args.op), " of ",
                                          args.count, " elements needs input and output"));
  }
  return Status::Ok();
}

Status CanImplementQuantizeHeads(const QuantizeHeadsArgs& args) {
  if (!ValidInputType(args.input_type)) {
    return Status::InvalidArgument(StrCat("QuantizeHeads: input_type ",
                                          static_cast<int>(args.input_type),
                                          " is not fp32, bf16 or fp16"));
  }
  KVMESH_RETURN_IF_ERROR(CheckHeads("QuantizeHeads", args.dtype, args.num_heads, args.head_dim,
                                    args.pool_scale, args.scales != nullptr));
  if (args.num_heads > 0 && (args.input == nullptr || args.codes == nullptr)) {
    return Status::InvalidArgument("QuantizeHeads: input and codes must not be null");
  }
  return Status::Ok();
}

Status CanImplementDequantizeHeads(const DequantizeHeadsArgs& args) {
  KVMESH_RETURN_IF_ERROR(CheckHeads("DequantizeHeads", args.dtype, args.num_heads, args.head_dim,
                                    args.pool_scale, args.scales != nullptr));
  if (args.num_heads > 0 && (args.codes == nullptr || args.output == nullptr)) {
    return Status::InvalidArgument("DequantizeHeads: codes and output must not be null");
  }
  return Status::Ok();
}

}  // namespace kvmesh
