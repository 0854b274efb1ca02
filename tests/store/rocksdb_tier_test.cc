// RocksDbTier: round trips for several pools and shapes, warm restart, a restart with another
// geometry, capacity and eviction order (also across a restart), corruption written into values
// and index records with the raw RocksDB API (deleted, counted, never served), I/O errors through
// an injected file system (the tier disables itself), blob files and direct I/O.
#include "store/rocksdb_tier.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <random>

#include "tests/store/fault_injection_fs.h"
#include "tests/store/rocksdb_test_util.h"
#include "tests/store/store_test_util.h"

namespace kvmesh {
namespace {

using store_test::IdFor;
using store_test::LayoutOf;
using store_test::Shape;
using store_test::TempDir;
using store_test::TestPool;

constexpr TierPoolId kPool{0};

const Shape& Small() {
  static const Shape s = store_test::TierShapes()[0];
  return s;
}

RocksDbTierOptions OptionsFor(const std::string& path, const std::vector<Shape>& shapes,
                              std::int64_t capacity = 1ll << 30) {
  return store_test::TierOptionsFor(path, shapes, capacity);
}

std::unique_ptr<RocksDbTier> OpenTier(const RocksDbTierOptions& o) {
  return store_test::OpenTierOrDie(o);
}

using store_test::RawDb;

// A tier of the small shape in a fresh folder whose budget holds `blocks` bundles, with a
// one-block source pool (filled) and destination pool.
struct BudgetedTier {
  explicit BudgetedTier(int blocks)
      : layout(LayoutOf(Small().geometry)),
        bundle_bytes(BundleCodec::Create(layout, 1.0f).value().bundle_bytes()),
        options(OptionsFor(dir.path() + "/db", {Small()})),
        src(layout, 1, 1.0f),
        dst(layout, 1, 1.0f) {
    options.fixed_budget_bytes = blocks * bundle_bytes;
    src.Fill(0, 1);
  }
  TempDir dir;
  KvPoolLayout layout;
  std::int64_t bundle_bytes;
  RocksDbTierOptions options;
  TestPool src, dst;
};

TEST(RocksDbTier, RoundTripEveryPool) {
  TempDir dir;
  const auto shapes = store_test::TierShapes();
  auto tier = OpenTier(OptionsFor(dir.path() + "/db", shapes));
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    const TierPoolId pool{static_cast<std::int32_t>(p)};
    const KvPoolLayout layout = LayoutOf(shapes[p].geometry);
    TestPool src(layout, 6, shapes[p].pool_scale), dst(layout, 6, shapes[p].pool_scale);
    for (int b = 0; b < 6; ++b) {
      src.Fill(b, 100 * p + b);
      ASSERT_TRUE(tier->Put(pool, IdFor(b), src.view(), b, 35).ok()) << shapes[p].name;
    }
    for (int b = 0; b < 6; ++b) {
      ASSERT_TRUE(tier->Contains(pool, IdFor(b)));
      ASSERT_TRUE(tier->Get(pool, IdFor(b), dst.view(), 5 - b).ok()) << shapes[p].name;
      EXPECT_EQ(dst.Snapshot(5 - b), src.Expected(100 * p + b)) << shapes[p].name << " " << b;
    }
    // GetBundle gives exactly the encoded bundle.
    std::vector<std::byte> want(tier->Codec(pool)->bundle_bytes());
    ASSERT_TRUE(tier->Codec(pool)->Encode(src.view(), 2, IdFor(2), want).ok());
    auto got = tier->GetBundle(pool, IdFor(2));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size());
    EXPECT_EQ(std::memcmp(got->data(), want.data(), want.size()), 0);
  }
  EXPECT_TRUE(tier->Get(kPool, IdFor(99), TestPool(LayoutOf(shapes[0].geometry), 1, 1).view(), 0)
                  .IsNotFound());
  const TierStats st = tier->stats();
  EXPECT_EQ(st.puts, 24);
  EXPECT_EQ(st.entries, 24);
  EXPECT_EQ(st.hits, 24 + 4);
  EXPECT_EQ(st.misses, 1);
  EXPECT_FALSE(st.disabled);
}

// A tier of the small shape in a fresh folder, written and closed: blocks [0, written) of `src`
// (which has `blocks` blocks) filled with seeds first_seed + b and put under IdFor(b).
struct WrittenTier {
  WrittenTier(int blocks, int written, int first_seed)
      : options(OptionsFor(dir.path() + "/db", {Small()})),
        layout(LayoutOf(Small().geometry)),
        src(layout, blocks, 1.0f),
        dst(layout, 1, 1.0f) {
    auto tier = OpenTier(options);
    for (int b = 0; b < written; ++b) {
      src.Fill(b, first_seed + b);
      EXPECT_TRUE(tier->Put(kPool, IdFor(b), src.view(), b, 35).ok()) << b;
    }
  }
  TempDir dir;
  RocksDbTierOptions options;
  KvPoolLayout layout;
  TestPool src, dst;
};

