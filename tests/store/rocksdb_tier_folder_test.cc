// The RocksDB tier's folder (issue 11, findings 1, 2, 6 and 8): whose folder it is (another
// application's database and unrelated files are refused and left as they were; a newer format
// or another namespace is refused; a folder written before the marker is adopted; our own stale
// pools are dropped and said at warn with what and how much), one process per folder (the lock
// error in our words), and damage at open — a truncated MANIFEST, a lost CURRENT, an SST with a
// bad footer, a truncated SST, a corrupt meta block — which never silently empties the tier and
// never needs a person: the folder is moved aside and kept (move_aside, the default) or the tier
// stays off with an error naming the damage (stay_off), and no file of the damaged database is
// deleted either way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "store/rocksdb_tier.h"
#include "tests/store/rocksdb_test_util.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
using store_test::DamagedCopies;
using store_test::FilesEndingWith;
using store_test::IdFor;
using store_test::LayoutOf;
using store_test::ListDir;
using store_test::LogCapture;
using store_test::RawDb;
using store_test::Shape;
using store_test::TempDir;
using store_test::TestPool;
using store_test::TierOptionsFor;

constexpr TierPoolId kPool{0};

const Shape& Small() {
  static const Shape s = store_test::TierShapes()[0];
  return s;
}

RocksDbTierOptions Options(const std::string& path) { return TierOptionsFor(path, {Small()}); }

// A tier with `n` blocks written over several flushes (so several SST files), closed cleanly.
void WriteBlocks(const std::string& path, int n) {
  auto tier = store_test::OpenTierOrDie(Options(path));
  TestPool src(LayoutOf(Small().geometry), 1, 1.0f);
  for (int i = 0; i < n; ++i) {
    src.Fill(0, 100 + i);
    ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), 0, 35).ok());
    if (i % 8 == 7) {
      ASSERT_TRUE(tier->Flush().ok());
    }
  }
}

void ExpectBlocks(RocksDbTier& tier, int n) {
  TestPool src(LayoutOf(Small().geometry), 1, 1.0f), dst(LayoutOf(Small().geometry), 1, 1.0f);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(tier.Get(kPool, IdFor(i), dst.view(), 0).ok()) << i;
    src.Fill(0, 100 + i);
    ASSERT_EQ(dst.Snapshot(0), src.Snapshot(0)) << i;
  }
}

std::string MarkerText(const std::string& path) {
  std::ifstream in(path + "/KVMESH-TIER");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(RocksDbTierFolder, AnotherApplicationsDatabaseIsRefusedAndLeftAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/theirs";
  {
    RawDb raw(path, {"users"});
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.by_name.at("users"), "alice", "42").ok());
  }
  const auto before = ListDir(path);
  auto tier = RocksDbTier::Open(Options(path));
  ASSERT_EQ(tier.status().code(), StatusCode::kFailedPrecondition) << tier.status();
  EXPECT_NE(tier.status().message().find("not a kvmesh tier"), std::string::npos) << tier.status();
  EXPECT_NE(tier.status().message().find("users"), std::string::npos) << tier.status();
  EXPECT_EQ(ListDir(path), before) << "a file was written into another application's folder";
  RawDb raw(path);
  std::string v;
  ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.by_name.at("users"), "alice", &v).ok())
      << "their column family is gone";
  EXPECT_EQ(v, "42");
}

TEST(RocksDbTierFolder, UnrelatedFilesAreRefusedAndNothingIsWritten) {
  TempDir dir;
  const std::string path = dir.path() + "/home";
  fs::create_directories(path);
  std::ofstream(path + "/notes.txt") << "mine";
  auto tier = RocksDbTier::Open(Options(path));
  ASSERT_EQ(tier.status().code(), StatusCode::kFailedPrecondition) << tier.status();
  EXPECT_NE(tier.status().message().find("notes.txt"), std::string::npos) << tier.status();
  EXPECT_EQ(ListDir(path), std::vector<std::string>{"notes.txt"});
}

