#include "cli/replay_tiers.h"

#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

using Json = nlohmann::ordered_json;

Result<std::int64_t> CountFlag(std::string_view flag, const std::string& text) {
  auto n = ParseCount(text);
  if (!n.ok()) return n.status().WithContext(flag);
  return *n;
}

std::string Traffic(const TierTraffic& t) {
  return StrCat(t.blocks, " blocks, ", FormatBytes(t.bytes), " (",
                FormatFixed(t.bytes_per_s() / 1e9, 2), " GB/s over ", FormatFixed(t.copy_s, 3),
                " s of copies)");
}

Json TrafficJson(const TierTraffic& t) {
  return Json{{"blocks", t.blocks},
              {"bytes", t.bytes},
              {"copy_seconds", t.copy_s},
              {"bytes_per_second", t.bytes_per_s()}};
}

}  // namespace

void AddReplayTierFlags(CLI::App* sub, ReplayTierFlags* f) {
  sub->add_option("--host-tier-blocks", f->host_blocks,
                  "Host tier behind the pool, in blocks (e.g. 58600); needs --capacity-blocks");
  sub->add_option("--disk-tier-blocks", f->disk_blocks,
                  "RocksDB tier behind the host tier, in blocks (e.g. 586000)");
  sub->add_option("--disk-path", f->disk_path,
                  "Directory of the RocksDB tier (kept; default: a temporary directory, removed)")
      ->check([](const std::string& path) {
        // CLI11 names the flag itself: "--disk-path: <this>".
        return path.empty() ? std::string(
                                  "empty: give a folder, or leave the flag out for a "
                                  "temporary one")
                            : std::string();
      });
  sub->add_flag("--keep-disk", f->keep_disk, "Keep the temporary RocksDB directory");
  sub->add_option("--tier-block-bytes", f->block_bytes,
                  "Bytes of one block in the pool and the tiers (default 4KiB: 1 layer, K and V, "
                  "1 head, FP8, head_dim = bytes / (2 x tokens per block))");
  sub->add_option("--offload-min-priority", f->offload_min_priority,
                  "Evicted blocks below this priority are not offloaded (0-101)")
      ->capture_default_str();
  sub->add_option("--copy-threads", f->copy_threads,
                  "Copy workers of the offload engine (0: synchronous copies)")
      ->capture_default_str();
}

