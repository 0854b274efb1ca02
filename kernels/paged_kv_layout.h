// Paged KV layout: where every element of every component of a pool block lies in memory.
//
// A pool is a set of component tensors that share block ids (block 17 is the same slice in every
// layer and in every component). Each component is a 6-D tensor:
//
//   HND: [max_blocks, num_layers, kv_factor, num_heads, tokens_per_block, inner]
//   NHD: [max_blocks, num_layers, kv_factor, tokens_per_block, num_heads, inner]
//
// Components of one pool (KvComponent):
//   kData        K/V (kv_factor 2) or the MLA latent (kv_factor 1, 1 head, inner = kv_lora_rank +
//                qk_rope_head_dim = 576 for DeepSeek-V3); inner = head_dim, bits = dtype bits.
//   kScale       fp8/int8: FP32 scale per (token, head), inner 1; nvfp4: UE4M3 scale per 16
//   elements,
//                inner head_dim/16. Absent for bf16/fp16/fp8_per_tensor. Same order as kData.
//   kIndexK      sparse-attention indexer K (DeepSeek-V3.2): only the layers the model's mask
//   selects,
//                kv_factor 1, 1 head, inner = index_head_dim, 8 bits (E4M3) or 4 bits (E2M1).
//   kIndexScale  FP32 scale per quant block (default 128 elements) of kIndexK, inner =
//                index_head_dim / quant_block.
// A pool-wide FP32 constant (fp8_per_tensor scale, nvfp4 global scale) is not in the layout: it
// belongs to the pool (KvPoolView::pool_scale) and travels with every block that leaves it.
//
// Strides in elements (both orders):
//   HND: token = inner, head = tokens_per_block * inner
//   NHD: token = num_heads * inner, head = inner
//   kv = num_heads * tokens_per_block * inner; layer = kv_factor * kv; block = num_layers * layer
// Byte offset = element offset * bits / 8; for 4-bit components inner is even, so every row starts
// on a byte and element 2i is the low nibble of its byte, 2i+1 the high nibble.
//
// The structs here are plain values usable from host and device code; they own no memory.
// Thread-safe.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "common/result.h"
#include "kernels/kv_format.h"

namespace kvmesh {

enum class KvComponent : std::uint8_t { kData = 0, kScale = 1, kIndexK = 2, kIndexScale = 3 };
inline constexpr int kNumKvComponents = 4;

std::string_view KvComponentName(KvComponent c);  // "data", "scale", "index_k", "index_scale"

// One 6-D component tensor. num_layers == 0 means the component is absent.
struct PagedTensorLayout {
  KvLayout order = KvLayout::kHND;
  std::int32_t num_layers = 0;
  std::int32_t kv_factor = 0;
  std::int32_t num_heads = 0;
  std::int32_t tokens_per_block = 0;
  std::int32_t inner = 0;  // elements in the innermost dimension
  std::int32_t bits = 0;   // bits per element: 4, 8, 16 or 32

