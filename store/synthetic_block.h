// Synthetic block content: bytes that are a pure function of a block's content id, written into a
// pool block and checked there. The replay with tiers (store/tiered_replay.h), its benchmark and
// tests use it to give every block real, distinct bytes that any later reader can check without
// keeping a copy: a block restored from a tier must hold exactly the bytes its content id gives.
//
// Every present component of the block (data, scale, index_k, index_scale) is filled from a
// splitmix64 stream seeded by the content id and the component; any byte pattern is acceptable to
// the tiers, which store and verify bytes without interpreting them.
//
// Thread safety: pure functions over caller-owned memory (reentrant; callers own the block).
#pragma once

#include <cstdint>

#include "common/content_id.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {

// Writes the content of `id` into block `block` of `pool`. REQUIRES: 0 <= block < num_blocks.
void FillSyntheticBlock(const KvPoolView& pool, std::int64_t block, const ContentId& id);

// Whether block `block` of `pool` holds exactly the content of `id`.
bool SyntheticBlockMatches(const KvPoolView& pool, std::int64_t block, const ContentId& id);

}  // namespace kvmesh