TEST(RocksDbTier, WarmRestartFindsBlocksAgain) {
  TempDir dir;
  const auto o = OptionsFor(dir.path() + "/db", {Small()});
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 20, 1.0f), dst(layout, 1, 1.0f);
  std::int64_t used = 0;
  {
    auto tier = OpenTier(o);
    for (int b = 0; b < 20; ++b) {
      src.Fill(b, 500 + b);
      ASSERT_TRUE(tier->Put(kPool, IdFor(b), src.view(), b, 35).ok());
    }
    ASSERT_TRUE(tier->Erase(kPool, IdFor(3)).ok());
    used = tier->stats().used_bytes;
  }  // clean close
  auto tier = OpenTier(o);
  EXPECT_EQ(tier->stats().entries, 19);
  EXPECT_EQ(tier->stats().used_bytes, used);
  // The ids held, as the directory's resync lists them: every block but the erased one.
  std::vector<ContentId> ids = tier->ReadyIds(kPool);
  std::sort(ids.begin(), ids.end());
  std::vector<ContentId> expected;
  for (int b = 0; b < 20; ++b) {
    if (b != 3) expected.push_back(IdFor(b));
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ids, expected);
  EXPECT_TRUE(tier->ReadyIds(TierPoolId{kPool.value + 7}).empty());
  for (int b = 0; b < 20; ++b) {
    if (b == 3) {
      EXPECT_FALSE(tier->Contains(kPool, IdFor(b)));
      continue;
    }
    ASSERT_TRUE(tier->Get(kPool, IdFor(b), dst.view(), 0).ok()) << b;
    EXPECT_EQ(dst.Snapshot(0), src.Expected(500 + b));
  }
}

TEST(RocksDbTier, RestartWithAnotherGeometryDoesNotReadOldBlocks) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  const Shape nvfp4 = store_test::TierShapes()[2];
  const KvPoolLayout layout = LayoutOf(nvfp4.geometry);
  TestPool src(layout, 1, nvfp4.pool_scale);
  src.Fill(0, 1);
  {
    auto tier = OpenTier(OptionsFor(path, {nvfp4}));
    ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());
  }
  const auto old_fp = FingerprintOf(layout, nvfp4.pool_scale);
  Shape rescaled = nvfp4;
  rescaled.pool_scale = 5.0f;  // another NVFP4 global scale: old blocks are not interchangeable
  Shape other = nvfp4;
  other.geometry.tokens_per_block = 32;
  for (const Shape& s : {rescaled, other}) {
    auto tier = OpenTier(OptionsFor(path, {s}));
    EXPECT_FALSE(tier->Contains(kPool, IdFor(1))) << s.name;
    EXPECT_EQ(tier->stats().entries, 0);
  }
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  EXPECT_EQ(
      std::count(names.begin(), names.end(), RocksDbTier::DataColumnFamilyName(kPool, old_fp)), 0)
      << "the stale family was not dropped";
}

TEST(RocksDbTier, CapacityAndEvictionOrderAlsoAfterRestart) {
  BudgetedTier t(4);
  const RocksDbTierOptions& o = t.options;
  TestPool& src = t.src;
  TestPool& dst = t.dst;
  {
    auto tier = OpenTier(o);
    auto put = [&](int i, int prio) {
      ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), 0, prio).ok()) << i;
    };
    put(0, 35);
    put(1, 35);
    put(2, 10);
    put(3, 50);
    ASSERT_TRUE(tier->Get(kPool, IdFor(0), dst.view(), 0).ok());
    put(4, 35);  // evicts 2 (lowest priority)
    EXPECT_FALSE(tier->Contains(kPool, IdFor(2)));
    put(5, 35);  // evicts 1 (least recently used at 35)
    EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
    EXPECT_TRUE(tier->Contains(kPool, IdFor(0)));
    // 0 used again: its last use (kept in memory) is written at close.
    ASSERT_TRUE(tier->Get(kPool, IdFor(0), dst.view(), 0).ok());
    EXPECT_EQ(tier->stats().evictions, 2);
    EXPECT_EQ(tier->stats().used_bytes, 4 * t.bundle_bytes);
  }
  auto tier = OpenTier(o);
  EXPECT_EQ(tier->stats().entries, 4);
  ASSERT_TRUE(tier->Put(kPool, IdFor(6), src.view(), 0, 35).ok());  // evicts 4, not 0
  EXPECT_FALSE(tier->Contains(kPool, IdFor(4)));
  for (int i : {0, 3, 5, 6}) EXPECT_TRUE(tier->Contains(kPool, IdFor(i))) << i;

  auto tiny = OptionsFor(t.dir.path() + "/tiny", {Small()});
  tiny.fixed_budget_bytes = t.bundle_bytes - 1;
  auto small_tier = OpenTier(tiny);
  EXPECT_TRUE(small_tier->Put(kPool, IdFor(1), src.view(), 0, 35).IsResourceExhausted());
}

