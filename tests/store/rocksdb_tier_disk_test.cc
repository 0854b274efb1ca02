// The RocksDB tier and its disk (issue 11, findings 3, 4 and 5): what a put promises in each
// durability mode (kFlush flushes by time and by bytes, kNone never by itself, kWal at once), a
// full file system at open (an error, never an abort, and no LOG file of RocksDB's own), the
// capacity in bytes on disk (the files on disk stay within it while far more is written), the
// free-space warning, and a tier disabled at run time (the error, and entry counts that say only
// what is durable).
#include <gtest/gtest.h>
#include <rocksdb/env.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <tuple>

#include "store/rocksdb_tier.h"
#include "tests/store/fault_injection_fs.h"
#include "tests/store/rocksdb_test_util.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
using store_test::IdFor;
using store_test::LayoutOf;
using store_test::ListDir;
using store_test::LogCapture;
using store_test::Shape;
using store_test::TempDir;
using store_test::TestPool;
using store_test::TierOptionsFor;

constexpr TierPoolId kPool{0};

const Shape& Small() {
  static const Shape s = store_test::TierShapes()[0];
  return s;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void PutBlocks(RocksDbTier& tier, int first, int n) {
  TestPool src(LayoutOf(Small().geometry), 1, 1.0f);
  for (int i = first; i < first + n; ++i) {
    src.Fill(0, i);
    ASSERT_TRUE(tier.Put(kPool, IdFor(i), src.view(), 0, 35).ok()) << i;
  }
}

TEST(RocksDbTierDurability, FlushModeFlushesAfterTheTimeLimit) {
  TempDir dir;
  RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
  o.durability = DiskDurability::kFlush;
  o.flush_after_ms = 100;
  auto tier = store_test::OpenTierOrDie(o);
  PutBlocks(*tier, 0, 3);
  EXPECT_EQ(tier->acknowledged_puts(), 3u);
  ASSERT_TRUE(WaitFor([&] { return tier->durable_puts() == 3; }, std::chrono::seconds(5)))
      << "durable " << tier->durable_puts();
  const TierStats s = tier->stats();
  EXPECT_GE(s.flushes, 1);
  EXPECT_EQ(s.durable_entries, 3);
  EXPECT_EQ(s.entries, 3);
}

TEST(RocksDbTierDurability, FlushModeFlushesAfterTheByteLimit) {
  TempDir dir;
  RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
  o.durability = DiskDurability::kFlush;
  o.flush_after_ms = 600'000;  // never by time in this test
  auto probe = BundleCodec::Create(LayoutOf(Small().geometry), 1.0f);
  ASSERT_TRUE(probe.ok());
  o.flush_after_bytes = 4 * probe->bundle_bytes();
  auto tier = store_test::OpenTierOrDie(o);
  PutBlocks(*tier, 0, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(tier->durable_puts(), 0u) << "flushed below both limits";
  PutBlocks(*tier, 2, 3);
  ASSERT_TRUE(WaitFor([&] { return tier->durable_puts() >= 4; }, std::chrono::seconds(5)))
      << "durable " << tier->durable_puts();
}

// A put wakes the upkeep thread only when the unflushed bytes cross flush_after_bytes, and only
// in kFlush (before, every put past the mark woke it, until the flush in kFlush and for ever in
// kNone and kWal: a futex call and a context switch per put, a fifth of a 4 KiB put's time).
TEST(RocksDbTierDurability, OnlyThePutThatCrossesTheByteLimitWakesTheUpkeep) {
  auto probe = BundleCodec::Create(LayoutOf(Small().geometry), 1.0f);
  ASSERT_TRUE(probe.ok());
  constexpr int kPuts = 64;
  constexpr int kBlocksPerFlush = 16;
  for (DiskDurability mode :
       {DiskDurability::kFlush, DiskDurability::kNone, DiskDurability::kWal}) {
    TempDir dir;
    RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
    o.durability = mode;
    o.flush_after_ms = 600'000;  // never by time in this test
    o.flush_after_bytes = kBlocksPerFlush * probe->bundle_bytes();
    auto tier = store_test::OpenTierOrDie(o);
    PutBlocks(*tier, 0, kPuts);
    if (mode == DiskDurability::kFlush) {
      // Each crossing needs kBlocksPerFlush puts since the last flush began: at most 4 here,
      // at least the first.
      EXPECT_GE(tier->flush_requests(), 1);
      EXPECT_LE(tier->flush_requests(), kPuts / kBlocksPerFlush);
      ASSERT_TRUE(
          WaitFor([&] { return tier->durable_puts() >= kBlocksPerFlush; }, std::chrono::seconds(5)))
          << "durable " << tier->durable_puts();
    } else {
      EXPECT_EQ(tier->flush_requests(), 0) << DiskDurabilityName(mode);
    }
  }
}

TEST(RocksDbTierDurability, NoneModePromisesNothingUntilAFlush) {
  TempDir dir;
  RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
  o.durability = DiskDurability::kNone;
  o.flush_after_ms = 10;  // ignored in this mode
  auto tier = store_test::OpenTierOrDie(o);
  PutBlocks(*tier, 0, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(tier->durable_puts(), 0u);
  EXPECT_EQ(tier->stats().durable_entries, 0);
  ASSERT_TRUE(tier->Flush().ok());
  EXPECT_EQ(tier->durable_puts(), 3u);
  EXPECT_EQ(tier->stats().durable_entries, 3);
}

TEST(RocksDbTierDurability, WalModeIsDurableWhenThePutReturns) {
  for (bool sync : {false, true}) {
    TempDir dir;
    RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
    o.durability = DiskDurability::kWal;
    o.wal_sync = sync;
    auto tier = store_test::OpenTierOrDie(o);
    PutBlocks(*tier, 0, 3);
    EXPECT_EQ(tier->durable_puts(), 3u) << sync;
    EXPECT_EQ(tier->stats().durable_entries, 3) << sync;
    EXPECT_EQ(tier->stats().flushes, 0) << sync;
  }
}

TEST(RocksDbTierDurability, NamesParse) {
  EXPECT_EQ(*ParseDiskDurability("wal"), DiskDurability::kWal);
  EXPECT_EQ(DiskDurabilityName(DiskDurability::kFlush), "flush");
  EXPECT_TRUE(ParseDiskDurability("sync").status().IsInvalidArgument());
  EXPECT_EQ(*ParseDiskDamagePolicy("stay_off"), DiskDamagePolicy::kStayOff);
  EXPECT_TRUE(ParseDiskDamagePolicy("delete").status().IsInvalidArgument());
}

// Finding 4: reopening a tier on a full file system killed the process (SIGABRT in RocksDB's own
// LOG writer). Now it is an error, and RocksDB writes no LOG file (its log goes to spdlog).
TEST(RocksDbTierFullDisk, OpeningOnAFullFileSystemIsAnErrorNotAnAbort) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  {
    auto tier = store_test::OpenTierOrDie(TierOptionsFor(path, {Small()}));
    PutBlocks(*tier, 0, 4);
  }
  store_test::FaultInjectionEnv fault;
  fault.fs->FailWritesNoSpace(true);
  RocksDbTierOptions o = TierOptionsFor(path, {Small()});
  o.env = fault.env.get();
  auto tier = RocksDbTier::Open(o);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kIoError) << tier.status();
  EXPECT_NE(tier.status().message().find("no space left"), std::string::npos) << tier.status();
  const auto names = ListDir(path);
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.rfind("LOG", 0) == 0; }),
            0)
      << "RocksDB wrote a LOG file of its own";
  fault.fs->FailWritesNoSpace(false);  // space again: the tier opens with its blocks
  auto again = RocksDbTier::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->stats().entries, 4);
}