TEST(RocksDbTierFolder, NewerFormatAndAnotherNamespaceAreRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  WriteBlocks(path, 3);
  const std::string marker = MarkerText(path);
  EXPECT_EQ(marker, "kvmesh rocksdb tier\nformat 2\nnamespace default\n");
  std::ofstream(path + "/KVMESH-TIER") << "kvmesh rocksdb tier\nformat 3\nnamespace default\n";
  auto newer = RocksDbTier::Open(Options(path));
  EXPECT_EQ(newer.status().code(), StatusCode::kNotSupported) << newer.status();
  std::ofstream(path + "/KVMESH-TIER") << marker;
  RocksDbTierOptions other = Options(path);
  other.namespace_name = "llama-3-8b";
  auto mixed = RocksDbTier::Open(other);
  EXPECT_EQ(mixed.status().code(), StatusCode::kFailedPrecondition) << mixed.status();
  EXPECT_NE(mixed.status().message().find("namespace 'default'"), std::string::npos);
  auto tier = store_test::OpenTierOrDie(Options(path));  // untouched by the refusals
  ExpectBlocks(*tier, 3);
}

TEST(RocksDbTierFolder, FolderWrittenBeforeTheMarkerIsAdopted) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  WriteBlocks(path, 5);
  fs::remove(path + "/KVMESH-TIER");  // as the tiers issue's code left it
  fs::remove(path + "/KVMESH-STATE");
  LogCapture log;
  auto tier = store_test::OpenTierOrDie(Options(path));
  ExpectBlocks(*tier, 5);
  EXPECT_NE(log.Text().find("adopted a folder written before the ownership marker"),
            std::string::npos)
      << log.Text();
  EXPECT_EQ(MarkerText(path), "kvmesh rocksdb tier\nformat 2\nnamespace default\n");
}

TEST(RocksDbTierFolder, StalePoolsAreDroppedAtWarnWithWhatAndHowMuch) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  WriteBlocks(path, 9);
  const GeometryFingerprint old_fp = FingerprintOf(LayoutOf(Small().geometry), 1.0f);
  Shape other = Small();
  other.geometry.tokens_per_block = 32;
  LogCapture log;
  auto tier = store_test::OpenTierOrDie(TierOptionsFor(path, {other}));
  const std::string text = log.Text();
  const std::string family = RocksDbTier::DataColumnFamilyName(kPool, old_fp);
  EXPECT_TRUE(
      std::regex_search(text, std::regex("warning.*dropping a stale pool.*family " + family +
                                         " entries 9 bytes [1-9][0-9]* files [1-9]")))
      << text;
}

TEST(RocksDbTierFolder, TwoTiersOnOneFolderAreRefusedInOurWords) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  auto first = store_test::OpenTierOrDie(Options(path));
  auto second = RocksDbTier::Open(Options(path));
  ASSERT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status();
  EXPECT_NE(second.status().message().find("is in use: another tier"), std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("Each process needs a folder of its own"),
            std::string::npos);
}

// ---- damage at open

enum class Damage { kTruncatedManifest, kLostCurrent, kBadFooter, kTruncatedSst, kBadMetaBlock };

std::string DamageName(Damage d) {
  switch (d) {
    case Damage::kTruncatedManifest: return "TruncatedManifest";
    case Damage::kLostCurrent: return "LostCurrent";
    case Damage::kBadFooter: return "BadFooter";
    case Damage::kTruncatedSst: return "TruncatedSst";
    case Damage::kBadMetaBlock: return "BadMetaBlock";
  }
  return "?";
}