// A block read before a long churn of another (read, erased and put again, over a thousand times
// before any flush) keeps that read's recency across a restart: the tier's list of recencies to
// persist, which lists the churned block once per life, is compacted meanwhile without losing it.
TEST(RocksDbTier, RecencyPersistsThroughTheChurnOfAnotherBlock) {
  BudgetedTier t(4);
  const RocksDbTierOptions& o = t.options;
  TestPool& src = t.src;
  TestPool& dst = t.dst;
  {
    auto tier = OpenTier(o);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), 0, 35).ok());
    ASSERT_TRUE(tier->Get(kPool, IdFor(0), dst.view(), 0).ok());  // 0: after 1, 2 and 3
    for (int round = 0; round < 1100; ++round) {                  // 3: read, erased, put again
      ASSERT_TRUE(tier->Get(kPool, IdFor(3), dst.view(), 0).ok()) << round;
      ASSERT_TRUE(tier->Erase(kPool, IdFor(3)).ok()) << round;
      ASSERT_TRUE(tier->Put(kPool, IdFor(3), src.view(), 0, 35).ok()) << round;
    }
    EXPECT_EQ(tier->stats().entries, 4);
  }
  auto tier = OpenTier(o);
  EXPECT_EQ(tier->stats().entries, 4);
  // Oldest first: 1, 2, 0 (its read), 3 (its last put). Had 0's read been lost, 0 would go first.
  for (int i : {1, 2, 0}) {
    ASSERT_TRUE(tier->Put(kPool, IdFor(10 + i), src.view(), 0, 35).ok());
    EXPECT_FALSE(tier->Contains(kPool, IdFor(i))) << i;
  }
  EXPECT_TRUE(tier->Contains(kPool, IdFor(3)));
}

// The eviction order under random puts (new blocks and puts of held ones at a new priority),
// reads and erases is exactly a model's: the lowest priority first, then the least recently put
// or read. Reads re-key the tier's heap lazily (at eviction), so this checks that a block read
// many times is ordered by its last read and that a lowered priority takes effect at once.
TEST(RocksDbTier, EvictionOrderMatchesAModelUnderRandomReadsPutsAndErases) {
  constexpr int kBudgetBlocks = 8;
  BudgetedTier t(kBudgetBlocks);
  auto tier = OpenTier(t.options);
  TestPool& src = t.src;
  TestPool& dst = t.dst;
  std::map<int, std::pair<int, std::uint64_t>> model;  // id -> (priority, last use)
  std::uint64_t clock = 0;
  std::mt19937 rng(11);
  int evictions = 0;
  for (int step = 0; step < 3000; ++step) {
    const int id = static_cast<int>(rng() % 24);
    const bool held = model.contains(id);
    const unsigned op = rng() % 8;
    if (op < 3) {  // put: a new block, or a held one at a (maybe) new priority
      const int priority = std::array{10, 35, 35, 60}[rng() % 4];
      if (!held && model.size() == kBudgetBlocks) {
        const auto victim = std::min_element(model.begin(), model.end(),
                                             [](auto& a, auto& b) { return a.second < b.second; });
        model.erase(victim);
        ++evictions;
      }
      ASSERT_TRUE(tier->Put(kPool, IdFor(id), src.view(), 0, priority).ok()) << step;
      model[id] = {priority, ++clock};
    } else if (op < 7) {  // read
      const Status st = tier->Get(kPool, IdFor(id), dst.view(), 0);
      ASSERT_EQ(st.ok(), held) << step << " " << st;
      if (held) model[id].second = ++clock;
    } else if (held) {
      ASSERT_TRUE(tier->Erase(kPool, IdFor(id)).ok()) << step;
      model.erase(id);
    }
    for (int i = 0; i < 24; ++i) {
      ASSERT_EQ(tier->Contains(kPool, IdFor(i)), model.contains(i))
          << "step " << step << " id " << i;
    }
  }
  EXPECT_EQ(tier->stats().evictions, evictions);
  EXPECT_GT(evictions, 300);
}

