// Cache formats: the dtype of a KV pool and the order of its dimensions.
//
// KvDtype  bits  side pools                                   pool-wide constant
// bf16     16    —                                            —
// fp16     16    —                                            —
// fp8      8     FP32 scale per (token, head): amax/448       —
// fp8_per_tensor 8  —                                         FP32 scale
// int8     8     FP32 scale per (token, head): amax/127       —
// nvfp4    4     UE4M3 (FP8) scale per 16 elements            FP32 global scale `gs`
//
// FP4 packs two elements per byte, low nibble first: code that counts elements versus containers
// (bytes) must halve for nvfp4 (ElementsPerByte).
//
// KvLayout is the order inside a layer: HND = [heads, tokens, head_dim] (default), NHD =
// [tokens, heads, head_dim]. A reader using the other order reads wrong data without any error, so
// the layout is part of every contract (kernel arguments, bundle header, handoff handshake).
//
// Thread-safe (values and pure functions). Usable from device code (the constexpr helpers).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/host_device.h"
#include "common/result.h"

namespace kvmesh {

enum class KvDtype : std::uint8_t {
  kBF16 = 0,
  kFP16 = 1,
  kFP8 = 2,           // FP8 E4M3 with one FP32 scale per (token, head)
  kFP8PerTensor = 3,  // FP8 E4M3 with one FP32 scale per pool
  kINT8 = 4,          // INT8 with one FP32 scale per (token, head)
  kNVFP4 = 5,         // E2M1 with a UE4M3 scale per 16 elements and an FP32 global scale
};
inline constexpr int kNumKvDtypes = 6;

enum class KvLayout : std::uint8_t {
  kHND = 0,  // [heads, tokens, head_dim] inside a layer
  kNHD = 1,  // [tokens, heads, head_dim] inside a layer
};

// What sits in the scale pool of a dtype.
enum class KvScaleKind : std::uint8_t {
  kNone = 0,
  kPerTokenHead = 1,  // FP32, one per (token, head)
  kBlock16 = 2,       // UE4M3 (FP8 E4M3 bits, non-negative), one per 16 elements
};

inline constexpr int kNvfp4BlockSize = 16;

KVMESH_HOST_DEVICE constexpr int KvDtypeBits(KvDtype d) {
  switch (d) {
    case KvDtype::kBF16:
    case KvDtype::kFP16: return 16;
    case KvDtype::kFP8:
    case KvDtype::kFP8PerTensor:
    case KvDtype::kINT8: return 8;
    case KvDtype::kNVFP4: return 4;
  }
  return 0;
}

// Elements in one byte for sub-byte types (2 for nvfp4), else 1.
KVMESH_HOST_DEVICE constexpr int ElementsPerByte(KvDtype d) { return KvDtypeBits(d) == 4 ? 2 : 1; }

KVMESH_HOST_DEVICE constexpr KvScaleKind ScaleKindOf(KvDtype d) {
  switch (d) {
    case KvDtype::kFP8:
    case KvDtype::kINT8: return KvScaleKind::kPerTokenHead;
    case KvDtype::kNVFP4: return KvScaleKind::kBlock16;
    default: return KvScaleKind::kNone;
  }
}

// True for the dtypes with a pool-wide FP32 constant (fp8_per_tensor scale, nvfp4 global scale).
KVMESH_HOST_DEVICE constexpr bool HasPoolScale(KvDtype d) {
  return d == KvDtype::kFP8PerTensor || d == KvDtype::kNVFP4;
}

KVMESH_HOST_DEVICE constexpr bool IsQuantized(KvDtype d) {
  return d != KvDtype::kBF16 && d != KvDtype::kFP16;
}

// "bf16", "fp16", "fp8", "fp8_per_tensor", "int8", "nvfp4".
std::string_view KvDtypeName(KvDtype d);
// Accepts the names above, case-insensitive, and the aliases "bfloat16", "float16", "half",
// "fp8_e4m3", "e4m3", "fp8_per_token_head", "fp4".
Result<KvDtype> ParseKvDtype(std::string_view name);

// "HND", "NHD".
std::string_view KvLayoutName(KvLayout l);
// Accepts "HND" and "NHD", case-insensitive.
Result<KvLayout> ParseKvLayout(std::string_view name);

}  // namespace kvmesh