// Finding 5: the disk filling during a run. The tier is disabled, says why, counts the failed
// puts, and its durable entry count is what the last completed flush holds — not the puts that
// only reached the memtable.
TEST(RocksDbTierFullDisk, DiskFillingAtRunTimeDisablesAndCountsOnlyWhatIsDurable) {
  TempDir dir;
  store_test::FaultInjectionEnv fault;
  RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
  o.env = fault.env.get();
  o.durability = DiskDurability::kNone;  // flushes only when asked, so the counts are exact
  auto tier = store_test::OpenTierOrDie(o);
  PutBlocks(*tier, 0, 5);
  ASSERT_TRUE(tier->Flush().ok());
  PutBlocks(*tier, 5, 3);  // in the memtable only
  fault.fs->FailWritesNoSpace(true);
  EXPECT_EQ(tier->Flush().code(), StatusCode::kIoError);
  TestPool src(LayoutOf(Small().geometry), 1, 1.0f);
  EXPECT_EQ(tier->Put(kPool, IdFor(99), src.view(), 0, 35).code(), StatusCode::kIoError);
  const TierStats s = tier->stats();
  EXPECT_TRUE(s.disabled);
  EXPECT_NE(s.disabled_reason.find("flush"), std::string::npos) << s.disabled_reason;
  EXPECT_NE(s.disabled_reason.find("No space"), std::string::npos) << s.disabled_reason;
  EXPECT_EQ(s.durable_entries, 5);
  EXPECT_EQ(s.entries, 8);
  fault.fs->FailWritesNoSpace(false);
}

