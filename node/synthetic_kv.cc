#include "node/synthetic_kv.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/quantize.h"

namespace kvmesh {
namespace {

constexpr std::uint64_t SplitMix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t Fold(const ContentId& id) {
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  std::memcpy(&a, id.bytes.data(), 8);
  std::memcpy(&b, id.bytes.data() + 8, 8);
  return SplitMix(a ^ SplitMix(b));
}

// Values uniform in [-amp, amp) from a stream seeded by `state`, the amplitude from it too. Value
// i is splitmix64's output i (the mix of state + (i + 1) * gamma): no value waits for the one
// before it, so the loop runs at the multipliers' throughput rather than their latency (3.1x the
// chained stream it replaced; that chain was 43% of the README main job's CPU, in perf).
void FillStream(std::uint64_t state, std::span<float> out) {
  const auto amp = static_cast<float>(0.25 + static_cast<double>(state & 0xffff) / 65535.0 * 3.75);
  constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const std::size_t n = out.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t x = SplitMix(state + i * kGamma);
    // The top 24 bits, as [-1, 1) in steps of 2^-23: exact in a float.
    const float u = static_cast<float>(static_cast<std::int32_t>(x >> 40)) * 0x1.0p-23f - 1.0f;
    out[i] = u * amp;
  }
}

}  // namespace

PositionSeeds::PositionSeeds(const ContentId& namespace_digest, const CacheDomain& domain,
                             std::int32_t tokens_per_block)
    : tokens_per_block_(tokens_per_block) {
  domain_id_ = hasher_.ForDomain(namespace_digest, domain);
  parent_ = domain_id_;
  block_.reserve(static_cast<std::size_t>(tokens_per_block));
}

void PositionSeeds::Append(std::span<const Token> tokens) {
  seeds_.reserve(seeds_.size() + tokens.size());
  for (const Token t : tokens) {
    if (block_.empty()) running_ = Fold(parent_);
    block_.push_back(t);
    running_ = SplitMix(running_ ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t)) +
                                    0x632be59bd9b4e019ull));
    seeds_.push_back(running_);
    if (static_cast<std::int32_t>(block_.size()) == tokens_per_block_) {
      parent_ = hasher_.ForBlock(parent_, domain_id_, block_, {});
      block_.clear();
    }
  }
}

void SyntheticKvHead(std::uint64_t seed, std::int32_t layer, std::int32_t kv, std::int32_t head,
                     std::span<float> out) {
  const std::uint64_t where =
      SplitMix((static_cast<std::uint64_t>(layer) << 40) ^ (static_cast<std::uint64_t>(kv) << 32) ^
               static_cast<std::uint64_t>(head) ^ 0x5851f42d4c957f2dull);
  FillStream(SplitMix(seed ^ where), out);
}

void SyntheticQueryHead(std::uint64_t request_seed, std::int32_t step, std::int32_t layer,
                        std::int32_t q_head, std::span<float> out) {
  const std::uint64_t where =
      SplitMix((static_cast<std::uint64_t>(static_cast<std::uint32_t>(step)) << 40) ^
               (static_cast<std::uint64_t>(layer) << 20) ^ static_cast<std::uint64_t>(q_head) ^
               0x2545f4914f6cdd1dull);
  FillStream(SplitMix(request_seed ^ where), out);
}