  KVMESH_HOST_DEVICE [[nodiscard]] constexpr bool present() const { return num_layers > 0; }

  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t TokenStride() const {
    return order == KvLayout::kHND ? std::int64_t{inner} : std::int64_t{num_heads} * inner;
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t HeadStride() const {
    return order == KvLayout::kHND ? std::int64_t{tokens_per_block} * inner : std::int64_t{inner};
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t KvStride() const {
    return std::int64_t{num_heads} * tokens_per_block * inner;
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t LayerStride() const {
    return kv_factor * KvStride();
  }
  // Elements of one block of this component; also the stride between blocks.
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t BlockStride() const {
    return num_layers * LayerStride();
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t BytesPerBlock() const {
    return BlockStride() * bits / 8;
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t RowBytes() const {
    return std::int64_t{inner} * bits / 8;
  }

  // Element offset from the start of the component tensor.
  // REQUIRES: every index is inside its dimension.
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t ElementOffset(std::int64_t block,
                                                                        int layer, int kv, int head,
                                                                        int token, int dim) const {
    return block * BlockStride() + layer * LayerStride() + kv * KvStride() + head * HeadStride() +
           token * TokenStride() + dim;
  }
  // Element offset inside one block (block 0).
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t OffsetInBlock(int layer, int kv, int head,
                                                                        int token, int dim) const {
    return ElementOffset(0, layer, kv, head, token, dim);
  }
  // Byte holding the element. For 4-bit components the element is the low nibble when its element
  // offset is even and the high nibble when odd.
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t ByteOffset(std::int64_t block, int layer,
                                                                     int kv, int head, int token,
                                                                     int dim) const {
    return ElementOffset(block, layer, kv, head, token, dim) * bits / 8;
  }

  friend constexpr bool operator==(const PagedTensorLayout&, const PagedTensorLayout&) = default;
};

// The shape parameters of a pool, from which every component layout follows.
struct KvPoolGeometry {
  KvDtype dtype = KvDtype::kBF16;
  KvLayout layout = KvLayout::kHND;
  std::int32_t num_layers = 0;
  std::int32_t kv_factor = 2;  // 1 for MLA
  std::int32_t num_kv_heads = 0;
  std::int32_t tokens_per_block = 0;
  std::int32_t head_dim = 0;  // 576 for the DeepSeek MLA latent
  // Sparse-attention indexer; index_layers == 0 means none.
  std::int32_t index_layers = 0;
  std::int32_t index_head_dim = 0;
  std::int32_t index_quant_block = 128;
  bool index_fp4 = false;

  friend constexpr bool operator==(const KvPoolGeometry&, const KvPoolGeometry&) = default;
};

struct KvPoolLayout {
  KvDtype dtype = KvDtype::kBF16;
  PagedTensorLayout components[kNumKvComponents];

  KVMESH_HOST_DEVICE [[nodiscard]] constexpr const PagedTensorLayout& component(
      KvComponent c) const {
    return components[static_cast<int>(c)];
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr const PagedTensorLayout& data() const {
    return component(KvComponent::kData);
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr const PagedTensorLayout& scale() const {
    return component(KvComponent::kScale);
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr const PagedTensorLayout& index_k() const {
    return component(KvComponent::kIndexK);
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr const PagedTensorLayout& index_scale() const {
    return component(KvComponent::kIndexScale);
  }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr KvLayout order() const { return data().order; }
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr int tokens_per_block() const {
    return data().tokens_per_block;
  }

  // Bytes of one block over every present component.
  KVMESH_HOST_DEVICE [[nodiscard]] constexpr std::int64_t BytesPerBlock() const {
    std::int64_t total = 0;
    for (const auto& c : components) total += c.present() ? c.BytesPerBlock() : 0;
    return total;
  }

  friend constexpr bool operator==(const KvPoolLayout&, const KvPoolLayout&) = default;
};

// Builds the layout of every component, or kInvalidArgument naming the offending parameter:
// tokens_per_block a power of two > 1; positive layers, heads and head_dim; kv_factor 1 or 2;
// head_dim a multiple of 16 for nvfp4; index_head_dim a multiple of index_quant_block (and even for
// FP4).
Result<KvPoolLayout> MakeKvPoolLayout(const KvPoolGeometry& g);

// The same pool in the other order (every component), e.g. for an HND↔NHD copy.
KvPoolLayout WithOrder(const KvPoolLayout& layout, KvLayout order);

// Runtime view of a pool: the layout plus the base of each component tensor. Does not own memory.
struct KvPoolView {
  KvPoolLayout layout;
  std::int64_t num_blocks = 0;
  void* base[kNumKvComponents] = {nullptr, nullptr, nullptr, nullptr};  // null when absent
  float pool_scale = 1.0f;  // fp8_per_tensor scale or nvfp4 global scale; 1 otherwise

  // First byte of `block` in component `c`.
  // REQUIRES: the component is present and 0 <= block < num_blocks.
  KVMESH_HOST_DEVICE [[nodiscard]] std::uint8_t* BlockBytes(KvComponent c,
                                                            std::int64_t block) const {
    return static_cast<std::uint8_t*>(base[static_cast<int>(c)]) +
           block * layout.component(c).BytesPerBlock();
  }
};

}  // namespace kvmesh
