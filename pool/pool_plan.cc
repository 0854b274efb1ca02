#include "pool/pool_plan.h"

#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "common/strings.h"

namespace kvmesh {
namespace {

std::string PoolName(const PoolSpec& p) {
  return StrCat("pool ", p.id.value, " (", PoolKeyString(p.key), ")");
}

// Groups layers by key; pools ordered by first layer.
std::vector<PoolSpec> GroupLayers(const ModelSpec& model) {
  std::vector<PoolSpec> pools;
  std::map<PoolKey, std::size_t> by_key;
  for (std::int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& l = model.layers[i];
    const PoolKey key{l.window, l.num_kv_heads, l.head_dim};
    auto [it, inserted] = by_key.emplace(key, pools.size());
    if (inserted) {
      PoolSpec p;
      p.id = PoolId{static_cast<std::int32_t>(pools.size())};
      p.key = key;
      pools.push_back(std::move(p));
    }
    PoolSpec& p = pools[it->second];
    const bool indexed = model.indexer && model.indexer->layer_mask[i];
    p.index_slots.push_back(indexed ? p.geometry.index_layers++ : -1);
    p.layers.push_back(i);
  }
  return pools;
}

Status SetGeometry(const ModelSpec& model, const CacheConfig& cache, PoolSpec& p) {
  KvPoolGeometry& g = p.geometry;  // index_layers already counted by GroupLayers
  g.dtype = cache.dtype;
  g.layout = cache.kv_layout;
  g.num_layers = static_cast<std::int32_t>(p.layers.size());
  g.kv_factor = model.kv_factor();
  g.num_kv_heads = p.key.num_kv_heads;
  g.tokens_per_block = cache.tokens_per_block;
  g.head_dim = p.key.head_dim;
  if (g.index_layers > 0) {
    g.index_head_dim = model.indexer->index_head_dim;
    g.index_quant_block = model.indexer->quant_block;
    g.index_fp4 = model.indexer->fp4;
  }
  auto layout = MakeKvPoolLayout(g);
  if (!layout.ok()) return layout.status().WithContext(PoolName(p));
  p.layout = *layout;
  p.pool_scale = ResolvePoolScale(cache);
  return Status::Ok();
}

// min(floor(free * fraction), max_tokens * bytes_per_token), filling the plan's budget fields.
void SetBudget(PoolPlan& plan) {
  const double fraction_bytes = std::floor(static_cast<double>(plan.primary_free_bytes) *
                                           plan.cache.free_gpu_memory_fraction);
  plan.fraction_bytes = static_cast<std::int64_t>(fraction_bytes);
  plan.budget_bytes = plan.fraction_bytes;
  if (plan.cache.max_tokens) {
    const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / plan.bytes_per_token;
    plan.max_tokens_bytes = *plan.cache.max_tokens > limit
                                ? std::numeric_limits<std::int64_t>::max()
                                : *plan.cache.max_tokens * plan.bytes_per_token;
    plan.budget_bytes = std::min(plan.budget_bytes, plan.max_tokens_bytes);
  }
}

}  // namespace

std::string PoolKeyString(const PoolKey& key) {
  const std::string window = key.window == 0 ? "full" : StrCat("sliding-", key.window);
  return StrCat(window, "/", key.num_kv_heads, "x", key.head_dim);
}

std::int64_t PoolSpec::ComponentBytesPerBlock(KvComponent c) const {
  const PagedTensorLayout& t = layout.component(c);
  return t.present() ? t.BytesPerBlock() : 0;
}

const PoolSpec& PoolPlan::pool(PoolId id) const {
  KVMESH_CHECK(id.value >= 0 && static_cast<std::size_t>(id.value) < pools.size())
      << "pool " << id.value << " of " << pools.size();
  return pools[id.value];
}

const LayerLocation& PoolPlan::Locate(std::int32_t layer) const {
  KVMESH_CHECK(layer >= 0 && static_cast<std::size_t>(layer) < layer_locations.size())
      << "layer " << layer << " of " << layer_locations.size();
  return layer_locations[layer];
}

std::int64_t PoolPlan::TotalPoolBytes() const {
  std::int64_t total = 0;
  for (const PoolSpec& p : pools) total += p.pool_bytes();
  return total;
}

Result<PoolPlan> BuildPoolPlan(const ModelSpec& model, const CacheConfig& cache,
                               std::int64_t primary_free_bytes) {
  KVMESH_RETURN_IF_ERROR(model.Validate());
  KVMESH_RETURN_IF_ERROR(cache.Validate());
  if (primary_free_bytes <= 0) {
    return Status::InvalidArgument(
        StrCat("free primary memory ", primary_free_bytes, " bytes must be positive"));
  }
  PoolPlan plan;
  plan.model_name = model.name;
  plan.model_revision = model.revision;
  plan.cache = cache;
  plan.primary_free_bytes = primary_free_bytes;
  plan.pools = GroupLayers(model);
  if (!cache.pool_shares.empty() && cache.pool_shares.size() != plan.pools.size()) {
    std::vector<std::string> keys;
    for (const PoolSpec& p : plan.pools) keys.push_back(PoolKeyString(p.key));
    return Status::InvalidArgument(StrCat("pool_shares has ", cache.pool_shares.size(),
                                          " entries but ", model.name, " has ", plan.pools.size(),
                                          plan.pools.size() == 1 ? " pool (" : " pools (",
                                          StrJoin(keys, ", "), ")"));
  }
  for (PoolSpec& p : plan.pools) {
    KVMESH_RETURN_IF_ERROR(SetGeometry(model, cache, p));
    plan.bytes_per_token += p.bytes_per_token();
    p.share = cache.pool_shares.empty() ? 1.0 / static_cast<double>(plan.pools.size())
                                        : cache.pool_shares[p.id.value];
  }
  SetBudget(plan);
  for (PoolSpec& p : plan.pools) {
    p.budget_bytes =
        static_cast<std::int64_t>(std::floor(static_cast<double>(plan.budget_bytes) * p.share));
    p.num_blocks = p.budget_bytes / p.bytes_per_block();
    if (p.num_blocks == 0) {
      return Status::ResourceExhausted(StrCat(
          PoolName(p), " gets no block: its budget of ", p.budget_bytes,
          " bytes is less than one block of ", p.bytes_per_block(),
          " bytes (raise the memory, free_gpu_memory_fraction or max_tokens, or use a smaller "
          "tokens_per_block)"));
    }
  }
  plan.layer_locations.resize(model.layers.size());
  for (const PoolSpec& p : plan.pools) {
    for (std::size_t l = 0; l < p.layers.size(); ++l) {
      plan.layer_locations[p.layers[l]] =
          LayerLocation{p.id, static_cast<std::int32_t>(l), p.index_slots[l]};
    }
  }
  return plan;
}

}  // namespace kvmesh