Result<std::optional<TieredReplayOptions>> ResolveReplayTiers(const ReplayTierFlags& f,
                                                              bool has_capacity, bool sweep) {
  if (!f.any()) {
    if (!f.disk_path.empty() || f.keep_disk || !f.block_bytes.empty() ||
        f.offload_min_priority != kTierDefaultPriority || f.copy_threads != 1) {
      return Status::InvalidArgument(
          "--disk-path, --keep-disk, --tier-block-bytes, --offload-min-priority and "
          "--copy-threads apply with --host-tier-blocks or --disk-tier-blocks only");
    }
    return std::optional<TieredReplayOptions>();
  }
  if (sweep) return Status::InvalidArgument("--sweep does not take tiers");
  if (!has_capacity) {
    return Status::InvalidArgument(
        "tiers need a pool capacity (--capacity-blocks or --capacity-bytes)");
  }
  TieredReplayOptions o;
  if (!f.host_blocks.empty()) {
    KVMESH_ASSIGN_OR_RETURN(o.host_blocks, CountFlag("--host-tier-blocks", f.host_blocks));
  }
  if (!f.disk_blocks.empty()) {
    KVMESH_ASSIGN_OR_RETURN(o.disk_blocks, CountFlag("--disk-tier-blocks", f.disk_blocks));
  }
  if (o.host_blocks == 0 && o.disk_blocks == 0) {
    return Status::InvalidArgument(
        f.host_blocks.empty() || f.disk_blocks.empty()
            ? StrCat(f.host_blocks.empty() ? "--disk-tier-blocks" : "--host-tier-blocks",
                     " is 0: no tier (give a number of blocks, or leave the flag out)")
            : std::string("--host-tier-blocks and --disk-tier-blocks are both 0: no tier"));
  }
  if (o.disk_blocks == 0 && (!f.disk_path.empty() || f.keep_disk)) {
    return Status::InvalidArgument("--disk-path and --keep-disk need --disk-tier-blocks");
  }
  if (!f.disk_path.empty() && f.keep_disk) {
    return Status::InvalidArgument(
        "--keep-disk applies to the temporary directory only (a "
        "--disk-path is always kept)");
  }
  if (!f.block_bytes.empty()) {
    auto bytes = ParseBytes(f.block_bytes);
    if (!bytes.ok()) return bytes.status().WithContext("--tier-block-bytes");
    o.block_bytes = *bytes;
  }
  if (f.offload_min_priority < kTierMinPriority || f.offload_min_priority > kTierMaxPriority + 1) {
    return Status::InvalidArgument(StrCat("--offload-min-priority ", f.offload_min_priority,
                                          " is outside 0..", kTierMaxPriority + 1));
  }
  if (f.copy_threads < 0 || f.copy_threads > 64) {
    return Status::InvalidArgument(StrCat("--copy-threads ", f.copy_threads, " is outside 0..64"));
  }
  o.disk_path = f.disk_path;
  o.keep_disk = f.keep_disk;
  o.offload_min_priority = f.offload_min_priority;
  o.copy_threads = f.copy_threads;
  return std::optional<TieredReplayOptions>(o);
}

namespace {

// Puts into the RocksDB tier that failed: spills from the host tier, or offloads without one.
std::int64_t FailedDiskPuts(const OffloadStats& s) {
  return s.spill_failed + (s.has_host ? 0 : s.offload_failed);
}

// The disk tier's state: what it holds durably, its size on disk, whether it is disabled and
// why, failed puts, damage found at open.
void PrintDiskText(const OffloadStats& s, std::ostream& out) {
  const TierStats& d = s.disk;
  out << "disk        " << d.durable_entries << " blocks durable";
  if (d.entries > d.durable_entries)
    out << " (" << d.entries - d.durable_entries << " more not yet flushed)";
  out << ", " << FormatBytes(d.disk_bytes) << " on disk of " << FormatBytes(d.capacity_bytes)
      << "; " << FailedDiskPuts(s) << " puts failed";
  if (d.over_capacity > 0) out << " (" << d.over_capacity << " at capacity)";
  out << "\n";
  if (d.disabled) out << "            DISABLED after: " << d.disabled_reason << "\n";
  if (!d.damage.empty()) out << "            damaged at open: " << d.damage << "\n";
}

Json DiskJson(const OffloadStats& s) {
  const TierStats& d = s.disk;
  return Json{{"disabled", d.disabled},
              {"error", d.disabled ? Json(d.disabled_reason) : Json(nullptr)},
              {"failed_puts", FailedDiskPuts(s)},
              {"over_capacity", d.over_capacity},
              {"durable_entries", d.durable_entries},
              {"unflushed_entries", d.entries - d.durable_entries},
              {"bytes_on_disk", d.disk_bytes},
              {"capacity_bytes", d.capacity_bytes},
              {"flushes", d.flushes},
              {"damage", d.damage.empty() ? Json(nullptr) : Json(d.damage)}};
}

}  // namespace

