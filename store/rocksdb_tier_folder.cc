#include "store/rocksdb_tier_folder.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <sstream>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh::rocksdb_tier {
namespace {

constexpr std::string_view kMarkerMagic = "kvmesh rocksdb tier";

std::string Join(const std::string& dir, std::string_view name) { return StrCat(dir, "/", name); }

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Files kvmesh itself keeps in the folder (a folder holding only these is empty).
bool IsOurFile(std::string_view name) {
  return StartsWith(name, kMarkerFile) || StartsWith(name, kLockFile) ||
         StartsWith(name, kStateFile);
}

// Files RocksDB writes into a database folder.
bool IsRocksDbFile(std::string_view name) {
  return name == "CURRENT" || name == "IDENTITY" || name == "LOCK" || StartsWith(name, "LOG") ||
         StartsWith(name, "MANIFEST-") || StartsWith(name, "OPTIONS-") || EndsWith(name, ".sst") ||
         EndsWith(name, ".ldb") || EndsWith(name, ".log") || EndsWith(name, ".blob");
}

Result<std::vector<std::string>> Children(rocksdb::Env* env, const std::string& dir) {
  std::vector<std::string> names;
  const rocksdb::Status s = env->GetChildren(dir, &names);
  if (!s.ok()) return Status::IoError(StrCat("rocksdb tier: listing ", dir, ": ", s.ToString()));
  names.erase(std::remove_if(names.begin(), names.end(),
                             [](const std::string& n) { return n == "." || n == ".."; }),
              names.end());
  std::sort(names.begin(), names.end());
  return names;
}

std::string Sample(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) out += StrCat(i ? ", " : "", names[i]);
  if (names.size() > 5) out += StrCat(", ... (", names.size(), " in all)");
  return out;
}

Status CreateDirs(rocksdb::Env* env, const std::string& path) {
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (rocksdb::Status s = env->CreateDirIfMissing(prefix); !s.ok()) {
      return Status::IoError(StrCat("rocksdb tier: creating ", prefix, ": ", s.ToString()));
    }
  }
  return Status::Ok();
}

// Writes `data` to dir/name atomically: a temporary file, synced, renamed over the name.
Status WriteAtomically(rocksdb::Env* env, const std::string& dir, std::string_view name,
                       std::string_view data) {
  const std::string tmp = Join(dir, StrCat(name, ".tmp"));
  rocksdb::Status s =
      rocksdb::WriteStringToFile(env, rocksdb::Slice(data.data(), data.size()), tmp, true);
  if (s.ok()) s = env->RenameFile(tmp, Join(dir, name));
  if (!s.ok())
    return Status::IoError(StrCat("rocksdb tier: writing ", Join(dir, name), ": ", s.ToString()));
  return Status::Ok();
}

std::string UtcStamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

struct Marker {
  int format = 0;
  std::string ns;
};

// kFailedPrecondition when the text is not a kvmesh marker at all.
Result<Marker> ParseMarker(const std::string& path, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kMarkerMagic) {
    return Status::FailedPrecondition(
        StrCat("rocksdb tier: ", path, " has a ", kMarkerFile,
               " file that is not a kvmesh marker; refusing to use a folder that is not "
               "provably a kvmesh tier"));
  }
  Marker m;
  while (std::getline(in, line)) {
    if (StartsWith(line, "format ")) m.format = std::atoi(line.c_str() + 7);
    if (StartsWith(line, "namespace ")) m.ns = line.substr(10);
  }
  if (m.format <= 0) {
    return Status::FailedPrecondition(
        StrCat("rocksdb tier: the marker ", path, "/", kMarkerFile, " has no format line"));
  }
  return m;
}

}  // namespace

bool IsPoolFamilyName(std::string_view name) {
  if (EndsWith(name, ".meta")) name.remove_suffix(5);
  if (!StartsWith(name, "pool.")) return false;
  name.remove_prefix(5);
  const std::size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  const std::string_view id = name.substr(0, dot), fp = name.substr(dot + 1);
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  const bool id_ok = std::all_of(id.begin() + (id[0] == '-' ? 1 : 0), id.end(), digit);
  return id_ok && fp.size() == 32 && std::all_of(fp.begin(), fp.end(), hex);
}

