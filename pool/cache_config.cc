#include "pool/cache_config.h"

#include <cmath>

#include "common/strings.h"

namespace kvmesh {
namespace {

constexpr double kShareSumTolerance = 1e-6;
constexpr float kNvfp4AmaxNumerator = 448.0f * 6.0f;  // E4M3 max × E2M1 max

Status CheckScale(std::string_view field, const std::optional<float>& v) {
  if (v && !(std::isfinite(*v) && *v > 0.0f)) {
    return Status::InvalidArgument(
        StrCat(field, " ", *v, " must be a finite number greater than 0"));
  }
  return Status::Ok();
}

Status ValidateShares(const std::vector<double>& shares) {
  double sum = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    if (!(std::isfinite(shares[i]) && shares[i] > 0)) {
      return Status::InvalidArgument(
          StrCat("pool_shares[", i, "] ", shares[i], " must be a finite number greater than 0"));
    }
    sum += shares[i];
  }
  if (!shares.empty() && std::fabs(sum - 1.0) > kShareSumTolerance) {
    return Status::InvalidArgument(
        StrCat("pool_shares [", StrJoin(shares, ", "), "] sum to ", sum, ", not 1"));
  }
  return Status::Ok();
}

}  // namespace

Status CacheConfig::Validate() const {
  const int tpb = tokens_per_block;
  if (tpb < 2 || (tpb & (tpb - 1)) != 0) {
    return Status::InvalidArgument(
        StrCat("tokens_per_block ", tpb, " is not a power of two greater than 1"));
  }
  if (!(std::isfinite(free_gpu_memory_fraction) && free_gpu_memory_fraction > 0 &&
        free_gpu_memory_fraction <= 1)) {
    return Status::InvalidArgument(
        StrCat("free_gpu_memory_fraction ", free_gpu_memory_fraction, " must be in (0, 1]"));
  }
  if (max_tokens && *max_tokens <= 0) {
    return Status::InvalidArgument(
        StrCat("max_tokens ", *max_tokens, " must be positive (leave it unset for no bound)"));
  }
  KVMESH_RETURN_IF_ERROR(ValidateShares(pool_shares));
  if (host_budget_bytes < 0) {
    return Status::InvalidArgument(
        StrCat("host_budget_bytes ", host_budget_bytes, " must not be negative"));
  }
  if (disk_budget_bytes < 0) {
    return Status::InvalidArgument(
        StrCat("disk_budget_bytes ", disk_budget_bytes, " must not be negative"));
  }
  KVMESH_RETURN_IF_ERROR(CheckScale("nvfp4_global_scale", nvfp4_global_scale));
  KVMESH_RETURN_IF_ERROR(CheckScale("nvfp4_expected_amax", nvfp4_expected_amax));
  KVMESH_RETURN_IF_ERROR(CheckScale("fp8_per_tensor_scale", fp8_per_tensor_scale));
  if (nvfp4_global_scale && nvfp4_expected_amax) {
    return Status::InvalidArgument(
        "nvfp4_global_scale and nvfp4_expected_amax are both given: give one (gs = 448*6/amax)");
  }
  if (nvfp4_expected_amax && !std::isfinite(kNvfp4AmaxNumerator / *nvfp4_expected_amax)) {
    return Status::InvalidArgument(StrCat("nvfp4_expected_amax ", *nvfp4_expected_amax,
                                          " is so small that 448*6/amax is not finite"));
  }
  return Status::Ok();
}

std::string_view PoolScaleSourceName(PoolScaleSource s) {
  switch (s) {
    case PoolScaleSource::kNone: return "none";
    case PoolScaleSource::kDefault: return "default";
    case PoolScaleSource::kConfigured: return "configured";
    case PoolScaleSource::kFromExpectedAmax: return "expected_amax";
  }
  return "unknown";
}

std::string PoolScale::Describe(KvDtype dtype) const {
  const std::string what =
      dtype == KvDtype::kNVFP4 ? "nvfp4 global scale gs" : "fp8 per-tensor scale";
  switch (source) {
    case PoolScaleSource::kNone: return "";
    case PoolScaleSource::kDefault:
      return dtype == KvDtype::kNVFP4
                 ? StrCat(what, " ", value,
                          " (default: neither nvfp4_global_scale nor nvfp4_expected_amax given)")
                 : StrCat(what, " ", value, " (default: fp8_per_tensor_scale not given)");
    case PoolScaleSource::kConfigured: return StrCat(what, " ", value, " (configured)");
    case PoolScaleSource::kFromExpectedAmax:
      return StrCat(what, " ", value, " (= 448*6 / nvfp4_expected_amax)");
  }
  return "";
}

PoolScale ResolvePoolScale(const CacheConfig& config) {
  switch (config.dtype) {
    case KvDtype::kNVFP4:
      if (config.nvfp4_global_scale) {
        return {*config.nvfp4_global_scale, PoolScaleSource::kConfigured};
      }
      if (config.nvfp4_expected_amax) {
        // Correctly rounded FP32 division, as the kernels would compute it.
        return {kNvfp4AmaxNumerator / *config.nvfp4_expected_amax,
                PoolScaleSource::kFromExpectedAmax};
      }
      return {1.0f, PoolScaleSource::kDefault};
    case KvDtype::kFP8PerTensor:
      if (config.fp8_per_tensor_scale) {
        return {*config.fp8_per_tensor_scale, PoolScaleSource::kConfigured};
      }
      return {1.0f, PoolScaleSource::kDefault};
    default: return {1.0f, PoolScaleSource::kNone};
  }
}

}  // namespace kvmesh