void PrintReplayTiersText(const ReplayResult& r, const TieredReplayStats& t, std::ostream& out) {
  const OffloadStats& s = t.offload;
  const KvPoolGeometry& g = t.geometry;
  out << "tiers       host " << t.host_blocks << " blocks";
  if (t.host_blocks > 0) out << " (" << r.policy_name() << ")";
  out << ", disk " << t.disk_blocks << " blocks";
  if (!t.disk_path.empty()) {
    out << " (" << t.disk_path << (t.disk_kept ? ", kept" : ", removed") << ")";
  }
  out << "\n            block " << FormatBytes(t.block_bytes) << " (bundle " << t.bundle_bytes
      << " B): " << g.num_layers << " layer, K and V, " << g.num_kv_heads << " head, head_dim "
      << g.head_dim << ", fp8_per_tensor\n";
  out << "hits        pool " << r.reused_blocks << ", host " << t.host_hit_blocks << ", disk "
      << t.disk_hit_blocks << ", missed " << r.input_blocks - r.reused_blocks - r.restored_blocks
      << "\n";
  out << "with tiers  hit rate " << FormatFixed(r.hit_rate_with_tiers(), 4) << "\n";
  out << "offload     " << Traffic(s.offload) << "\n";
  out << "            skipped: " << s.skipped_clean << " clean (in a tier already), "
      << s.skipped_priority << " below priority; " << s.offload_failed << " failed; "
      << s.offload_helped << " copied by the replay while it waited for them\n";
  if (s.has_disk) {
    out << "spill       " << Traffic(s.spill) << "; " << s.spill_failed << " failed\n";
  }
  out << "onboard     host " << Traffic(s.onboard_host) << "\n";
  if (s.has_disk) out << "            disk " << Traffic(s.onboard_disk) << "\n";
  out << "checked     " << t.verified_blocks << " restored blocks, " << t.mismatched_blocks
      << " mismatched, " << s.onboard_corrupt << " corrupt reads\n";
  if (s.has_disk) PrintDiskText(s, out);
}

Json ReplayTiersJson(const ReplayResult& r, const TieredReplayStats& t) {
  const OffloadStats& s = t.offload;
  const KvPoolGeometry& g = t.geometry;
  Json j;
  j["host_blocks"] = t.host_blocks;
  // The host tier evicts by the replay's --policy (null without a host tier).
  j["host_policy"] = t.host_blocks > 0 ? Json(std::string(r.policy_name())) : Json(nullptr);
  j["disk_blocks"] = t.disk_blocks;
  j["disk_path"] = t.disk_path.empty() ? Json(nullptr) : Json(t.disk_path);
  j["disk_kept"] = t.disk_kept;
  j["block_bytes"] = t.block_bytes;
  j["bundle_bytes"] = t.bundle_bytes;
  j["geometry"] = Json{{"num_layers", g.num_layers},
                       {"kv_factor", g.kv_factor},
                       {"num_kv_heads", g.num_kv_heads},
                       {"head_dim", g.head_dim},
                       {"dtype", "fp8_per_tensor"}};
  j["hit_rate_with_tiers"] = r.hit_rate_with_tiers();
  j["hits"] = Json{{"pool", r.reused_blocks},
                   {"host", t.host_hit_blocks},
                   {"disk", t.disk_hit_blocks},
                   {"missed", r.input_blocks - r.reused_blocks - r.restored_blocks}};
  j["offload"] = TrafficJson(s.offload);
  j["spill"] = TrafficJson(s.spill);
  j["onboard_host"] = TrafficJson(s.onboard_host);
  j["onboard_disk"] = TrafficJson(s.onboard_disk);
  j["skipped_clean"] = s.skipped_clean;
  j["skipped_priority"] = s.skipped_priority;
  j["offload_failed"] = s.offload_failed;
  j["offload_helped"] = s.offload_helped;
  j["spill_failed"] = s.spill_failed;
  j["corrupt_reads"] = s.onboard_corrupt;
  j["verified_blocks"] = t.verified_blocks;
  j["mismatched_blocks"] = t.mismatched_blocks;
  j["host_entries"] = s.host.entries;
  j["disk_entries"] = s.disk.durable_entries;  // what a crash keeps (the disk object has more)
  j["disk"] = s.has_disk ? DiskJson(s) : Json(nullptr);
  return j;
}

}  // namespace kvmesh::cli
