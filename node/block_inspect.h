// InspectCachedBlock: everything about one cached block, for `kvctl inspect BLOCK`.
//
// The block (a prefix-tree node) is pinned for the whole inspection, so neither eviction nor a
// writer touches its pool blocks meanwhile. For every pool:
//   - every present component (data: K/V or the MLA latent; scale: FP32 per token and head for
//     fp8/int8, UE4M3 per 16 elements for nvfp4; indexer K and its scales): its shape, bytes, a
//     checksum (the first 128 bits of SHA-256 of the block's bytes of that component, hex), and
//     the range of its decoded values (min, max, zeros, non-finite) — scales as FP32, data decoded
//     from its element format (bf16, fp16, E4M3, int8 codes, E2M1 codes);
//   - each tier copy (host, disk): whether the tier holds one, whether it decodes (the tier's
//     verification: structure, geometry, content id, checksum) and whether every byte of every
//     component equals the pool block's (else the first differing byte offset, components in
//     kind order).
// A tier copy that fails verification is reported corrupt; by the tiers' contract (store/tier.h)
// the tier erases it while reading, so the next inspection says the tier holds no copy.
//
// Errors: kNotFound when no cached block has the id (nothing else is an error: problems of a
// copy are part of the report).
//
// Thread safety: thread-safe (the cache's calls are).
#pragma once

#include "common/content_id.h"
#include "common/status.h"
#include "node/node_pools.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "store/tiered_cache.h"

namespace kvmesh {

Status InspectCachedBlock(TieredCache& cache, const NodePools& pools, const ContentId& id,
                          rpc::InspectBlockResponse* out);

// The shape of one component as the operator messages describe it.
void DescribeComponent(KvComponent c, const PagedTensorLayout& t, rpc::ComponentShape* out);

}  // namespace kvmesh
