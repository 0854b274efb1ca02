#include "kernels/kv_format.h"

#include "common/strings.h"

namespace kvmesh {

std::string_view KvDtypeName(KvDtype d) {
  switch (d) {
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kFP16: return "fp16";
    case KvDtype::kFP8: return "fp8";
    case KvDtype::kFP8PerTensor: return "fp8_per_tensor";
    case KvDtype::kINT8: return "int8";
    case KvDtype::kNVFP4: return "nvfp4";
  }
  return "unknown";
}

Result<KvDtype> ParseKvDtype(std::string_view name) {
  const std::string n = AsciiLower(name);
  if (n == "bf16" || n == "bfloat16") return KvDtype::kBF16;
  if (n == "fp16" || n == "float16" || n == "half") return KvDtype::kFP16;
  if (n == "fp8" || n == "fp8_e4m3" || n == "e4m3" || n == "fp8_per_token_head")
    return KvDtype::kFP8;
  if (n == "fp8_per_tensor") return KvDtype::kFP8PerTensor;
  if (n == "int8") return KvDtype::kINT8;
  if (n == "nvfp4" || n == "fp4") return KvDtype::kNVFP4;
  return Status::InvalidArgument(StrCat("unknown cache dtype '", name,
                                        "': use bf16, fp16, fp8, fp8_per_tensor, int8 or nvfp4"));
}

std::string_view KvLayoutName(KvLayout l) { return l == KvLayout::kHND ? "HND" : "NHD"; }

Result<KvLayout> ParseKvLayout(std::string_view name) {
  const std::string n = AsciiLower(name);
  if (n == "hnd") return KvLayout::kHND;
  if (n == "nhd") return KvLayout::kNHD;
  return Status::InvalidArgument(StrCat("unknown kv layout '", name, "': use HND or NHD"));
}

}  // namespace kvmesh
