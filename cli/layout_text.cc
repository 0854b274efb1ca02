// `kvctl layout` as text: a header, one table row per pool, and a picture of one block per pool.
#include <algorithm>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/layout_report.h"
#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

using Row = std::vector<std::string>;

void PrintTable(const std::vector<Row>& rows, std::ostream& out) {
  std::vector<std::size_t> width;
  for (const Row& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const Row& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string BytesOrDash(std::int64_t bytes) { return bytes > 0 ? FormatBytes(bytes) : "-"; }

// Element type of a component, for people.
std::string ElementName(const PoolSpec& p, KvComponent c) {
  const KvDtype d = p.layout.dtype;
  switch (c) {
    case KvComponent::kData:
      if (d == KvDtype::kNVFP4) return "nvfp4 (e2m1, 2 per byte, low nibble first)";
      if (d == KvDtype::kFP8 || d == KvDtype::kFP8PerTensor) return "fp8 e4m3";
      return StrCat(KvDtypeName(d), KvDtypeBits(d) == 8 ? ", 1 byte each" : ", 2 bytes each");
    case KvComponent::kScale:
      return d == KvDtype::kNVFP4 ? "ue4m3, one per 16 elements" : "fp32, one per (token, head)";
    case KvComponent::kIndexK:
      return p.geometry.index_fp4 ? "e2m1 (2 per byte, low nibble first)" : "fp8 e4m3";
    case KvComponent::kIndexScale:
      return StrCat("fp32, one per ", p.geometry.index_quant_block, " elements");
  }
  return "";
}

std::string ShapeString(const PoolSpec& p, const PagedTensorLayout& t) {
  const bool hnd = t.order == KvLayout::kHND;
  return StrCat("[", p.num_blocks, ",", t.num_layers, ",", t.kv_factor, ",",
                hnd ? t.num_heads : t.tokens_per_block, ",", hnd ? t.tokens_per_block : t.num_heads,
                ",", t.inner, "]");
}

std::string StrideString(const PagedTensorLayout& t) {
  const bool hnd = t.order == KvLayout::kHND;
  return StrCat("[", t.BlockStride(), ",", t.LayerStride(), ",", t.KvStride(), ",",
                hnd ? t.HeadStride() : t.TokenStride(), ",", hnd ? t.TokenStride() : t.HeadStride(),
                ",1]");
}

std::string ShortLayers(const std::vector<std::int32_t>& layers) {
  std::string ranges = LayerRanges(layers);
  if (ranges.size() > 22) {
    const auto first = ranges.find(',');
    const auto last = ranges.rfind(',');
    ranges = ranges.substr(0, first) + ",..," + ranges.substr(last + 1);
  }
  return StrCat(ranges, " (", layers.size(), ")");
}

void PrintHeader(const LayoutReport& r, std::ostream& out) {
  const PoolPlan& plan = r.plan;
  const ModelSpec& m = r.model;
  const CacheConfig& c = plan.cache;
  out << "model      " << m.name;
  if (!m.revision.empty()) out << "@" << m.revision;
  out << (r.preset.empty() ? StrCat(" (", r.hf_config, ")") : StrCat(" (preset ", r.preset, ")"))
      << "\n";
  out << "           " << m.family << ", " << m.num_layers() << " layers, " << m.num_attention_heads
      << " query heads, kv_factor " << m.kv_factor();
  if (m.mla) {
    out << ", MLA latent " << m.mla->kv_lora_rank << " + " << m.mla->qk_rope_head_dim
        << " rope = " << m.mla->LatentDim() << " elements per token and layer";
  }
  out << "\n";
  if (m.indexer) {
    out << "           indexer K: " << m.indexer->index_head_dim << " elements per token ("
        << (m.indexer->fp4 ? "e2m1" : "fp8 e4m3") << ", fp32 scale per " << m.indexer->quant_block
        << ") on " << m.indexer->NumIndexedLayers() << " of " << m.num_layers() << " layers\n";
  }
  out << "cache      " << KvDtypeName(c.dtype) << ", " << KvLayoutName(c.kv_layout) << ", "
      << c.tokens_per_block << " tokens per block\n";
  if (!plan.pools.empty() && plan.pools[0].pool_scale.source != PoolScaleSource::kNone) {
    out << "pool scale " << plan.pools[0].pool_scale.Describe(c.dtype) << "\n";
  }
  out << "memory     " << FormatBytes(plan.primary_free_bytes) << " free (" << r.memory_source
      << ") x free_gpu_memory_fraction " << c.free_gpu_memory_fraction << " = "
      << FormatBytes(plan.fraction_bytes) << "\n";
  out << "budget     " << FormatBytes(plan.budget_bytes);
  if (!c.max_tokens) {
    out << " (max_tokens not set)\n";
  } else {
    out << " = min(" << FormatBytes(plan.fraction_bytes) << ", max_tokens " << *c.max_tokens
        << " x " << plan.bytes_per_token << " B = " << FormatBytes(plan.max_tokens_bytes) << ")"
        << (plan.limited_by_max_tokens() ? ", limited by max_tokens" : "") << "\n";
  }
  out << "per token  " << plan.bytes_per_token << " B (" << FormatBytes(plan.bytes_per_token)
      << ") over all pools; pools hold " << FormatBytes(plan.TotalPoolBytes()) << "\n\n";
}

void PrintPoolTable(const PoolPlan& plan, std::ostream& out) {
  const bool hnd = plan.cache.kv_layout == KvLayout::kHND;
  std::vector<Row> rows;
  rows.push_back({"POOL", "KEY", "LAYERS", "SHARE",
                  hnd ? "SHAPE [b,l,kv,h,t,d]" : "SHAPE [b,l,kv,t,h,d]", "STRIDES (elements)",
                  "DATA/BLK", "SCALE/BLK", "INDEX_K/BLK", "INDEX_SCALE/BLK", "BYTES/TOKEN",
                  "BLOCKS", "TOKENS"});
  for (const PoolSpec& p : plan.pools) {
    std::ostringstream share;
    share << p.share;
    rows.push_back({StrCat(p.id.value), PoolKeyString(p.key), ShortLayers(p.layers), share.str(),
                    ShapeString(p, p.layout.data()), StrideString(p.layout.data()),
                    BytesOrDash(p.ComponentBytesPerBlock(KvComponent::kData)),
                    BytesOrDash(p.ComponentBytesPerBlock(KvComponent::kScale)),
                    BytesOrDash(p.ComponentBytesPerBlock(KvComponent::kIndexK)),
                    BytesOrDash(p.ComponentBytesPerBlock(KvComponent::kIndexScale)),
                    StrCat(p.bytes_per_token()), StrCat(p.num_blocks), StrCat(p.tokens())});
  }
  PrintTable(rows, out);
}

// Name of the innermost dimension: elements of a head, or scales of a head.
std::string_view InnerName(KvComponent c) {
  return c == KvComponent::kData || c == KvComponent::kIndexK ? "dim" : "s";
}

// "[layer 32][K,V 2][head 8][token 64][dim 128]" in memory order, size-1 dims left out.
std::string NestingString(KvComponent c, const PagedTensorLayout& t) {
  const bool index = c == KvComponent::kIndexK || c == KvComponent::kIndexScale;
  std::string s = StrCat("[", index ? "index layer " : "layer ", t.num_layers, "]");
  if (t.kv_factor == 2) s += "[K,V 2]";
  const std::string heads = t.num_heads > 1 ? StrCat("[head ", t.num_heads, "]") : "";
  const std::string tokens = StrCat("[token ", t.tokens_per_block, "]");
  s += t.order == KvLayout::kHND ? heads + tokens : tokens + heads;
  if (t.inner > 1) s += StrCat("[", InnerName(c), " ", t.inner, "]");
  return s;
}

// "b*4194304 + layer*131072 + kv*65536 + head*8192 + token*128 + dim", terms in memory order.
std::string OffsetFormula(KvComponent c, const PagedTensorLayout& t) {
  std::vector<std::pair<std::string, std::int64_t>> terms = {{"b", t.BlockStride()},
                                                             {"layer", t.LayerStride()}};
  if (t.kv_factor > 1) terms.emplace_back("kv", t.KvStride());
  if (t.num_heads > 1) terms.emplace_back("head", t.HeadStride());
  terms.emplace_back("token", t.TokenStride());
  if (t.inner > 1) terms.emplace_back(std::string(InnerName(c)), 1);
  std::stable_sort(terms.begin(), terms.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> parts;
  parts.reserve(terms.size());
  for (const auto& [name, stride] : terms) {
    parts.push_back(stride == 1 ? name : StrCat(name, "*", stride));
  }
  std::string bytes;
  switch (t.bits) {
    case 4: bytes = "byte = element / 2"; break;
    case 8: bytes = "byte = element"; break;
    default: bytes = StrCat("byte = element * ", t.bits / 8);
  }
  return StrCat("offset = ", StrJoin(parts, " + "), "  (elements; ", bytes, ")");
}

// Up to four indices of 0..n-1 as cells, the middle elided: {0, 1, -1, n-1}; -1 stands for "..".
std::vector<int> ShownIndices(int n) {
  std::vector<int> shown;
  for (int i = 0; i < n; ++i) {
    if (n <= 4 || i < 2 || i == n - 1) {
      if (!shown.empty() && shown.back() != i - 1) shown.push_back(-1);
      shown.push_back(i);
    }
  }
  return shown;
}

// One layer of the component as cells: |K h0 t0-63|K h1 t0-63|..|V h7 t0-63| (HND),
// |K t0 h0-7|..| (NHD), or |t0|t1|..|t63| for a single head.
std::string LayerCells(const PagedTensorLayout& t) {
  const bool single_head = t.num_heads == 1;
  const bool hnd = t.order == KvLayout::kHND;
  const int outer = single_head ? t.tokens_per_block : hnd ? t.num_heads : t.tokens_per_block;
  const int inner_count = single_head ? 1 : hnd ? t.tokens_per_block : t.num_heads;
  const std::string outer_name = single_head || !hnd ? "t" : "h";
  const std::string inner_range = single_head ? "" : StrCat(hnd ? " t0-" : " h0-", inner_count - 1);
  std::string s = "|";
  for (int kv = 0; kv < t.kv_factor; ++kv) {
    const std::string prefix = t.kv_factor == 2 ? (kv == 0 ? "K " : "V ") : "";
    for (int i : ShownIndices(outer)) {
      s += i < 0 ? "..|" : StrCat(prefix, outer_name, i, inner_range, "|");
    }
  }
  const std::int64_t cell_bytes = std::int64_t{inner_count} * t.RowBytes();
  return StrCat(s, "  each cell ", FormatBytes(cell_bytes));
}

void PrintComponent(const PoolSpec& p, KvComponent c, std::ostream& out) {
  const PagedTensorLayout& t = p.layout.component(c);
  if (!t.present()) return;
  const std::string pad(14, ' ');
  std::string name(KvComponentName(c));
  name.resize(12, ' ');
  out << "  " << name << NestingString(c, t) << " " << ElementName(p, c) << "  = "
      << FormatBytes(t.BytesPerBlock()) << "\n";
  if (c == KvComponent::kData && t.kv_factor == 1) {
    out << pad << "MLA: kv_factor 1, one head: one latent vector per token (kv_lora_rank + "
        << "qk_rope_head_dim, rope dims included)\n";
  }
  out << pad << OffsetFormula(c, t) << "\n";
  const PagedTensorLayout other = [&] {
    PagedTensorLayout o = t;
    o.order = t.order == KvLayout::kHND ? KvLayout::kNHD : KvLayout::kHND;
    return o;
  }();
  if (t.num_heads > 1) {
    out << pad << KvLayoutName(other.order) << " instead: token*" << other.TokenStride()
        << " + head*" << other.HeadStride() << "\n";
  }
  out << pad << "one layer: " << LayerCells(t) << "\n";
}

void PrintPictures(const LayoutReport& r, std::ostream& out) {
  for (const PoolSpec& p : r.plan.pools) {
    out << "\npool " << p.id.value << " " << PoolKeyString(p.key) << ", layers "
        << LayerRanges(p.layers) << "\n";
    std::vector<std::string> starts;
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& t = p.layout.components[c];
      if (t.present()) {
        starts.push_back(
            StrCat(KvComponentName(static_cast<KvComponent>(c)), " at byte b*", t.BytesPerBlock()));
      }
    }
    out << "  block b (0.." << p.num_blocks - 1 << ") = " << FormatBytes(p.bytes_per_block())
        << ": " << StrJoin(starts, ", ") << " of its component tensor\n";
    for (int c = 0; c < kNumKvComponents; ++c) PrintComponent(p, static_cast<KvComponent>(c), out);
    if (p.pool_scale.source != PoolScaleSource::kNone) {
      out << "  pool scale  " << p.pool_scale.Describe(p.layout.dtype)
          << ": one FP32 for the pool, in every bundle\n";
    }
    if (p.layout.index_k().present() && p.geometry.index_layers < p.geometry.num_layers) {
      std::vector<std::int32_t> indexed;
      for (std::size_t l = 0; l < p.layers.size(); ++l) {
        if (p.index_slots[l] >= 0) indexed.push_back(p.layers[l]);
      }
      out << "  index layers are the pool's masked layers " << LayerRanges(indexed) << "\n";
    }
  }
}

}  // namespace

std::string LayerRanges(const std::vector<std::int32_t>& layers) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    parts.push_back(j == i ? StrCat(layers[i]) : StrCat(layers[i], "-", layers[j]));
    i = j + 1;
  }
  return StrJoin(parts, ",");
}

void PrintLayoutText(const LayoutReport& report, std::ostream& out) {
  PrintHeader(report, out);
  PrintPoolTable(report.plan, out);
  PrintPictures(report, out);
}

}  // namespace kvmesh::cli