TierFolder::TierFolder(TierFolder&& other) noexcept { *this = std::move(other); }

TierFolder& TierFolder::operator=(TierFolder&& other) noexcept {
  if (this != &other) {
    Unlock();
    env_ = other.env_;
    path_ = std::move(other.path_);
    lock_ = std::exchange(other.lock_, nullptr);
    state_ = other.state_;
    damage_ = std::move(other.damage_);
    adopted_format1_ = other.adopted_format1_;
  }
  return *this;
}

TierFolder::~TierFolder() { Unlock(); }

void TierFolder::Unlock() {
  if (lock_ == nullptr) return;
  if (rocksdb::Status s = env_->UnlockFile(lock_); !s.ok()) {
    KVMESH_LOG_WARN("rocksdb tier unlock failed path {} error {}", path_, s.ToString());
  }
  lock_ = nullptr;
}

Status TierFolder::Lock() {
  const std::string file = Join(path_, kLockFile);
  if (rocksdb::Status s = env_->LockFile(file, &lock_); !s.ok()) {
    lock_ = nullptr;
    return Status::FailedPrecondition(
        StrCat("rocksdb tier: ", path_,
               " is in use: another tier (in another process, or in this one) "
               "has it open and holds ",
               file, ". Each process needs a folder of its own (", s.ToString(), ")"));
  }
  return Status::Ok();
}

Status TierFolder::WriteMarker(std::string_view namespace_name) const {
  return WriteAtomically(
      env_, path_, kMarkerFile,
      StrCat(kMarkerMagic, "\nformat ", kFolderFormat, "\nnamespace ", namespace_name, "\n"));
}

Result<TierFolder> TierFolder::Claim(rocksdb::Env* env, const std::string& path,
                                     std::string_view namespace_name) {
  TierFolder f;
  f.env_ = env;
  f.path_ = path;
  while (f.path_.size() > 1 && f.path_.back() == '/') f.path_.pop_back();
  KVMESH_RETURN_IF_ERROR(CreateDirs(env, f.path_));
  KVMESH_RETURN_IF_ERROR(f.Inspect(namespace_name));
  return f;
}

