// Helpers of the node_config tests: parse text that must fail (its message) or succeed (its value).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>

#include "node/node_config.h"

namespace kvmesh {

// The message of a parse that must fail with kInvalidArgument.
inline std::string ParseError(std::string_view text) {
  Result<NodeConfig> r = ParseNodeConfig(text, "kvnode.yaml");
  if (r.ok()) return "(parsed)";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  return r.status().message();
}

inline NodeConfig ParseOk(std::string_view text, const std::string& base_dir = "") {
  Result<NodeConfig> r = ParseNodeConfig(text, "kvnode.yaml", base_dir);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << text;
  return r.ok() ? *r : NodeConfig{};
}

// A disk_tier section with no key at its default (the YAML of node_config_test's kEveryKey).
inline DiskTierSection DiskTierNoKeyAtDefault() {
  DiskTierSection d;
  d.enabled = false;
  d.path = "/ssd/kv";
  d.capacity = 20ll << 30;
  d.durability = DiskDurability::kWal;
  d.flush_interval = std::chrono::milliseconds(250);
  d.wal_sync = true;
  d.on_damage = DiskDamagePolicy::kStayOff;
  d.verify_checksums = true;
  d.direct_io = true;
  d.write_buffer = 16ll << 20;
  d.block_cache = 0;
  d.background_jobs = 4;
  return d;
}

}  // namespace kvmesh
