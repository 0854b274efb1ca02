#include "kernels/kernel_types.h"

namespace kvmesh {

std::string_view ActDtypeName(ActDtype d) {
  switch (d) {
    case ActDtype::kFP32: return "fp32";
    case ActDtype::kBF16: return "bf16";
    case ActDtype::kFP16: return "fp16";
  }
  return "unknown";
}

}  // namespace kvmesh
