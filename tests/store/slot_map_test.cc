// SlotMap (store/slot_map.h): random inserts, lookups and erases against std::unordered_map, with
// colliding hashes; slots stay put while their entry lives and are reused after it leaves.
#include "store/slot_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <unordered_map>

namespace kvmesh {
namespace {

struct Key {
  std::uint64_t a = 0;
  std::uint32_t b = 0;
  friend bool operator==(const Key&, const Key&) = default;
};

// Only 64 distinct hashes for thousands of keys: every lookup walks a probe run of keys with its
// hash and must tell them apart by the full key.
struct CollidingHash {
  std::uint64_t operator()(const Key& k) const { return (k.a * 0x9E3779B97F4A7C15ULL) % 64; }
};

struct StdHash {
  std::size_t operator()(const Key& k) const { return k.a * 31 + k.b; }
};

TEST(SlotMap, AgreesWithUnorderedMapUnderRandomOperations) {
  SlotMap<Key, int, CollidingHash> map;
  std::unordered_map<Key, std::pair<int, std::uint32_t>, StdHash> model;  // value, slot
  std::mt19937_64 rng(7);
  for (int step = 0; step < 20000; ++step) {
    const Key k{rng() % 3000, static_cast<std::uint32_t>(rng() % 2)};
    const auto it = model.find(k);
    switch (rng() % 3) {
      case 0:
        if (it == model.end()) {
          const std::uint32_t slot = map.Insert(k, step);
          ASSERT_TRUE(map.live(slot));
          model.emplace(k, std::pair{step, slot});
        }
        break;
      case 1:
        if (it != model.end()) {
          const std::uint32_t slot = map.Find(k);
          ASSERT_EQ(slot, it->second.second) << "an entry's slot moved while it lived";
          map.Erase(slot);
          EXPECT_FALSE(map.live(slot));
          model.erase(it);
        }
        break;
      default: {
        const int* v = map.Get(k);
        if (it == model.end()) {
          EXPECT_EQ(v, nullptr);
          EXPECT_EQ(map.Find(k), map.kNone);
        } else {
          ASSERT_NE(v, nullptr);
          EXPECT_EQ(*v, it->second.first);
          EXPECT_EQ(map.key(it->second.second), k);
        }
      }
    }
    ASSERT_EQ(map.size(), model.size());
  }
  std::size_t seen = 0;
  map.ForEach([&](const Key& k, int v) {
    ++seen;
    const auto it = model.find(k);
    ASSERT_NE(it, model.end());
    EXPECT_EQ(v, it->second.first);
  });
  EXPECT_EQ(seen, model.size());
}

TEST(SlotMap, ErasedSlotsAreReusedAndValuesReset) {
  SlotMap<Key, std::map<int, int>, CollidingHash> map;
  const std::uint32_t s0 = map.Insert(Key{1, 0}, {{1, 1}});
  const std::uint32_t s1 = map.Insert(Key{2, 0}, {{2, 2}});
  EXPECT_NE(s0, s1);
  map.Erase(s0);
  EXPECT_EQ(map.Get(Key{1, 0}), nullptr);
  const std::uint32_t s2 = map.Insert(Key{3, 0}, {});
  EXPECT_EQ(s2, s0);  // the free slot, not a new one
  EXPECT_TRUE(map.value(s2).empty());
  EXPECT_EQ(map.value(s1).at(2), 2);
  EXPECT_EQ(map.size(), 2u);
}

}  // namespace
}  // namespace kvmesh
