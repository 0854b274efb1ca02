// KvEventBuffer: sequence numbers, polling from a cursor, and the explicit overflow signal.
#include "pool/kv_events.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvmesh {
namespace {

std::vector<KvEvent> MakeEvents(int n, KvEventType type = KvEventType::kStored) {
  std::vector<KvEvent> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].type = type;
    out[i].num_tokens = i;
  }
  return out;
}

TEST(KvEventsTest, AssignsConsecutiveSequenceNumbersAndPollsFromCursor) {
  KvEventBuffer buf(16);
  auto a = MakeEvents(3);
  EXPECT_EQ(buf.Push(a), 3u);
  auto b = MakeEvents(2, KvEventType::kRemoved);
  EXPECT_EQ(buf.Push(b), 5u);
  KvEventBatch all = buf.Poll(0, 100);
  ASSERT_EQ(all.events.size(), 5u);
  EXPECT_FALSE(all.lost.has_value());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(all.events[i].seq, static_cast<std::uint64_t>(i + 1));
  EXPECT_EQ(all.events[3].type, KvEventType::kRemoved);
  EXPECT_EQ(all.next_seq, 6u);
  KvEventBatch part = buf.Poll(2, 2);
  ASSERT_EQ(part.events.size(), 2u);
  EXPECT_EQ(part.events[0].seq, 2u);
  EXPECT_EQ(part.next_seq, 4u);
  KvEventBatch none = buf.Poll(6, 10);
  EXPECT_TRUE(none.events.empty());
  EXPECT_EQ(none.next_seq, 6u);
}

TEST(KvEventsTest, OverflowIsSignalledWithTheLostRange) {
  KvEventBuffer buf(4);
  auto e = MakeEvents(10);
  buf.Push(e);
  EXPECT_EQ(buf.last_seq(), 10u);
  EXPECT_EQ(buf.overwritten(), 6u);
  KvEventBatch batch = buf.Poll(1, 100);
  ASSERT_TRUE(batch.lost.has_value());
  EXPECT_EQ(batch.lost->first, 1u);
  EXPECT_EQ(batch.lost->last, 6u);
  ASSERT_EQ(batch.events.size(), 4u);
  EXPECT_EQ(batch.events.front().seq, 7u);
  EXPECT_EQ(batch.events.back().seq, 10u);
  EXPECT_EQ(batch.events.back().num_tokens, 9);
  // A consumer that kept up sees no gap.
  KvEventBatch ok = buf.Poll(8, 100);
  EXPECT_FALSE(ok.lost.has_value());
  EXPECT_EQ(ok.events.size(), 3u);
}

TEST(KvEventsTest, ConcurrentProducersAndConsumerSeeATotalOrder) {
  KvEventBuffer buf(1 << 12);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        auto e = MakeEvents(1);
        buf.Push(e);
      }
    });
  }
  std::uint64_t next = 1;
  std::uint64_t seen = 0;
  while (seen < kThreads * kPerThread) {
    KvEventBatch b = buf.Poll(next, 64);
    ASSERT_FALSE(b.lost.has_value());
    for (const KvEvent& e : b.events) ASSERT_EQ(e.seq, next + (&e - b.events.data()));
    seen += b.events.size();
    next = b.next_seq;
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(buf.last_seq(), static_cast<std::uint64_t>(kThreads * kPerThread));
}

TEST(KvEventsTest, Names) {
  EXPECT_EQ(KvEventTypeName(KvEventType::kTierChanged), "tier_changed");
  EXPECT_EQ(KvTierName(KvTier::kDisk), "disk");
}

}  // namespace
}  // namespace kvmesh