TEST(RocksDbTier, CorruptValuesAreDeletedCountedAndNeverServed) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  const Shape s = store_test::TierShapes()[3];  // MLA + FP4 indexer, fp8 per tensor
  const KvPoolLayout layout = LayoutOf(s.geometry);
  const auto o = OptionsFor(path, {s});
  TestPool src(layout, 6, s.pool_scale), dst(layout, 1, s.pool_scale);
  for (int i = 0; i < 6; ++i) src.Fill(i, 40 + i);
  {
    auto tier = OpenTier(o);
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), i, 35).ok());
  }
  const auto fp = FingerprintOf(layout, s.pool_scale);
  const std::string data_cf = RocksDbTier::DataColumnFamilyName(kPool, fp);
  const std::string meta_cf = RocksDbTier::MetaColumnFamilyName(kPool, fp);
  {
    RawDb raw(path);
    raw.Put(data_cf, IdFor(0), "garbage");
    std::string v1 = raw.Get(data_cf, IdFor(1));
    raw.Put(data_cf, IdFor(1), v1.substr(0, v1.size() / 2));  // truncated
    std::string v2 = raw.Get(data_cf, IdFor(2));
    v2[v2.size() / 2] ^= 0x04;  // one flipped bit in the payload
    raw.Put(data_cf, IdFor(2), v2);
    raw.Put(data_cf, IdFor(3), raw.Get(data_cf, IdFor(4)));  // a valid bundle of another block
    raw.Put(meta_cf, IdFor(5), "bad");                       // a malformed index record
  }
  {
    auto tier = OpenTier(o);
    EXPECT_EQ(tier->stats().corrupt, 1) << "the malformed index record";
    EXPECT_FALSE(tier->Contains(kPool, IdFor(5)));
    for (int i = 0; i < 4; ++i) {
      dst.FillByte(0, 0xC3);
      const auto before = dst.Snapshot(0);
      const Status st = tier->Get(kPool, IdFor(i), dst.view(), 0);
      EXPECT_TRUE(st.IsCorruption()) << i << ": " << st;
      EXPECT_EQ(dst.Snapshot(0), before) << "destination written from a corrupt value " << i;
      EXPECT_FALSE(tier->Contains(kPool, IdFor(i)));
      EXPECT_TRUE(tier->Get(kPool, IdFor(i), dst.view(), 0).IsNotFound());
    }
    ASSERT_TRUE(tier->Get(kPool, IdFor(4), dst.view(), 0).ok());
    EXPECT_EQ(dst.Snapshot(0), src.Expected(44));
    const TierStats st = tier->stats();
    EXPECT_EQ(st.corrupt, 5);
    EXPECT_EQ(st.hits, 1);
    EXPECT_EQ(st.entries, 1);
    EXPECT_FALSE(st.disabled);
  }
  RawDb raw(path);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(raw.Has(data_cf, IdFor(i)), i == 4) << i;
    EXPECT_EQ(raw.Has(meta_cf, IdFor(i)), i == 4) << i;
  }
}

// The offset of the last payload byte of a bundle (the end of its last component, from the table).
std::size_t LastPayloadByte(const std::string& bundle) {
  const auto field = [&](std::size_t off) {
    std::uint64_t v = 0;
    std::memcpy(&v, bundle.data() + off, sizeof(v));
    return v;
  };
  const auto present = static_cast<std::uint8_t>(bundle[54]);
  std::uint64_t end = 0;
  for (int i = 0; i < present; ++i) {
    const std::size_t e = 64 + 40 * static_cast<std::size_t>(i);
    end = std::max(end, field(e + 24) + field(e + 32));
  }
  return static_cast<std::size_t>(end - 1);
}

