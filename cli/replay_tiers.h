// `kvctl replay` with tiers: the flags that put a host tier and a RocksDB tier behind the replay's
// pool (store/tiered_replay.h), and the tier part of the text and JSON output (docs/kvctl.md).
// Internal to cli/. Not thread-safe.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "common/result.h"
#include "store/tiered_replay.h"

namespace kvmesh::cli {

struct ReplayTierFlags {
  std::string host_blocks;  // a count ("58600", "58.6k"); empty or 0: no host tier
  std::string disk_blocks;  // empty or 0: no RocksDB tier
  std::string disk_path;    // empty: a temporary directory
  bool keep_disk = false;
  std::string block_bytes;  // empty: 4KiB
  int offload_min_priority = kTierDefaultPriority;
  int copy_threads = 1;

  // Whether any flag that asks for tiers was given.
  [[nodiscard]] bool any() const { return !host_blocks.empty() || !disk_blocks.empty(); }
};

void AddReplayTierFlags(CLI::App* sub, ReplayTierFlags* flags);

// The tier options, or nullopt when no tier is asked for. kInvalidArgument naming the flag: bad
// counts or bytes, --disk-path/--keep-disk/--tier-block-bytes/... without a tier, tiers without a
// pool capacity or with --sweep.
Result<std::optional<TieredReplayOptions>> ResolveReplayTiers(const ReplayTierFlags& flags,
                                                              bool has_capacity, bool sweep);

void PrintReplayTiersText(const ReplayResult& result, const TieredReplayStats& tiers,
                          std::ostream& out);
// The "tiers" object of kvmesh.replay/1 (null without tiers is written by the caller).
nlohmann::ordered_json ReplayTiersJson(const ReplayResult& result, const TieredReplayStats& tiers);

}  // namespace kvmesh::cli
