// A TieredCache over one pool in emulated device memory (store/emulated_device.h): the cache sees
// only PROT_NONE addresses and stages every copy through host memory; the test writes and checks
// blocks through the pool's read-write alias. Rig (tiered_test_util.h) with emulated_device set.
#pragma once

#include "tests/store/tiered_test_util.h"

namespace kvmesh::store_test {

class DeviceRig : public Rig {
 public:
  // staging_blocks: blocks per staging area (0: the default area of 64 MiB).
  explicit DeviceRig(RigOptions o, std::int64_t staging_blocks = 0)
      : Rig(WithDevice(std::move(o), staging_blocks)) {}

  EmulatedDevice& device() { return *emulated_device(); }
  // The pool through its read-write alias (the test's view; never the cache's).
  const KvPoolView& alias() const { return view(); }
  const KvPoolView& device_view() const { return cache_view(); }

 private:
  static RigOptions WithDevice(RigOptions o, std::int64_t staging_blocks) {
    o.emulated_device = true;
    o.staging_blocks = staging_blocks;
    return o;
  }
};

}  // namespace kvmesh::store_test
