// Helpers for the RocksDB tier tests: tier options for a list of shapes, the database opened
// with the raw RocksDB API (to play a disk that went bad, or another application), a capture of
// what the library logs, and directory listings.
#pragma once

#include <rocksdb/db.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "store/rocksdb_tier.h"
#include "tests/common/log_capture.h"
#include "tests/store/store_test_util.h"

namespace kvmesh::store_test {

inline RocksDbTierOptions TierOptionsFor(const std::string& path, const std::vector<Shape>& shapes,
                                         std::int64_t capacity = 1ll << 30) {
  RocksDbTierOptions o;
  o.path = path;
  o.capacity_bytes = capacity;
  o.write_buffer_bytes = 1 << 20;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    o.pools.push_back({TierPoolId{static_cast<std::int32_t>(i)}, LayoutOf(shapes[i].geometry),
                       shapes[i].pool_scale});
  }
  return o;
}

inline std::unique_ptr<RocksDbTier> OpenTierOrDie(const RocksDbTierOptions& o) {
  auto tier = RocksDbTier::Open(o);
  KVMESH_CHECK(tier.ok()) << tier.status().ToString();
  return std::move(*tier);
}

// Opens the database without the tier (to play the part of a disk that went bad, or of another
// application). `create` makes a new database with the given extra column families.
struct RawDb {
  explicit RawDb(const std::string& path, const std::vector<std::string>& create_families = {}) {
    rocksdb::DBOptions o;
    std::vector<std::string> names;
    if (create_families.empty()) {
      KVMESH_CHECK(rocksdb::DB::ListColumnFamilies(o, path, &names).ok());
    } else {
      o.create_if_missing = true;
      o.create_missing_column_families = true;
      names = create_families;
      names.insert(names.begin(), rocksdb::kDefaultColumnFamilyName);
    }
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    for (const auto& n : names) descs.emplace_back(n, rocksdb::ColumnFamilyOptions());
    rocksdb::DB* raw = nullptr;
    const auto s = rocksdb::DB::Open(o, path, descs, &handles, &raw);
    KVMESH_CHECK(s.ok()) << s.ToString();
    db.reset(raw);
    for (std::size_t i = 0; i < names.size(); ++i) by_name[names[i]] = handles[i];
  }
  ~RawDb() {
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    db->Close().PermitUncheckedError();
  }
  static std::string IdKey(const ContentId& id) {
    return {reinterpret_cast<const char*>(id.bytes.data()), 16};
  }
  // The key of `id`'s record in family `cf`: in a meta family (".meta") and in a data family
  // whose meta record is format 1 (16 bytes) or absent, the content id; in a data family whose
  // meta record is format 2 (24 bytes), its data key — bytes 16..23 of the record (u64 LE) —
  // written big-endian (store/rocksdb_tier.h, Layout).
  std::string KeyOf(const std::string& cf, const ContentId& id) {
    if (cf.ends_with(".meta")) return IdKey(id);
    std::string meta;
    const auto found = by_name.find(cf + ".meta");
    if (found == by_name.end() ||
        !db->Get(rocksdb::ReadOptions(), found->second, IdKey(id), &meta).ok() ||
        meta.size() != 24) {
      return IdKey(id);
    }
    return DataKeyIn(meta);
  }
  // The data key a format 2 meta record names (bytes 16..23, u64 LE), as its 8-byte big-endian key.
  static std::string DataKeyIn(const std::string& meta) {
    KVMESH_CHECK_EQ(meta.size(), 24u);
    std::string key(8, '\0');
    for (int i = 0; i < 8; ++i) key[7 - i] = meta[16 + i];
    return key;
  }
  void Put(const std::string& cf, const ContentId& id, const std::string& value) {
    KVMESH_CHECK(db->Put(rocksdb::WriteOptions(), by_name.at(cf), KeyOf(cf, id), value).ok());
  }
  bool Has(const std::string& cf, const ContentId& id) {
    std::string v;
    return db->Get(rocksdb::ReadOptions(), by_name.at(cf), KeyOf(cf, id), &v).ok();
  }
  std::string Get(const std::string& cf, const ContentId& id) {
    std::string v;
    KVMESH_CHECK(db->Get(rocksdb::ReadOptions(), by_name.at(cf), KeyOf(cf, id), &v).ok());
    return v;
  }
  // Every key of family `cf`, in order.
  std::vector<std::string> Keys(const std::string& cf) {
    std::vector<std::string> out;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), by_name.at(cf)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) out.push_back(it->key().ToString());
    KVMESH_CHECK(it->status().ok()) << it->status().ToString();
    return out;
  }
  void Delete(const std::string& cf, const std::string& key) {
    KVMESH_CHECK(db->Delete(rocksdb::WriteOptions(), by_name.at(cf), key).ok());
  }
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::map<std::string, rocksdb::ColumnFamilyHandle*> by_name;
};

using test_log::LogCapture;

// Names in a directory, sorted (empty when it does not exist).
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<std::string> FilesEndingWith(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& n : ListDir(dir)) {
    if (n.size() >= suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(n);
  }
  return out;
}

// Folders next to `path` named "<path>.damaged-*".
inline std::vector<std::string> DamagedCopies(const std::string& path) {
  const std::filesystem::path p(path);
  std::vector<std::string> out;
  const std::string prefix = p.filename().string() + ".damaged-";
  for (const auto& n : ListDir(p.parent_path().string())) {
    if (n.rfind(prefix, 0) == 0) out.push_back((p.parent_path() / n).string());
  }
  return out;
}

}  // namespace kvmesh::store_test
