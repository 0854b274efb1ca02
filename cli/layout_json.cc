// `kvctl layout --json`: the stable machine format (schema "kvmesh.layout/1", docs/kvctl.md).
// Fields are only ever added; a change in meaning gets a new schema name.
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/layout_report.h"

namespace kvmesh::cli {
namespace {

using Json = nlohmann::ordered_json;

Json Strides(const PagedTensorLayout& t) {
  return Json{{"block", t.BlockStride()}, {"layer", t.LayerStride()}, {"kv", t.KvStride()},
              {"head", t.HeadStride()},   {"token", t.TokenStride()}, {"dim", 1}};
}

std::string ElementType(const PoolSpec& p, KvComponent c) {
  switch (c) {
    case KvComponent::kData: return std::string(KvDtypeName(p.layout.dtype));
    case KvComponent::kScale: return p.layout.dtype == KvDtype::kNVFP4 ? "ue4m3" : "fp32";
    case KvComponent::kIndexK: return p.geometry.index_fp4 ? "e2m1" : "fp8_e4m3";
    case KvComponent::kIndexScale: return "fp32";
  }
  return "";
}

Json Component(const PoolSpec& p, KvComponent c) {
  const PagedTensorLayout& t = p.layout.component(c);
  const bool hnd = t.order == KvLayout::kHND;
  const PagedTensorLayout hnd_t = p.LayoutIn(KvLayout::kHND).component(c);
  const PagedTensorLayout nhd_t = p.LayoutIn(KvLayout::kNHD).component(c);
  Json dims = hnd ? Json{"block", "layer", "kv", "head", "token", "dim"}
                  : Json{"block", "layer", "kv", "token", "head", "dim"};
  Json shape = Json{p.num_blocks,
                    t.num_layers,
                    t.kv_factor,
                    hnd ? t.num_heads : t.tokens_per_block,
                    hnd ? t.tokens_per_block : t.num_heads,
                    t.inner};
  return Json{{"name", KvComponentName(c)},
              {"element", ElementType(p, c)},
              {"bits", t.bits},
              {"elements_per_byte", t.bits == 4 ? 2 : 1},
              {"order", KvLayoutName(t.order)},
              {"dims", std::move(dims)},
              {"shape", std::move(shape)},
              {"num_layers", t.num_layers},
              {"kv_factor", t.kv_factor},
              {"num_heads", t.num_heads},
              {"tokens_per_block", t.tokens_per_block},
              {"inner", t.inner},
              {"strides", Json{{"HND", Strides(hnd_t)}, {"NHD", Strides(nhd_t)}}},
              {"bytes_per_block", t.BytesPerBlock()}};
}

Json Pool(const PoolSpec& p) {
  Json components = Json::array();
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (p.layout.components[c].present()) {
      components.push_back(Component(p, static_cast<KvComponent>(c)));
    }
  }
  Json scale = nullptr;
  if (p.pool_scale.source != PoolScaleSource::kNone) {
    scale =
        Json{{"value", p.pool_scale.value}, {"source", PoolScaleSourceName(p.pool_scale.source)}};
  }
  return Json{{"id", p.id.value},
              {"key", Json{{"window", p.key.window},
                           {"num_kv_heads", p.key.num_kv_heads},
                           {"head_dim", p.key.head_dim}}},
              {"key_string", PoolKeyString(p.key)},
              {"layers", p.layers},
              {"index_slots", p.index_slots},
              {"kv_factor", p.geometry.kv_factor},
              {"share", p.share},
              {"budget_bytes", p.budget_bytes},
              {"num_blocks", p.num_blocks},
              {"tokens", p.tokens()},
              {"bytes_per_block", p.bytes_per_block()},
              {"bytes_per_token", p.bytes_per_token()},
              {"pool_scale", std::move(scale)},
              {"components", std::move(components)}};
}

Json Model(const LayoutReport& r) {
  const ModelSpec& m = r.model;
  Json mla = nullptr;
  if (m.mla) {
    mla = Json{{"kv_lora_rank", m.mla->kv_lora_rank},
               {"qk_rope_head_dim", m.mla->qk_rope_head_dim},
               {"qk_nope_head_dim", m.mla->qk_nope_head_dim},
               {"v_head_dim", m.mla->v_head_dim}};
  }
  Json indexer = nullptr;
  if (m.indexer) {
    indexer = Json{{"index_head_dim", m.indexer->index_head_dim},
                   {"index_n_heads", m.indexer->index_n_heads},
                   {"index_topk", m.indexer->index_topk},
                   {"quant_block", m.indexer->quant_block},
                   {"fp4", m.indexer->fp4},
                   {"num_layers", m.indexer->NumIndexedLayers()}};
  }
  return Json{{"name", m.name},
              {"revision", m.revision},
              {"family", m.family},
              {"preset", r.preset.empty() ? Json(nullptr) : Json(r.preset)},
              {"hf_config", r.hf_config.empty() ? Json(nullptr) : Json(r.hf_config)},
              {"num_layers", m.num_layers()},
              {"num_attention_heads", m.num_attention_heads},
              {"kv_factor", m.kv_factor()},
              {"mla", std::move(mla)},
              {"indexer", std::move(indexer)}};
}

}  // namespace

void PrintLayoutJson(const LayoutReport& r, std::ostream& out) {
  const PoolPlan& plan = r.plan;
  const CacheConfig& c = plan.cache;
  Json pools = Json::array();
  for (const PoolSpec& p : plan.pools) pools.push_back(Pool(p));
  const Json doc{
      {"schema", "kvmesh.layout/1"},
      {"model", Model(r)},
      {"cache", Json{{"dtype", KvDtypeName(c.dtype)},
                     {"kv_layout", KvLayoutName(c.kv_layout)},
                     {"tokens_per_block", c.tokens_per_block},
                     {"free_gpu_memory_fraction", c.free_gpu_memory_fraction},
                     {"max_tokens", c.max_tokens ? Json(*c.max_tokens) : Json(nullptr)},
                     {"pool_shares", c.pool_shares.empty() ? Json(nullptr) : Json(c.pool_shares)}}},
      {"memory", Json{{"kind", r.memory_kind},
                      {"source", r.memory_source},
                      {"free_bytes", plan.primary_free_bytes}}},
      {"budget", Json{{"fraction_bytes", plan.fraction_bytes},
                      {"max_tokens_bytes",
                       plan.max_tokens_bytes >= 0 ? Json(plan.max_tokens_bytes) : Json(nullptr)},
                      {"budget_bytes", plan.budget_bytes},
                      {"limited_by",
                       plan.limited_by_max_tokens() ? "max_tokens" : "free_gpu_memory_fraction"}}},
      {"bytes_per_token", plan.bytes_per_token},
      {"total_pool_bytes", plan.TotalPoolBytes()},
      {"pools", std::move(pools)}};
  // replace: a path or name with invalid UTF-8 must not make dump() throw.
  out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

}  // namespace kvmesh::cli
