// The pool geometry and tier options shared by the crash test and its child process.
#pragma once

#include <string>

#include "store/rocksdb_tier.h"
#include "tests/store/store_test_util.h"

namespace kvmesh::store_test {

inline constexpr TierPoolId kCrashPool{3};

// 1 layer, K and V, 2 heads, 16 tokens, head_dim 64, bf16: 8 KiB blocks.
inline Shape CrashShape() {
  Shape s;
  s.name = "crash";
  s.geometry.dtype = KvDtype::kBF16;
  s.geometry.num_layers = 1;
  s.geometry.kv_factor = 2;
  s.geometry.num_kv_heads = 2;
  s.geometry.tokens_per_block = 16;
  s.geometry.head_dim = 64;
  return s;
}

// Small write buffers, so that flushes and compactions run all the time and kills land in them.
inline RocksDbTierOptions CrashTierOptions(const std::string& path, bool wal) {
  RocksDbTierOptions o;
  o.path = path;
  o.capacity_bytes = 1ll << 34;  // never evicts: absence can only come from the crash
  o.pools = {{kCrashPool, LayoutOf(CrashShape().geometry), 1.0f}};
  o.durability = wal ? DiskDurability::kWal : DiskDurability::kNone;
  o.write_buffer_bytes = 1 << 20;
  o.max_write_buffer_number = 2;
  return o;
}

}  // namespace kvmesh::store_test
