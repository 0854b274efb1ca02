// TierFolder: the RocksDB tier's claim on its directory — whose folder it is, that no other process
// uses it, whether what is in it is whole, and moving a damaged folder aside. Internal to store/
// (rocksdb_tier_open.cc); the rules are in docs/disk-tier.md.
//
// Files of ours in the folder, besides RocksDB's:
//   KVMESH-TIER   the ownership marker, written (atomically: temporary file, sync, rename) before
//                 RocksDB creates anything:  "kvmesh rocksdb tier\nformat 2\nnamespace <name>\n"
//   KVMESH-LOCK   an fcntl lock held while a process has the tier open
//   KVMESH-STATE  "flushed_sequence <n>\n": the largest RocksDB sequence number a completed flush
//                 persisted (written after each flush, see RocksDbTier's flush listener)
//
// Claim(path, namespace) decides, without writing anything into a folder that is not provably
// ours:
//   missing or empty folder                → created, locked, marked: kFresh
//   marker of this format and namespace    → locked: kExisting (CURRENT present), or kFresh (no
//                                            RocksDB file at all), or damaged (RocksDB files but
//                                            no CURRENT: a lost CURRENT)
//   marker of a newer format               → kNotSupported, nothing touched
//   marker of another namespace            → kFailedPrecondition, nothing touched
//   no marker, a RocksDB database whose every column family is named as kvmesh names its pools
//   ("pool.<id>.<32 hex>[.meta]"): a tier written before the marker existed (format 1)
//                                          → locked, marked (warn): kExisting
//   anything else (another application's database, unrelated files, an unreadable marker)
//                                          → kFailedPrecondition, nothing touched
//   the lock held by another process       → kFailedPrecondition in our words
//
// Thread safety: externally synchronised (used by RocksDbTier::Open and the tier's destructor).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace rocksdb {
class Env;
class FileLock;
}  // namespace rocksdb

namespace kvmesh::rocksdb_tier {

inline constexpr int kFolderFormat = 2;
inline constexpr std::string_view kMarkerFile = "KVMESH-TIER";
inline constexpr std::string_view kLockFile = "KVMESH-LOCK";
inline constexpr std::string_view kStateFile = "KVMESH-STATE";

enum class FolderState : std::uint8_t {
  kFresh,     // no database yet: RocksDB creates one
  kExisting,  // a database to open
  kDamaged,   // ours, but not openable as it is (damage() says why)
};

class TierFolder {
 public:
  TierFolder() = default;
  TierFolder(TierFolder&& other) noexcept;
  TierFolder& operator=(TierFolder&& other) noexcept;
  TierFolder(const TierFolder&) = delete;
  TierFolder& operator=(const TierFolder&) = delete;
  ~TierFolder();  // releases the lock

  static Result<TierFolder> Claim(rocksdb::Env* env, const std::string& path,
                                  std::string_view namespace_name);

  [[nodiscard]] FolderState state() const { return state_; }
  [[nodiscard]] const std::string& damage() const { return damage_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] bool adopted_format1() const { return adopted_format1_; }

  // Renames the folder to "<path>.damaged-<UTC time>" (kept for inspection), then claims a fresh,
  // empty folder at `path`. Returns where the old folder went.
  Result<std::string> MoveAsideAndRestart(std::string_view namespace_name);

  // The last flushed sequence number recorded in KVMESH-STATE (0 when none or unreadable).
  [[nodiscard]] std::uint64_t RecordedFlushedSequence() const;
  // Records it (temporary file, sync, rename). Errors are returned, not logged.
  Status RecordFlushedSequence(std::uint64_t sequence) const;

 private:
  Status Lock();
  void Unlock();
  Status WriteMarker(std::string_view namespace_name) const;
  Status Inspect(std::string_view namespace_name);

  rocksdb::Env* env_ = nullptr;
  std::string path_;
  rocksdb::FileLock* lock_ = nullptr;
  FolderState state_ = FolderState::kFresh;
  std::string damage_;
  bool adopted_format1_ = false;
};

// Whether a column family name is one kvmesh gives its pools ("pool.<id>.<32 hex>[.meta]").
bool IsPoolFamilyName(std::string_view name);

}  // namespace kvmesh::rocksdb_tier