TEST(RocksDbTier, RestoreReadsVerifyInOnePassAndBatched) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  const Shape s = store_test::TierShapes()[3];
  const KvPoolLayout layout = LayoutOf(s.geometry);
  const auto o = OptionsFor(path, {s});
  TestPool src(layout, 8, s.pool_scale), dst(layout, 8, s.pool_scale);
  for (int i = 0; i < 8; ++i) src.Fill(i, 60 + i);
  {
    auto tier = OpenTier(o);
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), i, 35).ok());
    ASSERT_TRUE(tier->Erase(kPool, IdFor(6)).ok());
  }
  const std::string data_cf =
      RocksDbTier::DataColumnFamilyName(kPool, FingerprintOf(layout, s.pool_scale));
  {
    RawDb raw(path);
    for (int i : {1, 7}) {  // a flipped byte in the last chunk of the bundle
      std::string v = raw.Get(data_cf, IdFor(i));
      v[LastPayloadByte(v)] ^= 0x01;
      raw.Put(data_cf, IdFor(i), v);
    }
    std::string v3 = raw.Get(data_cf, IdFor(3));
    v3[20] ^= 0x01;  // the header: found before any byte is copied
    raw.Put(data_cf, IdFor(3), v3);
    std::string v5 = raw.Get(data_cf, IdFor(5));
    raw.Put(data_cf, IdFor(5), v5.substr(0, v5.size() - 1));  // one byte short
  }
  auto tier = OpenTier(o);
  EXPECT_TRUE(tier->GetForRestore(kPool, IdFor(1), dst.view(), 1).IsCorruption());
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  for (int i = 0; i < 8; ++i) dst.FillByte(i, 0xA5);
  const auto untouched = dst.Snapshot(3);
  std::vector<ContentId> ids;
  std::vector<std::int64_t> blocks;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(IdFor(i));
    blocks.push_back(i);
  }
  std::vector<Status> out(8, Status::Ok());
  tier->GetManyForRestore(kPool, ids, dst.view(), blocks, out);
  const StatusCode want[] = {
      StatusCode::kOk, StatusCode::kNotFound,   StatusCode::kOk,       StatusCode::kCorruption,
      StatusCode::kOk, StatusCode::kCorruption, StatusCode::kNotFound, StatusCode::kCorruption};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i].code(), want[i]) << i << ": " << out[i];
    if (want[i] == StatusCode::kOk) {
      EXPECT_EQ(dst.Snapshot(i), src.Expected(60 + i)) << i;
    }
  }
  EXPECT_EQ(dst.Snapshot(3), untouched) << "written from a bundle with a bad header";
  for (int i : {1, 3, 5, 7}) EXPECT_FALSE(tier->Contains(kPool, IdFor(i))) << i;
  const TierStats st = tier->stats();
  EXPECT_EQ(st.corrupt, 4);
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.entries, 3);
  EXPECT_FALSE(st.disabled);
}

TEST(RocksDbTier, ReadErrorDisablesTheTier) {
  TempDir dir;
  store_test::FaultInjectionEnv fault;
  auto o = OptionsFor(dir.path() + "/db", {Small()});
  o.env = fault.env.get();
  o.block_cache_bytes = 0;
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 3, 1.0f), dst(layout, 1, 1.0f);
  {
    auto tier = OpenTier(o);
    for (int i = 0; i < 3; ++i) {
      src.Fill(i, i);
      ASSERT_TRUE(tier->Put(kPool, IdFor(i), src.view(), i, 35).ok());
    }
    ASSERT_TRUE(tier->Flush().ok());
    fault.fs->FailReads(true);
    dst.FillByte(0, 0x42);
    const auto before = dst.Snapshot(0);
    const Status st = tier->Get(kPool, IdFor(0), dst.view(), 0);
    EXPECT_EQ(st.code(), StatusCode::kIoError) << st;
    EXPECT_EQ(dst.Snapshot(0), before);
    fault.fs->FailReads(false);  // the disk came back: the tier does not guess
    EXPECT_TRUE(tier->disabled());
    const TierStats s = tier->stats();
    EXPECT_TRUE(s.disabled);
    EXPECT_GE(s.io_errors, 1);
    EXPECT_EQ(s.corrupt, 0);
    EXPECT_EQ(tier->Get(kPool, IdFor(1), dst.view(), 0).code(), StatusCode::kIoError);
    EXPECT_EQ(tier->Put(kPool, IdFor(7), src.view(), 0, 35).code(), StatusCode::kIoError);
    EXPECT_EQ(tier->Erase(kPool, IdFor(1)).code(), StatusCode::kIoError);
    EXPECT_EQ(tier->Flush().code(), StatusCode::kIoError);
    EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  }
  // Reopening is the way back; the blocks are intact.
  auto tier = OpenTier(o);
  EXPECT_FALSE(tier->disabled());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(tier->Get(kPool, IdFor(i), dst.view(), 0).ok()) << i;
    EXPECT_EQ(dst.Snapshot(0), src.Expected(i));
  }
}

TEST(RocksDbTier, WriteErrorDisablesTheTier) {
  TempDir dir;
  store_test::FaultInjectionEnv fault;
  auto o = OptionsFor(dir.path() + "/db", {Small()});
  o.env = fault.env.get();
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 1, 1.0f), dst(layout, 1, 1.0f);
  src.Fill(0, 3);
  {
    auto tier = OpenTier(o);
    ASSERT_TRUE(tier->Put(kPool, IdFor(0), src.view(), 0, 35).ok());
    ASSERT_TRUE(tier->Flush().ok());
    fault.fs->FailWrites(true);
    ASSERT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 35).ok());  // in the memtable
    EXPECT_EQ(tier->Flush().code(), StatusCode::kIoError);
    EXPECT_TRUE(tier->stats().disabled);
    EXPECT_EQ(tier->Put(kPool, IdFor(2), src.view(), 0, 35).code(), StatusCode::kIoError);
    fault.fs->FailWrites(false);
  }
  auto tier = OpenTier(o);
  ASSERT_TRUE(tier->Get(kPool, IdFor(0), dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Expected(3));
  // Block 1 was acknowledged only to the memtable: absent or intact, never corrupt.
  const Status st = tier->Get(kPool, IdFor(1), dst.view(), 0);
  EXPECT_TRUE(st.ok() || st.IsNotFound()) << st;
  EXPECT_EQ(tier->stats().corrupt, 0);
}

