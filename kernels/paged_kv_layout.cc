#include "kernels/paged_kv_layout.h"

#include "common/strings.h"

namespace kvmesh {

std::string_view KvComponentName(KvComponent c) {
  switch (c) {
    case KvComponent::kData: return "data";
    case KvComponent::kScale: return "scale";
    case KvComponent::kIndexK: return "index_k";
    case KvComponent::kIndexScale: return "index_scale";
  }
  return "unknown";
}

Result<KvPoolLayout> MakeKvPoolLayout(const KvPoolGeometry& g) {
  const int tpb = g.tokens_per_block;
  if (tpb < 2 || (tpb & (tpb - 1)) != 0) {
    return Status::InvalidArgument(
        StrCat("tokens_per_block ", tpb, " is not a power of two greater than 1"));
  }
  if (g.num_layers <= 0)
    return Status::InvalidArgument(StrCat("num_layers ", g.num_layers, " must be positive"));
  if (g.kv_factor != 1 && g.kv_factor != 2) {
    return Status::InvalidArgument(
        StrCat("kv_factor ", g.kv_factor, " must be 1 (MLA) or 2 (K and V)"));
  }
  if (g.num_kv_heads <= 0) {
    return Status::InvalidArgument(StrCat("num_kv_heads ", g.num_kv_heads, " must be positive"));
  }
  if (g.head_dim <= 0)
    return Status::InvalidArgument(StrCat("head_dim ", g.head_dim, " must be positive"));
  if (g.dtype == KvDtype::kNVFP4 && g.head_dim % kNvfp4BlockSize != 0) {
    return Status::InvalidArgument(
        StrCat("head_dim ", g.head_dim, " is not a multiple of 16, which nvfp4 block scales need"));
  }

  KvPoolLayout out;
  out.dtype = g.dtype;
  auto tensor = [&](int layers, int kv_factor, int heads, int inner, int bits) {
    PagedTensorLayout t;
    t.order = g.layout;
    t.num_layers = layers;
    t.kv_factor = kv_factor;
    t.num_heads = heads;
    t.tokens_per_block = tpb;
    t.inner = inner;
    t.bits = bits;
    return t;
  };
  out.components[0] =
      tensor(g.num_layers, g.kv_factor, g.num_kv_heads, g.head_dim, KvDtypeBits(g.dtype));
  switch (ScaleKindOf(g.dtype)) {
    case KvScaleKind::kPerTokenHead:
      out.components[1] = tensor(g.num_layers, g.kv_factor, g.num_kv_heads, 1, 32);
      break;
    case KvScaleKind::kBlock16:
      out.components[1] =
          tensor(g.num_layers, g.kv_factor, g.num_kv_heads, g.head_dim / kNvfp4BlockSize, 8);
      break;
    case KvScaleKind::kNone: break;
  }

  if (g.index_layers < 0) {
    return Status::InvalidArgument(
        StrCat("index_layers ", g.index_layers, " must not be negative"));
  }
  if (g.index_layers > 0) {
    if (g.index_layers > g.num_layers) {
      return Status::InvalidArgument(
          StrCat("index_layers ", g.index_layers, " exceeds the pool's ", g.num_layers, " layers"));
    }
    if (g.index_head_dim <= 0 || g.index_quant_block <= 0 ||
        g.index_head_dim % g.index_quant_block != 0) {
      return Status::InvalidArgument(StrCat("index_head_dim ", g.index_head_dim,
                                            " must be a positive multiple of index_quant_block ",
                                            g.index_quant_block));
    }
    if (g.index_fp4 && g.index_head_dim % 2 != 0) {
      return Status::InvalidArgument(
          StrCat("index_head_dim ", g.index_head_dim, " must be even for FP4"));
    }
    out.components[2] = tensor(g.index_layers, 1, 1, g.index_head_dim, g.index_fp4 ? 4 : 8);
    out.components[3] = tensor(g.index_layers, 1, 1, g.index_head_dim / g.index_quant_block, 32);
  }
  return out;
}

KvPoolLayout WithOrder(const KvPoolLayout& layout, KvLayout order) {
  KvPoolLayout out = layout;
  for (auto& c : out.components) {
    if (c.present())
      c.order = order;  // absent components keep their defaults, as MakeKvPoolLayout leaves them
  }
  return out;
}

}  // namespace kvmesh