void StoredRoundTrip(KvDtype dtype, float pool_scale, std::span<const float> x,
                     std::span<float> out) {
  const int n = static_cast<int>(x.size());
  KVMESH_CHECK_EQ(x.size(), out.size());
  switch (dtype) {
    case KvDtype::kBF16: {
      std::vector<std::uint16_t> q(x.size());
      QuantizeHeadBf16(x.data(), n, q.data());
      DequantizeHeadBf16(q.data(), n, out.data());
      return;
    }
    case KvDtype::kFP16: {
      std::vector<std::uint16_t> q(x.size());
      QuantizeHeadFp16(x.data(), n, q.data());
      DequantizeHeadFp16(q.data(), n, out.data());
      return;
    }
    case KvDtype::kFP8: {
      std::vector<std::uint8_t> q(x.size());
      const float scale = QuantizeHeadFp8(x.data(), n, q.data());
      DequantizeHeadFp8(q.data(), n, scale, out.data());
      return;
    }
    case KvDtype::kFP8PerTensor: {
      std::vector<std::uint8_t> q(x.size());
      QuantizeHeadFp8PerTensor(x.data(), n, pool_scale, q.data());
      DequantizeHeadFp8(q.data(), n, pool_scale, out.data());
      return;
    }
    case KvDtype::kINT8: {
      std::vector<std::int8_t> q(x.size());
      const float scale = QuantizeHeadInt8(x.data(), n, q.data());
      DequantizeHeadInt8(q.data(), n, scale, out.data());
      return;
    }
    case KvDtype::kNVFP4: {
      std::vector<std::uint8_t> packed(x.size() / 2);
      std::vector<std::uint8_t> sf(x.size() / 16);
      QuantizeHeadNvfp4(x.data(), n, pool_scale, packed.data(), sf.data());
      DequantizeHeadNvfp4(packed.data(), sf.data(), n, pool_scale, out.data());
      return;
    }
  }
  KVMESH_CHECK(false) << "unknown dtype";
}

void DenseAttention(const DenseAttentionQuery& query, std::span<const float> q,
                    std::span<double> out) {
  const auto kv_len = static_cast<std::int64_t>(query.seeds.size());
  const std::int64_t p = kv_len - 1;
  const std::int64_t first = query.window > 0 ? std::max<std::int64_t>(0, p - query.window + 1) : 0;
  const auto d = static_cast<std::size_t>(query.head_dim);
  const std::size_t heads = q.size() / d;
  const auto keys = static_cast<std::size_t>(kv_len - first);
  KVMESH_CHECK_EQ(out.size(), q.size());
  std::vector<float> raw(d);
  std::vector<float> k(d);
  std::vector<float> values(keys * d);
  std::vector<double> scores(heads * keys);
  for (std::size_t j = 0; j < keys; ++j) {
    const std::uint64_t seed = query.seeds[static_cast<std::size_t>(first) + j];
    SyntheticKvHead(seed, query.layer, 0, query.kv_head, raw);
    StoredRoundTrip(query.dtype, query.pool_scale, raw, k);
    SyntheticKvHead(seed, query.layer, 1, query.kv_head, raw);
    StoredRoundTrip(query.dtype, query.pool_scale, raw, std::span(values.data() + j * d, d));
    for (std::size_t h = 0; h < heads; ++h) {
      double dot = 0;
      for (std::size_t i = 0; i < d; ++i) dot += static_cast<double>(q[h * d + i]) * k[i];
      scores[h * keys + j] = dot * query.softmax_scale;
    }
  }
  std::fill(out.begin(), out.end(), 0.0);
  for (std::size_t h = 0; h < heads; ++h) {
    double* s = scores.data() + h * keys;
    const double max_score = *std::max_element(s, s + keys);
    double sum = 0;
    for (std::size_t j = 0; j < keys; ++j) {
      s[j] = std::exp(s[j] - max_score);
      sum += s[j];
    }
    for (std::size_t j = 0; j < keys; ++j) {
      const double w = s[j] / sum;
      for (std::size_t i = 0; i < d; ++i) out[h * d + i] += w * values[j * d + i];
    }
  }
}

bool AttentionMatches(std::span<const float> out, std::span<const double> ref, double* worst) {
  double w = 0;
  bool ok = out.size() == ref.size();
  for (std::size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(out[i]) - ref[i]);
    w = std::max(w, err);
    if (!(err <= 2e-3 + 2e-3 * std::abs(ref[i]))) ok = false;  // NaN fails too
  }
  if (worst != nullptr) *worst = w;
  return ok;
}

}  // namespace kvmesh
