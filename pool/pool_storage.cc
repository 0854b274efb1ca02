#include "pool/pool_storage.h"

#include <cstring>

#include "common/strings.h"
#include "common/units.h"

namespace kvmesh {

Result<PoolStorage> PoolStorage::Allocate(std::span<const PoolMemorySpec> pools) {
  PoolStorage s;
  s.buffers_.resize(pools.size());
  for (std::size_t p = 0; p < pools.size(); ++p) {
    const PoolMemorySpec& spec = pools[p];
    if (spec.num_blocks <= 0) {
      return Status::InvalidArgument(
          StrCat("pool ", p, " num_blocks ", spec.num_blocks, " must be positive"));
    }
    if (!spec.layout.data().present()) {
      return Status::InvalidArgument(StrCat("pool ", p, " layout has no data component"));
    }
    KvPoolView view;
    view.layout = spec.layout;
    view.num_blocks = spec.num_blocks;
    view.pool_scale = spec.pool_scale;
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& t = spec.layout.components[c];
      if (!t.present()) continue;
      const std::int64_t per_block = t.BytesPerBlock();
      if (per_block <= 0 || spec.num_blocks > INT64_MAX / per_block) {
        return Status::InvalidArgument(StrCat("pool ", p, " component ",
                                              KvComponentName(static_cast<KvComponent>(c)),
                                              " size overflows"));
      }
      const std::int64_t bytes = per_block * spec.num_blocks;
      auto buffer = AlignedBuffer::Allocate(static_cast<std::size_t>(bytes));
      if (!buffer.ok()) {
        return Status::ResourceExhausted(
            StrCat("pool ", p, " component ", KvComponentName(static_cast<KvComponent>(c)),
                   " needs ", FormatBytes(bytes), ": ", buffer.status().message()));
      }
      std::memset(buffer->data(), 0, buffer->size());
      view.base[c] = buffer->data();
      s.buffers_[p][c] = std::move(buffer).value();
      s.total_bytes_ += bytes;
    }
    s.views_.push_back(view);
  }
  return s;
}

}  // namespace kvmesh