// The capacity is bytes on disk. Written: several times the capacity in distinct blocks, as fast
// as the tier takes them. The tier's files on disk (SST, blob and WAL files, measured here
// independently of the tier) stay within the capacity at every put. With blob files (the
// default) the tier holds a good share of its capacity in bundles; with the bundles in the SSTs,
// compaction needs room for the whole last level, so it holds less. Either way a put that finds
// the disk at the write limit is refused (kResourceExhausted, counted) while compaction catches
// up with the evictions — a writer this fast sees many — and the tier takes puts again by itself.
TEST(RocksDbTierCapacity, FilesOnDiskStayWithinTheCapacity) {
  for (bool blobs : {true, false}) {
    TempDir dir;
    const std::string path = dir.path() + "/db";
    const std::int64_t capacity = 16ll << 20;
    RocksDbTierOptions o = TierOptionsFor(path, {Small()}, capacity);
    o.enable_blob_files = blobs;
    o.durability = DiskDurability::kFlush;
    auto tier = store_test::OpenTierOrDie(o);
    const std::int64_t bundle = tier->Codec(kPool)->bundle_bytes();
    const int n = static_cast<int>((blobs ? 5 : 2) * capacity / bundle);
    TestPool src(LayoutOf(Small().geometry), 1, 1.0f);
    std::int64_t max_on_disk = 0, refused = 0;
    for (int i = 0; i < n; ++i) {
      src.Fill(0, i);
      const Status st = tier->Put(kPool, IdFor(i), src.view(), 0, 35);
      ASSERT_TRUE(st.ok() || st.IsResourceExhausted()) << st;
      refused += st.ok() ? 0 : 1;
      std::int64_t on_disk = 0;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(path, ec)) {
        const std::string ext = e.path().extension().string();
        if (ext == ".sst" || ext == ".blob" || ext == ".log") {
          on_disk += static_cast<std::int64_t>(e.file_size(ec));
        }
      }
      max_on_disk = std::max(max_on_disk, on_disk);
    }
    const TierStats s = tier->stats();
    std::printf(
        "blobs %d: %d puts of %lld bytes, capacity %lld, max on disk %lld (%.2f), "
        "held %lld bytes (%.2f of capacity), refused %lld, evictions %lld\n",
        blobs, n, static_cast<long long>(bundle), static_cast<long long>(capacity),
        static_cast<long long>(max_on_disk),
        static_cast<double>(max_on_disk) / static_cast<double>(capacity),
        static_cast<long long>(s.used_bytes),
        static_cast<double>(s.used_bytes) / static_cast<double>(capacity),
        static_cast<long long>(refused), static_cast<long long>(s.evictions));
    EXPECT_LE(max_on_disk, capacity) << "blobs " << blobs;
    EXPECT_FALSE(s.disabled);
    EXPECT_EQ(s.over_capacity, refused);
    // With the bundles in the SSTs the learned amplification (compactions' room) leaves less.
    EXPECT_GE(s.used_bytes, capacity / (blobs ? 5 : 20))
        << "blobs " << blobs << ": the tier holds too little";
    int next = n;
    EXPECT_TRUE(WaitFor(
        [&] {
          src.Fill(0, next);
          return tier->Put(kPool, IdFor(next++), src.view(), 0, 35).ok();
        },
        std::chrono::seconds(10)))
        << "blobs " << blobs << ": the tier does not take puts again";
  }
}

