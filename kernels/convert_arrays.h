// Conversions over arrays: one scalar conversion applied element-wise (ConvertElements), and the
// head quantisers of kernels/quantize.h applied to many head vectors (QuantizeHeads,
// DequantizeHeads). The CPU twin is in namespace cpu (kernels/cpu/convert_arrays.cc); the CUDA
// launchers are in kernels/conversions_cuda.h. Both run the per-element / per-head steps defined
// at the bottom of this header, so they produce the same bytes.
//
// Used by the conversion tests (CPU against GPU bytes), and by any code that needs to quantise a
// batch of head vectors outside the append kernel (e.g. building test pools).
//
// Shapes (all row-major, caller-owned, never aliased between input and output):
//   input    [num_heads, head_dim] of HeadInputType (FP32, or BF16/FP16 bit patterns)
//   codes    [num_heads, head_dim * bits / 8] bytes: fp8/int8 1 byte, bf16/fp16 2 bytes (uint16),
//            nvfp4 head_dim / 2 bytes (element 2i in the low nibble of byte i)
//   scales   fp8 (per token-head), int8: float [num_heads]
//            nvfp4: uint8 (UE4M3) [num_heads, head_dim / 16]
//            bf16, fp16, fp8_per_tensor: not used (may be null)
//   pool_scale  fp8_per_tensor: the pool's scale; nvfp4: the global scale gs; else not used
//   output   (dequantise) float [num_heads, head_dim]
//
// Thread safety: reentrant; concurrent calls must not write the same output memory.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/host_device.h"
#include "common/status.h"
#include "kernels/conversions.h"
#include "kernels/kv_format.h"
#include "kernels/quantize.h"