Status TierFolder::Inspect(std::string_view namespace_name) {
  KVMESH_ASSIGN_OR_RETURN(const std::vector<std::string> names, Children(env_, path_));
  const bool has = std::find(names.begin(), names.end(), kMarkerFile) != names.end();
  const bool has_current = std::find(names.begin(), names.end(), "CURRENT") != names.end();
  std::vector<std::string> foreign, rocksdb_files;
  for (const auto& n : names) {
    if (IsRocksDbFile(n)) rocksdb_files.push_back(n);
    if (!IsOurFile(n)) foreign.push_back(n);
  }
  if (has) {
    std::string text;
    if (rocksdb::Status s = rocksdb::ReadFileToString(env_, Join(path_, kMarkerFile), &text);
        !s.ok()) {
      return Status::IoError(
          StrCat("rocksdb tier: reading ", path_, "/", kMarkerFile, ": ", s.ToString()));
    }
    KVMESH_ASSIGN_OR_RETURN(const Marker m, ParseMarker(path_, text));
    if (m.format > kFolderFormat) {
      return Status::NotSupported(StrCat("rocksdb tier: ", path_, " is a kvmesh tier of format ",
                                         m.format, "; this build reads format ", kFolderFormat,
                                         " and older. Use a newer kvmesh or another folder"));
    }
    if (m.ns != namespace_name) {
      return Status::FailedPrecondition(StrCat("rocksdb tier: ", path_, " belongs to namespace '",
                                               m.ns, "', this tier's is '", namespace_name,
                                               "'; refusing to mix them (give another folder)"));
    }
    KVMESH_RETURN_IF_ERROR(Lock());
    if (has_current) {
      state_ = FolderState::kExisting;
    } else if (!rocksdb_files.empty()) {
      state_ = FolderState::kDamaged;
      damage_ = StrCat("no CURRENT file, but RocksDB files are there (", Sample(rocksdb_files),
                       "): CURRENT was lost");
    } else {
      state_ = FolderState::kFresh;
      env_->DeleteFile(Join(path_, kStateFile)).PermitUncheckedError();  // of a removed database
    }
    return Status::Ok();
  }
  if (foreign.empty()) {  // empty (or only our lock file): a new tier
    KVMESH_RETURN_IF_ERROR(Lock());
    KVMESH_RETURN_IF_ERROR(WriteMarker(namespace_name));
    env_->DeleteFile(Join(path_, kStateFile)).PermitUncheckedError();
    state_ = FolderState::kFresh;
    return Status::Ok();
  }
  if (has_current) {
    rocksdb::DBOptions o;
    o.env = env_;
    std::vector<std::string> families;
    const rocksdb::Status s = rocksdb::DB::ListColumnFamilies(o, path_, &families);
    if (!s.ok()) {
      return Status::FailedPrecondition(
          StrCat("rocksdb tier: ", path_,
                 " holds a RocksDB database without a kvmesh marker that "
                 "cannot be read (",
                 s.ToString(), "); refusing to touch it: give another folder"));
    }
    const bool all_ours = std::all_of(families.begin(), families.end(), [](const std::string& n) {
      return n == rocksdb::kDefaultColumnFamilyName || IsPoolFamilyName(n);
    });
    const bool any_pool = std::any_of(families.begin(), families.end(), IsPoolFamilyName);
    if (!all_ours || !any_pool) {
      return Status::FailedPrecondition(StrCat(
          "rocksdb tier: ", path_, " holds a RocksDB database that is not a kvmesh tier (no ",
          kMarkerFile, " marker; column families: ", Sample(families),
          "); refusing to touch it: give another folder"));
    }
    KVMESH_RETURN_IF_ERROR(Lock());
    KVMESH_RETURN_IF_ERROR(WriteMarker(namespace_name));
    adopted_format1_ = true;
    state_ = FolderState::kExisting;
    KVMESH_LOG_WARN(
        "rocksdb tier adopted a folder written before the ownership marker path {} families {}",
        path_, families.size());
    return Status::Ok();
  }
  return Status::FailedPrecondition(StrCat("rocksdb tier: ", path_, " is not empty (",
                                           Sample(foreign), ") and is not a kvmesh ", "tier (no ",
                                           kMarkerFile,
                                           " marker); refusing to write into it: give an empty or "
                                           "new folder"));
}

Result<std::string> TierFolder::MoveAsideAndRestart(std::string_view namespace_name) {
  std::string target = StrCat(path_, ".damaged-", UtcStamp());
  for (int i = 2; env_->FileExists(target).ok(); ++i) {
    target = StrCat(path_, ".damaged-", UtcStamp(), "-", i);
  }
  if (rocksdb::Status s = env_->RenameFile(path_, target); !s.ok()) {
    return Status::IoError(StrCat("rocksdb tier: moving the damaged folder ", path_, " to ", target,
                                  ": ", s.ToString()));
  }
  Unlock();  // the lock file went with the folder
  damage_.clear();
  KVMESH_RETURN_IF_ERROR(CreateDirs(env_, path_));
  KVMESH_RETURN_IF_ERROR(Inspect(namespace_name));
  if (state_ != FolderState::kFresh) {
    return Status::FailedPrecondition(
        StrCat("rocksdb tier: ", path_, " is not empty right after moving it aside"));
  }
  return target;
}

std::uint64_t TierFolder::RecordedFlushedSequence() const {
  std::string text;
  if (!rocksdb::ReadFileToString(env_, Join(path_, kStateFile), &text).ok()) return 0;
  constexpr std::string_view kKey = "flushed_sequence ";
  if (!StartsWith(text, kKey) || !EndsWith(text, "\n")) return 0;  // torn or foreign: no claim
  return std::strtoull(text.c_str() + kKey.size(), nullptr, 10);
}

Status TierFolder::RecordFlushedSequence(std::uint64_t sequence) const {
  return WriteAtomically(env_, path_, kStateFile, StrCat("flushed_sequence ", sequence, "\n"));
}

}  // namespace kvmesh::rocksdb_tier
