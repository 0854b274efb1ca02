#include "kernels/block_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/strings.h"
#include "common/thread_pool.h"

namespace kvmesh {
namespace {

bool SameShape(const PagedTensorLayout& a, const PagedTensorLayout& b) {
  return a.num_layers == b.num_layers && a.kv_factor == b.kv_factor && a.num_heads == b.num_heads &&
         a.tokens_per_block == b.tokens_per_block && a.inner == b.inner && a.bits == b.bits;
}

// Copies tokens [0, n) of one block of one component.
void CopyComponentBlock(const PagedTensorLayout& s, const std::uint8_t* src,
                        const PagedTensorLayout& d, std::uint8_t* dst, int n) {
  const std::int64_t row = s.RowBytes();
  if (s.order == d.order) {
    if (n == s.tokens_per_block) {
      std::memcpy(dst, src, s.BytesPerBlock());
      return;
    }
    for (int l = 0; l < s.num_layers; ++l) {
      for (int kv = 0; kv < s.kv_factor; ++kv) {
        if (s.order == KvLayout::kHND) {
          // tokens of one head are contiguous
          for (int h = 0; h < s.num_heads; ++h) {
            const std::int64_t off = s.ByteOffset(0, l, kv, h, 0, 0);
            std::memcpy(dst + off, src + off, n * row);
          }
        } else {
          // the first n tokens of all heads are contiguous
          const std::int64_t off = s.ByteOffset(0, l, kv, 0, 0, 0);
          std::memcpy(dst + off, src + off, n * s.num_heads * row);
        }
      }
    }
    return;
  }
  // HND <-> NHD: row by row.
  for (int l = 0; l < s.num_layers; ++l) {
    for (int kv = 0; kv < s.kv_factor; ++kv) {
      for (int h = 0; h < s.num_heads; ++h) {
        for (int t = 0; t < n; ++t) {
          std::memcpy(dst + d.ByteOffset(0, l, kv, h, t, 0), src + s.ByteOffset(0, l, kv, h, t, 0),
                      row);
        }
      }
    }
  }
}

}  // namespace

Status CanImplementBlockCopy(const BlockCopyArgs& args) {
  const KvPoolLayout& s = args.src.layout;
  const KvPoolLayout& d = args.dst.layout;
  if (s.dtype != d.dtype) {
    return Status::InvalidArgument(
        StrCat("block copy between dtypes ", KvDtypeName(s.dtype), " and ", KvDtypeName(d.dtype)));
  }
  if (HasPoolScale(s.dtype) && args.src.pool_scale != args.dst.pool_scale) {
    return Status::InvalidArgument(StrCat("block copy between pools with different pool scales ",
                                          args.src.pool_scale, " and ", args.dst.pool_scale));
  }
  for (int c = 0; c < kNumKvComponents; ++c) {
    const auto& a = s.components[c];
    const auto& b = d.components[c];
    const auto name = KvComponentName(static_cast<KvComponent>(c));
    if (a.present() != b.present() || (a.present() && !SameShape(a, b))) {
      return Status::InvalidArgument(
          StrCat("block copy between pools whose ", name, " components differ"));
    }
    if (a.present() && (args.src.base[c] == nullptr || args.dst.base[c] == nullptr)) {
      return Status::InvalidArgument(StrCat("block copy: no base pointer for component ", name));
    }
  }
  const int tpb = s.tokens_per_block();
  if (args.num_tokens != -1 && (args.num_tokens < 0 || args.num_tokens > tpb)) {
    return Status::InvalidArgument(
        StrCat("block copy: num_tokens ", args.num_tokens, " outside [0, ", tpb, "]"));
  }
  if (args.num_pairs < 0 || (args.num_pairs > 0 && args.pairs == nullptr)) {
    return Status::InvalidArgument("block copy: no pairs");
  }
  const bool same_memory = args.src.base[0] == args.dst.base[0];
  std::vector<std::int64_t> dsts;
  dsts.reserve(args.num_pairs);
  for (std::int64_t i = 0; i < args.num_pairs; ++i) {
    const BlockCopyPair& p = args.pairs[i];
    if (p.src_block < 0 || p.src_block >= args.src.num_blocks || p.dst_block < 0 ||
        p.dst_block >= args.dst.num_blocks) {
      return Status::InvalidArgument(StrCat("block copy pair ", i, " (", p.src_block, " -> ",
                                            p.dst_block, ") out of range (", args.src.num_blocks,
                                            ", ", args.dst.num_blocks, " blocks)"));
    }
    if (same_memory && p.src_block == p.dst_block) {
      return Status::InvalidArgument(
          StrCat("block copy pair ", i, " copies block ", p.src_block, " onto itself"));
    }
    dsts.push_back(p.dst_block);
  }
  std::sort(dsts.begin(), dsts.end());
  if (std::adjacent_find(dsts.begin(), dsts.end()) != dsts.end()) {
    return Status::InvalidArgument("block copy names a destination block twice");
  }
  return Status::Ok();
}

namespace cpu {

Status CopyBlock(const KvPoolView& src, std::int64_t src_block, const KvPoolView& dst,
                 std::int64_t dst_block) {
  const BlockCopyPair pair{src_block, dst_block};
  BlockCopyArgs a;
  a.src = src;
  a.dst = dst;
  a.pairs = &pair;
  a.num_pairs = 1;
  return BlockCopy(a, nullptr);
}

Status BlockCopy(const BlockCopyArgs& args, ThreadPool* executor) {
  KVMESH_RETURN_IF_ERROR(CanImplementBlockCopy(args));
  const int n = args.num_tokens < 0 ? args.src.layout.tokens_per_block() : args.num_tokens;
  if (n == 0 || args.num_pairs == 0) return Status::Ok();
  auto copy_range = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const BlockCopyPair& p = args.pairs[i];
      for (int c = 0; c < kNumKvComponents; ++c) {
        const auto comp = static_cast<KvComponent>(c);
        const auto& sl = args.src.layout.component(comp);
        if (!sl.present()) continue;
        CopyComponentBlock(sl, args.src.BlockBytes(comp, p.src_block),
                           args.dst.layout.component(comp), args.dst.BlockBytes(comp, p.dst_block),
                           n);
      }
    }
  };
  if (executor == nullptr) {
    copy_range(0, args.num_pairs);
  } else {
    executor->ParallelFor(args.num_pairs, 1, copy_range);
  }
  return Status::Ok();
}

}  // namespace cpu
}  // namespace kvmesh
