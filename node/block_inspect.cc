#include "node/block_inspect.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/aligned_buffer.h"
#include "common/strings.h"
#include "kernels/conversions.h"

namespace kvmesh {
namespace {

enum class Element : std::uint8_t { kFloat32, kBf16, kHalf, kE4M3, kInt8, kE2M1 };

Element ElementOf(KvComponent c, KvDtype dtype, int bits) {
  if (bits == 32) return Element::kFloat32;
  if (bits == 4) return Element::kE2M1;
  if (c != KvComponent::kData) return Element::kE4M3;  // block scales (UE4M3), indexer K (E4M3)
  switch (dtype) {
    case KvDtype::kBF16: return Element::kBf16;
    case KvDtype::kFP16: return Element::kHalf;
    case KvDtype::kINT8: return Element::kInt8;
    case KvDtype::kNVFP4: return Element::kE2M1;
    case KvDtype::kFP8:
    case KvDtype::kFP8PerTensor: return Element::kE4M3;
  }
  return Element::kE4M3;
}

float Decode(Element e, const std::uint8_t* bytes, std::int64_t i) {
  switch (e) {
    case Element::kFloat32: {
      float f = 0;
      std::memcpy(&f, bytes + i * 4, 4);
      return f;
    }
    case Element::kBf16: {
      std::uint16_t b = 0;
      std::memcpy(&b, bytes + i * 2, 2);
      return Bf16ToFloat(b);
    }
    case Element::kHalf: {
      std::uint16_t h = 0;
      std::memcpy(&h, bytes + i * 2, 2);
      return HalfToFloat(h);
    }
    case Element::kE4M3: return E4M3ToFloat(bytes[i]);
    case Element::kInt8: return static_cast<float>(static_cast<std::int8_t>(bytes[i]));
    case Element::kE2M1: {
      const std::uint8_t b = bytes[i / 2];
      return E2M1ToFloat(i % 2 == 0 ? (b & 0xF) : (b >> 4));  // low nibble first
    }
  }
  return 0;
}

void Range(Element e, const std::uint8_t* bytes, std::int64_t elements, rpc::ComponentReport* r) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  std::int64_t zeros = 0;
  std::int64_t non_finite = 0;
  for (std::int64_t i = 0; i < elements; ++i) {
    const float v = Decode(e, bytes, i);
    if (!std::isfinite(v)) {
      ++non_finite;
      continue;
    }
    if (v == 0) ++zeros;
    lo = std::min(lo, static_cast<double>(v));
    hi = std::max(hi, static_cast<double>(v));
  }
  r->set_has_range(non_finite < elements);
  r->set_min(non_finite < elements ? lo : 0);
  r->set_max(non_finite < elements ? hi : 0);
  r->set_zeros(zeros);
  r->set_non_finite(non_finite);
}

std::string Checksum(const std::uint8_t* bytes, std::int64_t n) {
  const auto digest = Sha256::Digest(bytes, static_cast<std::size_t>(n));
  return HexEncode(digest.data(), 16);
}

// A one-block pool of the same layout, for a tier to decode into.
struct Scratch {
  KvPoolView view;
  AlignedBuffer buffers[kNumKvComponents];
};

Result<Scratch> MakeScratch(const KvPoolView& pool) {
  Scratch s;
  s.view.layout = pool.layout;
  s.view.pool_scale = pool.pool_scale;
  s.view.num_blocks = 1;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const PagedTensorLayout& t = pool.layout.components[c];
    if (!t.present()) continue;
    KVMESH_ASSIGN_OR_RETURN(
        s.buffers[c], AlignedBuffer::Allocate(static_cast<std::size_t>(t.BytesPerBlock()), 64));
    s.view.base[c] = s.buffers[c].data();
  }
  return s;
}