// A byte of a bundle damaged on disk, in a blob file or (without blob files) in an SST's data
// block, with and without RocksDB's own read checksums (verify_block_checksums; off by default,
// docs/disk-tier.md): either way the read of that block is a corruption (counted, the entry gone,
// the destination not written) and every other block reads back exact, with the tier still on.
// Without RocksDB's checksums RocksDB hands the damaged bytes over and the bundle's own checksum
// finds them; with them RocksDB reports the corruption first.
class RocksDbTierDamage : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(RocksDbTierDamage, DamagedBundleBytesOnDiskAreACorruptionNeverData) {
  const auto [blob_files, verify] = GetParam();
  TempDir dir;
  RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()});
  o.enable_blob_files = blob_files;
  o.verify_block_checksums = verify;
  o.block_cache_bytes = 0;  // every read comes from the files
  constexpr int kBlocks = 8;
  constexpr int kDamaged = 5;
  {
    auto tier = store_test::OpenTierOrDie(o);
    PutBlocks(*tier, 0, kBlocks);
    ASSERT_TRUE(tier->Flush().ok());
  }
  // Find block kDamaged's payload in the files (its bytes are unique to its seed) and flip a bit.
  TestPool pool(LayoutOf(Small().geometry), 1, 1.0f);
  const std::vector<std::byte> payload = pool.Expected(kDamaged);
  ASSERT_GE(payload.size(), 4096u);
  const std::string needle(reinterpret_cast<const char*>(payload.data()) + 1024, 64);
  int damaged_files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path() + "/db")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".blob" && ext != ".sst") continue;
    std::string bytes;
    ASSERT_TRUE(rocksdb::ReadFileToString(rocksdb::Env::Default(), entry.path(), &bytes).ok());
    const std::size_t at = bytes.find(needle);
    if (at == std::string::npos) continue;
    bytes[at + 32] = static_cast<char>(bytes[at + 32] ^ 0x08);
    ASSERT_TRUE(rocksdb::WriteStringToFile(rocksdb::Env::Default(), bytes, entry.path()).ok());
    ++damaged_files;
  }
  ASSERT_EQ(damaged_files, 1) << "block " << kDamaged << "'s payload in one file";

  auto tier = store_test::OpenTierOrDie(o);
  TestPool dst(LayoutOf(Small().geometry), 1, 1.0f);
  for (int i = 0; i < kBlocks; ++i) {
    dst.FillByte(0, 0x5A);
    const auto before = dst.Snapshot(0);
    const Status st = tier->GetForRestore(kPool, IdFor(i), dst.view(), 0);
    if (i == kDamaged) {
      EXPECT_TRUE(st.IsCorruption()) << st;
      // A restore destination is hidden until published: the one-pass read may have written it,
      // but the read failed, so the caller never publishes it. Get (verify, then copy) does not.
      dst.FillByte(0, 0x5A);
      EXPECT_TRUE(tier->Get(kPool, IdFor(i), dst.view(), 0).IsNotFound()) << "entry gone";
      EXPECT_EQ(dst.Snapshot(0), before);
      EXPECT_FALSE(tier->Contains(kPool, IdFor(i)));
    } else {
      ASSERT_TRUE(st.ok()) << i << ": " << st;
      EXPECT_EQ(dst.Snapshot(0), pool.Expected(i)) << i;
    }
  }
  const TierStats s = tier->stats();
  EXPECT_EQ(s.corrupt, 1);
  EXPECT_EQ(s.hits, kBlocks - 1);
  EXPECT_FALSE(s.disabled) << s.disabled_reason;
}

INSTANTIATE_TEST_SUITE_P(BlobFilesAndChecksums, RocksDbTierDamage,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "blob" : "sst") +
                                  (std::get<1>(info.param) ? "_rocksdb_checksums" : "_bundle_only");
                         });

TEST(RocksDbTierCapacity, CapacityAboveTheFreeSpaceIsWarnedAtOpen) {
  TempDir dir;
  LogCapture log;
  RocksDbTierOptions o = TierOptionsFor(dir.path() + "/db", {Small()}, 1ll << 60);
  auto tier = store_test::OpenTierOrDie(o);
  EXPECT_NE(log.Text().find("capacity is more than the disk can hold"), std::string::npos)
      << log.Text();
}

}  // namespace
}  // namespace kvmesh