namespace kvmesh {

// One scalar conversion of kernels/conversions.h; the comment gives input → output element types.
enum class ConvertOp : std::uint8_t {
  kFloatToE4M3 = 0,  // float → uint8 (FloatToE4M3Sat)
  kE4M3ToFloat = 1,  // uint8 → float
  kFloatToE2M1 = 2,  // float → uint8, the nibble in the low 4 bits (FloatToE2M1)
  kE2M1ToFloat = 3,  // uint8 (low 4 bits read) → float
  kFloatToBf16 = 4,  // float → uint16 (FloatToBf16Rne)
  kBf16ToFloat = 5,  // uint16 → float
  kFloatToFp16 = 6,  // float → uint16 (FloatToHalfRne)
  kFp16ToFloat = 7,  // uint16 → float
  kFloatToInt8 = 8,  // float (already divided by its scale) → int8 (FloatToInt8Sat)
};
inline constexpr int kNumConvertOps = 9;

std::string_view ConvertOpName(ConvertOp op);  // "float_to_e4m3", ...
int ConvertOpInputBytes(ConvertOp op);         // bytes of one input element (0 if op is invalid)
int ConvertOpOutputBytes(ConvertOp op);        // bytes of one output element (0 if op is invalid)

struct ConvertElementsArgs {
  ConvertOp op = ConvertOp::kFloatToE4M3;
  const void* input = nullptr;  // [count] input elements
  void* output = nullptr;       // [count] output elements
  std::int64_t count = 0;
};

enum class HeadInputType : std::uint8_t { kFP32 = 0, kBF16 = 1, kFP16 = 2 };

struct QuantizeHeadsArgs {
  KvDtype dtype = KvDtype::kBF16;
  HeadInputType input_type = HeadInputType::kFP32;
  const void* input = nullptr;  // [num_heads, head_dim] of input_type
  std::int64_t num_heads = 0;   // head vectors to quantise (tokens × heads)
  std::int32_t head_dim = 0;
  void* codes = nullptr;   // [num_heads, head_dim * bits / 8] bytes
  void* scales = nullptr;  // see the table above
  float pool_scale = 0.0f;
};

struct DequantizeHeadsArgs {
  KvDtype dtype = KvDtype::kBF16;
  const void* codes = nullptr;
  const void* scales = nullptr;
  float pool_scale = 0.0f;
  std::int64_t num_heads = 0;
  std::int32_t head_dim = 0;
  float* output = nullptr;  // [num_heads, head_dim]
};

// OK, or kInvalidArgument naming the field and value: an unknown op / dtype / input type, a
// negative count, num_heads or a non-positive head_dim, head_dim not a multiple of 16 for nvfp4,
// a missing pointer that the dtype needs, a pool_scale that is not finite and > 0 where used.
Status CanImplementConvertElements(const ConvertElementsArgs& args);
Status CanImplementQuantizeHeads(const QuantizeHeadsArgs& args);
Status CanImplementDequantizeHeads(const DequantizeHeadsArgs& args);

namespace cpu {

// Each validates with its CanImplement* (the error is returned) and then runs on the calling
// thread; memory is host memory.
Status ConvertElements(const ConvertElementsArgs& args);
Status QuantizeHeads(const QuantizeHeadsArgs& args);
Status DequantizeHeads(const DequantizeHeadsArgs& args);

}  // namespace cpu

// ---------------------------------------------------------------------------------------------
// The steps both implementations run: element i, head h. REQUIRES the args passed CanImplement*.

KVMESH_HOST_DEVICE inline void ConvertElementAt(const ConvertElementsArgs& a, std::int64_t i) {
  switch (a.op) {
    case ConvertOp::kFloatToE4M3:
      static_cast<std::uint8_t*>(a.output)[i] =
          FloatToE4M3Sat(static_cast<const float*>(a.input)[i]);
      break;
    case ConvertOp::kE4M3ToFloat:
      static_cast<float*>(a.output)[i] = E4M3ToFloat(static_cast<const std::uint8_t*>(a.input)[i]);
      break;
    case ConvertOp::kFloatToE2M1:
      static_cast<std::uint8_t*>(a.output)[i] = FloatToE2M1(static_cast<const float*>(a.input)[i]);
      break;
    case ConvertOp::kE2M1ToFloat:
      static_cast<float*>(a.output)[i] = E2M1ToFloat(static_cast<const std::uint8_t*>(a.input)[i]);
      break;
    case ConvertOp::kFloatToBf16:
      static_cast<std::uint16_t*>(a.output)[i] =
          FloatToBf16Rne(static_cast<const float*>(a.input)[i]);
      break;
    case ConvertOp::kBf16ToFloat:
      static_cast<float*>(a.output)[i] = Bf16ToFloat(static_cast<const std::uint16_t*>(a.input)[i]);
      break;
    case ConvertOp::kFloatToFp16:
      static_cast<std::uint16_t*>(a.output)[i] =
          FloatToHalfRne(static_cast<const float*>(a.input)[i]);
      break;
    case ConvertOp::kFp16ToFloat:
      static_cast<float*>(a.output)[i] = HalfToFloat(static_cast<const std::uint16_t*>(a.input)[i]);
      break;
    case ConvertOp::kFloatToInt8:
      static_cast<std::int8_t*>(a.output)[i] =
          FloatToInt8Sat(static_cast<const float*>(a.input)[i]);
      break;
  }
}

template <typename In>
KVMESH_HOST_DEVICE inline void QuantizeHeadRow(const QuantizeHeadsArgs& a, const In* input,
                                               std::int64_t h) {
  const int d = a.head_dim;
  const In* x = input + h * d;
  auto* codes = static_cast<std::uint8_t*>(a.codes);
  switch (a.dtype) {
    case KvDtype::kFP8:
      static_cast<float*>(a.scales)[h] = QuantizeHeadFp8(x, d, codes + h * d);
      break;
    case KvDtype::kFP8PerTensor: QuantizeHeadFp8PerTensor(x, d, a.pool_scale, codes + h * d); break;
    case KvDtype::kINT8:
      static_cast<float*>(a.scales)[h] =
          QuantizeHeadInt8(x, d, static_cast<std::int8_t*>(a.codes) + h * d);
      break;
    case KvDtype::kNVFP4:
      QuantizeHeadNvfp4(x, d, a.pool_scale, codes + h * (d / 2),
                        static_cast<std::uint8_t*>(a.scales) + h * (d / kNvfp4BlockSize));
      break;
    case KvDtype::kBF16:
      QuantizeHeadBf16(x, d, static_cast<std::uint16_t*>(a.codes) + h * d);
      break;
    case KvDtype::kFP16:
      QuantizeHeadFp16(x, d, static_cast<std::uint16_t*>(a.codes) + h * d);
      break;
  }
}

KVMESH_HOST_DEVICE inline void QuantizeHeadAt(const QuantizeHeadsArgs& a, std::int64_t h) {
  switch (a.input_type) {
    case HeadInputType::kFP32: QuantizeHeadRow(a, static_cast<const float*>(a.input), h); break;
    case HeadInputType::kBF16: QuantizeHeadRow(a, static_cast<const Bf16*>(a.input), h); break;
    case HeadInputType::kFP16: QuantizeHeadRow(a, static_cast<const Fp16*>(a.input), h); break;
  }
}

KVMESH_HOST_DEVICE inline void DequantizeHeadAt(const DequantizeHeadsArgs& a, std::int64_t h) {
  const int d = a.head_dim;
  float* out = a.output + h * d;
  const auto* codes = static_cast<const std::uint8_t*>(a.codes);
  switch (a.dtype) {
    case KvDtype::kFP8:
      DequantizeHeadFp8(codes + h * d, d, static_cast<const float*>(a.scales)[h], out);
      break;
    case KvDtype::kFP8PerTensor: DequantizeHeadFp8(codes + h * d, d, a.pool_scale, out); break;
    case KvDtype::kINT8:
      DequantizeHeadInt8(static_cast<const std::int8_t*>(a.codes) + h * d, d,
                         static_cast<const float*>(a.scales)[h], out);
      break;
    case KvDtype::kNVFP4:
      DequantizeHeadNvfp4(codes + h * (d / 2),
                          static_cast<const std::uint8_t*>(a.scales) + h * (d / kNvfp4BlockSize), d,
                          a.pool_scale, out);
      break;
    case KvDtype::kBF16:
      DequantizeHeadBf16(static_cast<const std::uint16_t*>(a.codes) + h * d, d, out);
      break;
    case KvDtype::kFP16:
      DequantizeHeadFp16(static_cast<const std::uint16_t*>(a.codes) + h * d, d, out);
      break;
  }
}

}  // namespace kvmesh
