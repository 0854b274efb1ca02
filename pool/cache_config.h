// CacheConfig: how the KV cache is stored and how much memory it may take, with the names users of
// inference engines already know (TensorRT-LLM's KvCacheConfig, vLLM's cache options).
//
//   field                     default  meaning
//   dtype                     bf16     bf16, fp16, fp8 (per-token-head scales), fp8_per_tensor,
//                                      int8 (per-token-head scales), nvfp4
//   kv_layout                 HND      order inside a layer: HND or NHD
//   tokens_per_block          32       power of two > 1
//   free_gpu_memory_fraction  0.9      share of the free primary memory the pools may take, (0, 1]
//   max_tokens                none     upper bound on the cache size in tokens (not a request)
//   pool_shares               equal    one share per pool, in plan order, positive, summing to 1
//   host_budget_bytes         0        pinned host tier (0 = none)
//   disk_budget_bytes         0        RocksDB tier (0 = none)
//   nvfp4_global_scale        none     nvfp4: the FP32 global scale gs of every pool ...
//   nvfp4_expected_amax       none     ... or the expected amax it is derived from: gs = 448*6/amax
//                                      (neither: gs = 1.0)
//   fp8_per_tensor_scale      none     fp8_per_tensor: the FP32 scale of every pool (none: 1.0)
//
// A plain value; thread-safe as values are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/status.h"
#include "kernels/kv_format.h"

namespace kvmesh {

struct CacheConfig {
  KvDtype dtype = KvDtype::kBF16;
  KvLayout kv_layout = KvLayout::kHND;
  std::int32_t tokens_per_block = 32;
  double free_gpu_memory_fraction = 0.9;
  std::optional<std::int64_t> max_tokens;
  std::vector<double> pool_shares;  // empty: equal shares
  std::int64_t host_budget_bytes = 0;
  std::int64_t disk_budget_bytes = 0;
  std::optional<float> nvfp4_global_scale;
  std::optional<float> nvfp4_expected_amax;
  std::optional<float> fp8_per_tensor_scale;

  // OK, or kInvalidArgument naming the field, its value and the reason, e.g.
  // "tokens_per_block 3 is not a power of two greater than 1". The number of pool_shares is
  // checked against the model by BuildPoolPlan.
  [[nodiscard]] Status Validate() const;
};

// Where a pool-wide FP32 constant comes from.
enum class PoolScaleSource : std::uint8_t {
  kNone = 0,          // the dtype has none (value 1)
  kDefault,           // nothing configured: 1.0
  kConfigured,        // nvfp4_global_scale or fp8_per_tensor_scale
  kFromExpectedAmax,  // gs = 448 * 6 / nvfp4_expected_amax
};
// "none", "default", "configured", "expected_amax".
std::string_view PoolScaleSourceName(PoolScaleSource s);

struct PoolScale {
  float value = 1.0f;
  PoolScaleSource source = PoolScaleSource::kNone;
  // One line for an operator: "nvfp4 global scale 1 (default: neither nvfp4_global_scale nor
  // nvfp4_expected_amax given)". Empty for kNone.
  [[nodiscard]] std::string Describe(KvDtype dtype) const;
};

// The pool-wide constant of `config.dtype` (fp8_per_tensor scale, nvfp4 global scale).
// REQUIRES: config.Validate().ok()
PoolScale ResolvePoolScale(const CacheConfig& config);

}  // namespace kvmesh