// Bundles are keyed by the order of their puts (8-byte big-endian data keys), whatever their
// content ids, and each meta record (format 2, 24 bytes) names its bundle's key; evicted and
// erased bundles leave no key behind.
TEST(RocksDbTier, BundlesAreKeyedInTheOrderOfTheirPuts) {
  BudgetedTier t(6);
  const auto fp = FingerprintOf(t.layout, 1.0f);
  const std::string data_cf = RocksDbTier::DataColumnFamilyName(kPool, fp);
  const std::string meta_cf = RocksDbTier::MetaColumnFamilyName(kPool, fp);
  const std::vector<int> order = {7, 2, 9, 0, 5, 3, 8, 1};  // ids in an order of their own
  {
    auto tier = OpenTier(t.options);
    for (int b : order) ASSERT_TRUE(tier->Put(kPool, IdFor(b), t.src.view(), 0, 35).ok());
    ASSERT_TRUE(tier->Erase(kPool, IdFor(5)).ok());  // the budget evicted 7 and 2; 5 erased
  }
  RawDb raw(t.options.path);
  std::vector<std::string> expected;
  for (int b : {9, 0, 3, 8, 1}) {
    const std::string meta = raw.Get(meta_cf, IdFor(b));
    ASSERT_EQ(meta.size(), 24u) << b;
    EXPECT_EQ(static_cast<int>(meta[9]), 2) << "format";
    expected.push_back(RawDb::DataKeyIn(meta));
  }
  for (int b : {7, 2, 5}) EXPECT_FALSE(raw.Has(meta_cf, IdFor(b))) << b;
  EXPECT_TRUE(std::is_sorted(expected.begin(), expected.end())) << "keys follow the puts";
  EXPECT_EQ(raw.Keys(data_cf), expected) << "one bundle per block held, nothing else";
  for (const std::string& k : expected) EXPECT_EQ(k.size(), 8u);
}

// A tier written before data keys (meta format 1, 16 bytes; the bundle keyed by its content id)
// is read as it is: its blocks are found and verified, keep format 1 when their recency is
// persisted, and leave without a trace; new puts beside them use data keys.
TEST(RocksDbTier, AFormat1TierIsReadAndItsBlocksLeaveCleanly) {
  WrittenTier w(6, 4, 70);
  const RocksDbTierOptions& o = w.options;
  const KvPoolLayout& layout = w.layout;
  TestPool& src = w.src;
  TestPool& dst = w.dst;
  const auto fp = FingerprintOf(layout, 1.0f);
  const std::string data_cf = RocksDbTier::DataColumnFamilyName(kPool, fp);
  const std::string meta_cf = RocksDbTier::MetaColumnFamilyName(kPool, fp);
  {  // rewrite the four blocks as the format 1 layout had them
    RawDb raw(o.path);
    for (int b = 0; b < 4; ++b) {
      const std::string meta = raw.Get(meta_cf, IdFor(b));
      const std::string bundle = raw.Get(data_cf, IdFor(b));
      raw.Delete(data_cf, RawDb::DataKeyIn(meta));
      std::string v1 = meta.substr(0, 16);
      v1[9] = 1;
      raw.Put(meta_cf, IdFor(b), v1);
      raw.Put(data_cf, IdFor(b), bundle);  // keyed by the content id now (no format 2 record)
    }
    ASSERT_EQ(raw.Keys(data_cf).size(), 4u);
    for (const std::string& k : raw.Keys(data_cf)) EXPECT_EQ(k.size(), 16u);
  }
  {
    auto tier = OpenTier(o);
    EXPECT_EQ(tier->stats().entries, 4);
    EXPECT_EQ(tier->stats().corrupt, 0);
    for (int b = 0; b < 4; ++b) {
      ASSERT_TRUE(tier->Get(kPool, IdFor(b), dst.view(), 0).ok()) << b;
      EXPECT_EQ(dst.Snapshot(0), src.Expected(70 + b));
    }
    ASSERT_TRUE(tier->Erase(kPool, IdFor(1)).ok());
    src.Fill(4, 74);
    ASSERT_TRUE(tier->Put(kPool, IdFor(4), src.view(), 4, 35).ok());
  }  // clean close: the recency of the reads is persisted
  RawDb raw(o.path);
  EXPECT_FALSE(raw.Has(meta_cf, IdFor(1)));
  EXPECT_FALSE(raw.Has(data_cf, IdFor(1))) << "the erased format 1 bundle is gone";
  for (int b : {0, 2, 3}) {
    const std::string meta = raw.Get(meta_cf, IdFor(b));
    EXPECT_EQ(meta.size(), 16u) << b;
    EXPECT_EQ(static_cast<int>(meta[9]), 1) << b;
  }
  EXPECT_EQ(raw.Get(meta_cf, IdFor(4)).size(), 24u);
  EXPECT_EQ(raw.Keys(data_cf).size(), 4u);
}