void Inflict(const std::string& path, Damage d) {
  auto ssts = FilesEndingWith(path, ".sst");
  KVMESH_CHECK(!ssts.empty());
  const std::string sst = path + "/" + ssts.front();
  const auto size = fs::file_size(sst);
  auto overwrite = [&](std::uintmax_t at, int n) {
    std::fstream f(sst, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    for (int i = 0; i < n; ++i) f.put('X');
  };
  switch (d) {
    case Damage::kTruncatedManifest:
      for (const auto& n : ListDir(path)) {
        if (n.rfind("MANIFEST-", 0) == 0) {
          fs::resize_file(path + "/" + n, fs::file_size(path + "/" + n) / 2);
        }
      }
      break;
    case Damage::kLostCurrent: fs::remove(path + "/CURRENT"); break;
    case Damage::kBadFooter: overwrite(size - 8, 8); break;
    case Damage::kTruncatedSst: fs::resize_file(sst, size / 2); break;
    case Damage::kBadMetaBlock: overwrite(size - 200, 16); break;
  }
}

class RocksDbTierDamage : public ::testing::TestWithParam<Damage> {};

TEST_P(RocksDbTierDamage, MovedAsideKeptAndAFreshTierStarts) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  WriteBlocks(path, 40);
  Inflict(path, GetParam());
  const auto damaged_files = ListDir(path);
  {
    LogCapture log;
    auto tier = RocksDbTier::Open(Options(path));
    ASSERT_TRUE(tier.ok()) << tier.status();
    const TierStats s = (*tier)->stats();
    EXPECT_EQ(s.entries, 0);
    EXPECT_NE(s.damage.find("moved aside to " + path + ".damaged-"), std::string::npos) << s.damage;
    EXPECT_NE(log.Text().find("error"), std::string::npos) << "not reported loudly";
    EXPECT_NE(log.Text().find("rocksdb tier damaged path " + path), std::string::npos)
        << log.Text();
    // The fresh tier works.
    TestPool src(LayoutOf(Small().geometry), 1, 1.0f);
    src.Fill(0, 7);
    ASSERT_TRUE((*tier)->Put(kPool, IdFor(1000), src.view(), 0, 35).ok());
  }
  const auto copies = DamagedCopies(path);
  ASSERT_EQ(copies.size(), 1u);
  auto kept = ListDir(copies[0]);
  kept.erase(std::remove(kept.begin(), kept.end(), "KVMESH-LOCK"), kept.end());
  auto expected = damaged_files;
  expected.erase(std::remove(expected.begin(), expected.end(), "KVMESH-LOCK"), expected.end());
  EXPECT_EQ(kept, expected) << "the damaged folder was not kept as it was";
  // Reopening later finds the fresh tier, not the damage again.
  auto again = store_test::OpenTierOrDie(Options(path));
  EXPECT_TRUE(again->stats().damage.empty());
  EXPECT_TRUE(again->Contains(kPool, IdFor(1000)));
  EXPECT_EQ(DamagedCopies(path).size(), 1u);
}

TEST_P(RocksDbTierDamage, StayOffNamesTheDamageAndTouchesNothing) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  WriteBlocks(path, 40);
  Inflict(path, GetParam());
  const auto damaged_files = ListDir(path);
  RocksDbTierOptions o = Options(path);
  o.on_damage = DiskDamagePolicy::kStayOff;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second attempt sees the same
    auto tier = RocksDbTier::Open(o);
    ASSERT_EQ(tier.status().code(), StatusCode::kCorruption) << tier.status();
    EXPECT_NE(tier.status().message().find(path + " is damaged"), std::string::npos)
        << tier.status();
    EXPECT_NE(tier.status().message().find("stays off"), std::string::npos);
    auto now = ListDir(path);
    EXPECT_EQ(now, damaged_files) << "the damaged database was changed";
  }
  EXPECT_TRUE(DamagedCopies(path).empty());
}

// The case RocksDB itself cannot see: a MANIFEST cut back to an earlier, consistent state (its
// tail looks like a crash while writing). Opened as it is, the tier would come up with the first
// flush's blocks only and RocksDB would delete the later SST files as obsolete.
TEST(RocksDbTierFolder, ManifestThatLostEditsIsCaughtBeforeAnythingIsDeleted) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  std::string manifest;
  std::uintmax_t after_first_flush = 0;
  RocksDbTierOptions o = Options(path);
  o.enable_blob_files = false;  // three flushes, no compaction: the MANIFEST's tail is only adds
  {
    auto tier = store_test::OpenTierOrDie(o);
    TestPool src(LayoutOf(Small().geometry), 1, 1.0f);
    for (int i = 0; i < 24; ++i) {
      src.Fill(0, 100 + i);
      ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), 0, 35).ok());
      if (i % 8 == 7) {
        ASSERT_TRUE(tier->Flush().ok());
      }
      if (i == 7) {
        for (const auto& n : ListDir(path)) {
          if (n.rfind("MANIFEST-", 0) == 0) manifest = path + "/" + n;
        }
        after_first_flush = fs::file_size(manifest);
      }
    }
  }
  ASSERT_FALSE(manifest.empty());
  fs::resize_file(manifest, after_first_flush);
  const auto ssts = FilesEndingWith(path, ".sst");
  auto tier = RocksDbTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_NE((*tier)->stats().damage.find("sequence number"), std::string::npos)
      << (*tier)->stats().damage;
  const auto copies = DamagedCopies(path);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(FilesEndingWith(copies[0], ".sst"), ssts) << "SST files were deleted";
}

INSTANTIATE_TEST_SUITE_P(Each, RocksDbTierDamage,
                         ::testing::Values(Damage::kTruncatedManifest, Damage::kLostCurrent,
                                           Damage::kBadFooter, Damage::kTruncatedSst,
                                           Damage::kBadMetaBlock),
                         [](const auto& info) { return DamageName(info.param); });

}  // namespace
}  // namespace kvmesh