// Reads the tier's copy of (pool p, id) and compares it with the pool block.
void CompareCopy(BlockTier* tier, std::string_view name, int p, const ContentId& id,
                 const KvPoolView& pool, std::int64_t block, rpc::TierCopyReport* r) {
  r->set_tier(std::string(name));
  r->set_first_difference(-1);
  if (tier == nullptr || !tier->Contains(TierPoolId{p}, id)) return;
  r->set_present(true);
  Result<Scratch> scratch = MakeScratch(pool);
  if (!scratch.ok()) {
    r->set_error(scratch.status().ToString());
    return;
  }
  const Status st = tier->Get(TierPoolId{p}, id, scratch->view, 0);
  if (st.code() == StatusCode::kNotFound) {  // evicted since Contains
    r->set_present(false);
    return;
  }
  if (!st.ok()) {
    r->set_error(StrCat(st.ToString(), st.code() == StatusCode::kCorruption
                                           ? " (the copy is corrupt; the tier dropped it)"
                                           : ""));
    return;
  }
  r->set_decodes(true);
  std::int64_t offset = 0;
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto kind = static_cast<KvComponent>(c);
    const PagedTensorLayout& t = pool.layout.components[c];
    if (!t.present()) continue;
    const std::uint8_t* a = pool.BlockBytes(kind, block);
    const std::uint8_t* b = scratch->view.BlockBytes(kind, 0);
    const std::int64_t n = t.BytesPerBlock();
    if (std::memcmp(a, b, static_cast<std::size_t>(n)) != 0) {
      std::int64_t i = 0;
      while (i < n && a[i] == b[i]) ++i;
      r->set_first_difference(offset + i);
      r->set_error(StrCat("differs from the pool block in component ", KvComponentName(kind),
                          " at byte ", i, " (block byte ", offset + i, ")"));
      return;
    }
    offset += n;
  }
  r->set_matches(true);
}

}  // namespace

void DescribeComponent(KvComponent c, const PagedTensorLayout& t, rpc::ComponentShape* out) {
  out->set_name(std::string(KvComponentName(c)));
  out->set_order(std::string(KvLayoutName(t.order)));
  out->set_num_layers(t.num_layers);
  out->set_kv_factor(t.kv_factor);
  out->set_num_heads(t.num_heads);
  out->set_tokens_per_block(t.tokens_per_block);
  out->set_inner(t.inner);
  out->set_bits(t.bits);
  out->set_bytes_per_block(t.BytesPerBlock());
}

Status InspectCachedBlock(TieredCache& cache, const NodePools& pools, const ContentId& id,
                          rpc::InspectBlockResponse* out) {
  BlockManager& m = cache.manager();
  KVMESH_ASSIGN_OR_RETURN(const PinnedBlocks pinned, m.PinByContentId(id));
  KVMESH_ASSIGN_OR_RETURN(const CachedBlockInfo info, m.FindBlock(id));
  out->set_content_id(info.content_id.ToHex());
  out->set_parent_id(info.parent_id.ToHex());
  out->set_depth(info.depth);
  out->set_priority(info.priority);
  out->set_tokens(info.num_tokens);
  OffloadEngine& engine = cache.engine();
  bool agree = true;
  for (int p = 0; p < m.num_pools(); ++p) {
    const RankPool& rp = pools.pools()[static_cast<std::size_t>(p)];
    const KvPoolView& view = engine.pools()[static_cast<std::size_t>(p)];
    rpc::PoolBlockReport* r = out->add_pools();
    r->set_pool(p);
    r->set_key(rp.name);
    r->set_block_id(info.block_ids[static_cast<std::size_t>(p)]);
    const std::uint32_t pins = info.pins[static_cast<std::size_t>(p)];
    r->set_pins(info.block_ids[static_cast<std::size_t>(p)] >= 0 && pins > 0 ? pins - 1 : pins);
    r->set_dtype(std::string(KvDtypeName(view.layout.dtype)));
    r->set_pool_scale(view.pool_scale);
    r->set_bytes(view.layout.BytesPerBlock());
    if (info.block_ids[static_cast<std::size_t>(p)] < 0) continue;
    // The pool block itself for host pools; a staged copy for device pools.
    KVMESH_ASSIGN_OR_RETURN(const HostBlock host_block,
                            engine.ReadBlock(p, info.block_ids[static_cast<std::size_t>(p)]));
    const KvPoolView& bytes_view = host_block.view();
    const std::int64_t block = host_block.block();
    for (int c = 0; c < kNumKvComponents; ++c) {
      const auto kind = static_cast<KvComponent>(c);
      const PagedTensorLayout& t = view.layout.components[c];
      if (!t.present()) continue;
      rpc::ComponentReport* cr = r->add_components();
      DescribeComponent(kind, t, cr->mutable_shape());
      const std::uint8_t* bytes = bytes_view.BlockBytes(kind, block);
      cr->set_checksum(Checksum(bytes, t.BytesPerBlock()));
      Range(ElementOf(kind, view.layout.dtype, t.bits), bytes, t.BlockStride(), cr);
    }
    CompareCopy(engine.host(), "host", p, id, bytes_view, block, r->add_tiers());
    CompareCopy(engine.disk(), "disk", p, id, bytes_view, block, r->add_tiers());
    for (const rpc::TierCopyReport& t : r->tiers()) agree = agree && (!t.present() || t.matches());
  }
  out->set_all_copies_agree(agree);
  return Status::Ok();
}

}  // namespace kvmesh