// Format 2 meta records that do not parse — a zero data key, a format byte that does not match
// the size — are deleted at open and counted as corrupt; their blocks are not served.
TEST(RocksDbTier, MalformedFormat2RecordsAreDeletedAtOpen) {
  WrittenTier w(3, 3, 90);
  const RocksDbTierOptions& o = w.options;
  const KvPoolLayout& layout = w.layout;
  TestPool& src = w.src;
  TestPool& dst = w.dst;
  const std::string meta_cf = RocksDbTier::MetaColumnFamilyName(kPool, FingerprintOf(layout, 1.0f));
  {
    RawDb raw(o.path);
    std::string zero_key = raw.Get(meta_cf, IdFor(0));
    std::fill(zero_key.begin() + 16, zero_key.end(), '\0');
    raw.Put(meta_cf, IdFor(0), zero_key);
    std::string wrong_format = raw.Get(meta_cf, IdFor(1));
    wrong_format[9] = 1;  // format 1 says 16 bytes
    raw.Put(meta_cf, IdFor(1), wrong_format);
  }
  auto tier = OpenTier(o);
  EXPECT_EQ(tier->stats().corrupt, 2);
  EXPECT_EQ(tier->stats().entries, 1);
  EXPECT_FALSE(tier->Contains(kPool, IdFor(0)));
  EXPECT_FALSE(tier->Contains(kPool, IdFor(1)));
  ASSERT_TRUE(tier->Get(kPool, IdFor(2), dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Expected(92));
  tier.reset();
  RawDb raw(o.path);
  EXPECT_FALSE(raw.Has(meta_cf, IdFor(0)));
  EXPECT_FALSE(raw.Has(meta_cf, IdFor(1)));
}

TEST(RocksDbTier, PutBundleVerifiesFirstAndEraseRemoves) {
  TempDir dir;
  auto tier = OpenTier(OptionsFor(dir.path() + "/db", {Small()}));
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  const BundleCodec& codec = *tier->Codec(kPool);
  TestPool src(layout, 1, 1.0f), dst(layout, 1, 1.0f);
  src.Fill(0, 8);
  std::vector<std::byte> bundle(codec.bundle_bytes());
  ASSERT_TRUE(codec.Encode(src.view(), 0, IdFor(1), bundle).ok());
  EXPECT_TRUE(tier->PutBundle(kPool, IdFor(2), bundle, 35).IsCorruption());
  EXPECT_FALSE(tier->Contains(kPool, IdFor(2)));
  ASSERT_TRUE(tier->PutBundle(kPool, IdFor(1), bundle, 35).ok());
  ASSERT_TRUE(tier->PutBundle(kPool, IdFor(1), bundle, 35).ok());
  EXPECT_EQ(tier->stats().put_present, 1);
  ASSERT_TRUE(tier->Get(kPool, IdFor(1), dst.view(), 0).ok());
  EXPECT_EQ(dst.Snapshot(0), src.Expected(8));
  ASSERT_TRUE(tier->Erase(kPool, IdFor(1)).ok());
  EXPECT_TRUE(tier->Erase(kPool, IdFor(1)).IsNotFound());
  EXPECT_TRUE(tier->Get(kPool, IdFor(1), dst.view(), 0).IsNotFound());
  EXPECT_EQ(tier->stats().used_bytes, 0);
  EXPECT_TRUE(tier->Put(TierPoolId{3}, IdFor(1), src.view(), 0, 35).IsInvalidArgument());
  EXPECT_TRUE(tier->Put(kPool, IdFor(1), src.view(), 0, 101).IsInvalidArgument());
}

TEST(RocksDbTier, PutBundlesWritesABatchAndGivesEachPutItsOwnOutcome) {
  TempDir dir;
  const auto o = OptionsFor(dir.path() + "/db", {Small()});
  const KvPoolLayout layout = LayoutOf(Small().geometry);
  TestPool src(layout, 6, 1.0f), dst(layout, 1, 1.0f);
  std::vector<std::vector<std::byte>> bundles;
  {
    auto tier = OpenTier(o);
    const BundleCodec& codec = *tier->Codec(kPool);
    for (int i = 0; i < 6; ++i) {
      src.Fill(i, 40 + i);
      bundles.emplace_back(codec.bundle_bytes());
      ASSERT_TRUE(codec.Encode(src.view(), i, IdFor(i), bundles.back()).ok());
    }
    ASSERT_TRUE(tier->PutBundle(kPool, IdFor(1), bundles[1], 35).ok());
    using P = RocksDbTier::BundlePut;
    const std::vector<P> puts = {
        P{kPool, IdFor(1), bundles[1], 35},          // held already: OK, nothing written
        P{kPool, IdFor(2), bundles[3], 35},          // another block's bundle: refused
        P{kPool, IdFor(3), bundles[3], 35},          // written
        P{kPool, IdFor(4), bundles[4], 50},          // written
        P{TierPoolId{3}, IdFor(5), bundles[5], 35},  // no such pool
        P{kPool, IdFor(4), bundles[4], 50},          // twice in one batch: held once
        P{kPool, IdFor(5), bundles[5], 35},          // written
    };
    std::vector<Status> out(puts.size(), Status::Internal("not set"));
    tier->PutBundles(puts, out);
    EXPECT_TRUE(out[0].ok()) << out[0];
    EXPECT_TRUE(out[1].IsCorruption()) << out[1];
    EXPECT_TRUE(out[2].ok()) << out[2];
    EXPECT_TRUE(out[3].ok()) << out[3];
    EXPECT_TRUE(out[4].IsInvalidArgument()) << out[4];
    EXPECT_TRUE(out[5].ok()) << out[5];
    EXPECT_TRUE(out[6].ok()) << out[6];
    EXPECT_FALSE(tier->Contains(kPool, IdFor(2)));
    const TierStats st = tier->stats();
    EXPECT_EQ(st.entries, 4);  // 1, 3, 4, 5
    EXPECT_EQ(st.put_present, 2);
    for (int i : {1, 3, 4, 5}) {
      ASSERT_TRUE(tier->Get(kPool, IdFor(i), dst.view(), 0).ok()) << i;
      EXPECT_EQ(dst.Snapshot(0), src.Expected(40 + i)) << i;
    }
  }
  // Each written block is there after a restart too.
  auto tier = OpenTier(o);
  EXPECT_EQ(tier->stats().entries, 4);
  for (int i : {1, 3, 4, 5}) {
    ASSERT_TRUE(tier->Get(kPool, IdFor(i), dst.view(), 0).ok()) << i;
    EXPECT_EQ(dst.Snapshot(0), src.Expected(40 + i)) << i;
  }
  EXPECT_TRUE(tier->Get(kPool, IdFor(2), dst.view(), 0).IsNotFound());
}

TEST(RocksDbTier, BlobFilesAndDirectIo) {
  for (bool blobs : {false, true}) {
    for (bool direct : {false, true}) {
      TempDir dir;
      auto o = OptionsFor(dir.path() + "/db", {Small()});
      o.enable_blob_files = blobs;
      o.use_direct_io = direct;
      const KvPoolLayout layout = LayoutOf(Small().geometry);
      TestPool src(layout, 4, 1.0f), dst(layout, 1, 1.0f);
      {
        auto opened = RocksDbTier::Open(o);
        if (!opened.ok() && direct) {
          GTEST_LOG_(INFO) << "direct I/O unavailable here: " << opened.status();
          continue;
        }
        ASSERT_TRUE(opened.ok()) << opened.status();
        for (int i = 0; i < 4; ++i) {
          src.Fill(i, 70 + i);
          ASSERT_TRUE((*opened)->Put(kPool, IdFor(i), src.view(), i, 35).ok());
        }
        ASSERT_TRUE((*opened)->Flush().ok());
      }
      auto tier = OpenTier(o);
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(tier->Get(kPool, IdFor(i), dst.view(), 0).ok()) << blobs << direct << i;
        EXPECT_EQ(dst.Snapshot(0), src.Expected(70 + i));
      }
    }
  }
}

TEST(RocksDbTier, OpenRejectsBadOptions) {
  TempDir dir;
  auto o = OptionsFor(dir.path() + "/db", {Small()});
  o.capacity_bytes = 0;
  EXPECT_TRUE(RocksDbTier::Open(o).status().IsInvalidArgument());
  o = OptionsFor("", {Small()});
  EXPECT_TRUE(RocksDbTier::Open(o).status().IsInvalidArgument());
  o = OptionsFor(dir.path() + "/db", {Small(), Small()});
  o.pools[1].id = o.pools[0].id;
  EXPECT_TRUE(RocksDbTier::Open(o).status().IsInvalidArgument());
  o = OptionsFor(dir.path() + "/db", {});
  EXPECT_TRUE(RocksDbTier::Open(o).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvmesh
