// TransferEngine with lanes (TransferEngineOptions::lanes): a grant of several slices is striped
// over every lane both engines have — its slices arrive on as many progress threads — and its id
// carries the stripe's width, unless its slices are small (min_striped_slice_bytes); engines with
// different lane counts (one of them single-lane) work with each other in both directions; a
// striped operation counts once in stats(); the option is validated; a malformed lane list is
// refused before UCX sees it. Over TCP and shared memory on loopback, byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/transfer/transfer_test_util.h"

namespace kvmesh {
namespace {

using transfer_test::FillPattern;
using transfer_test::FindPatternMismatch;
using transfer_test::MustAllocate;
using transfer_test::Transport;

constexpr PeerId kA{1}, kB{2};
// Above TransferEngineOptions::min_striped_slice_bytes (256 KiB by default), which these engines
// keep; kSmall is below it.
constexpr std::size_t kBlock = 256 * 1024 + 8;
constexpr std::size_t kSmall = 64 * 1024;

std::unique_ptr<TransferEngine> EngineOrNull(const Transport& t, std::uint32_t lanes) {
  TransferEngineOptions o = transfer_test::OptionsFor(t);
  o.lanes = lanes;
  auto engine = TransferEngine::Create(o);
  return engine.ok() ? std::move(*engine) : nullptr;
}

struct Moved {
  Status grant, send;
  std::set<std::thread::id> slice_threads;  // the threads on_slice ran on
  TransferId id;
  bool exact = true;
};

// Moves `count` patterned blocks from `from` (peer `from_id` on `to`) to `to`, in two sends.
Moved Move(TransferEngine& from, PeerId from_id, TransferEngine& to, PeerId to_id,
           std::size_t count, std::uint64_t seed, std::size_t block = kBlock) {
  AlignedBuffer source = MustAllocate(count * block, std::byte{0});
  AlignedBuffer destination = MustAllocate(count * block, std::byte{0});
  for (std::size_t i = 0; i < count; ++i) FillPattern(source.data() + i * block, block, seed, i);
  const RegionId src = from.RegisterRegion(source.data(), source.size()).value();
  const RegionId dst = to.RegisterRegion(destination.data(), destination.size()).value();
  std::vector<Slice> sources, destinations;
  for (std::size_t i = 0; i < count; ++i) {
    sources.push_back({src, i * block, block});
    destinations.push_back({dst, i * block, block});
  }
  Moved out;
  std::mutex mu;
  std::vector<int> calls(count, 0);
  GrantRequest grant{from_id, destinations,
                     SystemClock::Default()->Now() + std::chrono::seconds(30), nullptr};
  grant.on_slice = [&](std::uint32_t slice) {
    std::lock_guard<std::mutex> lock(mu);
    out.slice_threads.insert(std::this_thread::get_id());
    if (slice < count) ++calls[slice];
  };
  Result<TransferOp> g = to.Grant(grant);
  if (!g.ok()) {
    out.grant = g.status();
    return out;
  }
  out.id = g->id();
  const std::size_t half = count / 2;
  const TimePoint deadline = SystemClock::Default()->Now() + std::chrono::seconds(30);
  std::vector<TransferOp> sends;
  for (auto [first, n] : {std::pair{std::size_t{0}, half}, std::pair{half, count - half}}) {
    if (n == 0) continue;
    Result<TransferOp> s = from.Send({to_id, out.id, static_cast<std::uint32_t>(first),
                                      std::span(sources).subspan(first, n), deadline, nullptr});
    if (!s.ok()) {
      out.send = s.status();
      static_cast<void>(to.CancelGrant(out.id));
      static_cast<void>(g->Wait());
      return out;
    }
    sends.push_back(*s);
  }
  out.grant = g->Wait();
  for (TransferOp& s : sends) {
    Status st = s.Wait();
    if (out.send.ok()) out.send = st;
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (FindPatternMismatch(destination.data() + i * block, block, seed, i)) out.exact = false;
    if (calls[i] != 1) out.exact = false;
  }
  EXPECT_TRUE(from.DeregisterRegion(src).ok());
  EXPECT_TRUE(to.DeregisterRegion(dst).ok());
  return out;
}

class TransferLanesTest : public ::testing::TestWithParam<Transport> {};

TEST_P(TransferLanesTest, AGrantIsStripedOverEveryLaneBothEnginesHave) {
  auto a = EngineOrNull(GetParam(), 3), b = EngineOrNull(GetParam(), 3);
  if (!a || !b) GTEST_SKIP() << GetParam().name << " unavailable";
  ASSERT_TRUE(a->Connect(kB, b->address()).ok());
  ASSERT_TRUE(b->Connect(kA, a->address()).ok());
  for (auto [count, width] : {std::pair{12, 3}, std::pair{2, 2}, std::pair{1, 1}}) {
    SCOPED_TRACE(count);
    const Moved m = Move(*a, kA, *b, kB, count, 40 + count);
    ASSERT_TRUE(m.grant.ok()) << m.grant;
    ASSERT_TRUE(m.send.ok()) << m.send;
    EXPECT_TRUE(m.exact);
    EXPECT_EQ(m.slice_threads.size(), static_cast<std::size_t>(width)) << "progress threads";
    EXPECT_EQ(m.id.value & 0xF, static_cast<std::uint64_t>(width - 1)) << "the id's width";
  }
  // Slices below min_striped_slice_bytes on average stay on one lane.
  const Moved small = Move(*a, kA, *b, kB, 12, 50, kSmall);
  ASSERT_TRUE(small.grant.ok() && small.send.ok()) << small.grant << " " << small.send;
  EXPECT_TRUE(small.exact);
  EXPECT_EQ(small.slice_threads.size(), 1u);
  EXPECT_EQ(small.id.value & 0xF, 0u);
  // Each striped grant and send counted once, every slice once.
  const TransferStats r = b->stats(), s = a->stats();
  EXPECT_EQ(r.grants_started, 4u);
  EXPECT_EQ(r.grants_completed, 4u);
  EXPECT_EQ(r.grants_failed, 0u);
  EXPECT_EQ(r.slices_received, 27u);
  EXPECT_EQ(s.sends_completed, 7u);  // two sends each, one for the single block
  EXPECT_EQ(s.sends_failed, 0u);
  EXPECT_EQ(s.slices_sent, 27u);
}

// DeregisterRegion is all or nothing on every lane: refused while one lane's live grant uses the
// region (the others would have let it go), it leaves the region whole, so a grant striped over
// every lane still works in it; once the grant ended, it goes from every lane.
TEST_P(TransferLanesTest, ARefusedDeregistrationLeavesTheRegionOnEveryLane) {
  auto a = EngineOrNull(GetParam(), 3), b = EngineOrNull(GetParam(), 3);
  if (!a || !b) GTEST_SKIP() << GetParam().name << " unavailable";
  ASSERT_TRUE(a->Connect(kB, b->address()).ok());
  ASSERT_TRUE(b->Connect(kA, a->address()).ok());
  constexpr std::size_t kCount = 3;
  AlignedBuffer source = MustAllocate(kCount * kBlock, std::byte{0});
  AlignedBuffer destination = MustAllocate((kCount + 1) * kBlock, std::byte{0});
  for (std::size_t i = 0; i < kCount; ++i) FillPattern(source.data() + i * kBlock, kBlock, 7, i);
  const RegionId src = a->RegisterRegion(source.data(), source.size()).value();
  const RegionId dst = b->RegisterRegion(destination.data(), destination.size()).value();
  const TimePoint later = SystemClock::Default()->Now() + std::chrono::seconds(30);
  // One small slice: a grant on one lane.
  const std::vector<Slice> small = {{dst, 0, 16}};
  Result<TransferOp> held = b->Grant({kA, small, later, nullptr});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(b->DeregisterRegion(dst).code(), StatusCode::kFailedPrecondition);
  // Blocks 1..3 of the same region, striped over the three lanes.
  std::vector<Slice> sources, destinations;
  for (std::size_t i = 0; i < kCount; ++i) {
    sources.push_back({src, i * kBlock, kBlock});
    destinations.push_back({dst, (i + 1) * kBlock, kBlock});
  }
  Result<TransferOp> g = b->Grant({kA, destinations, later, nullptr});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->id().value & 0xF, 2u) << "striped over three lanes";
  Result<TransferOp> s = a->Send({kB, g->id(), 0, sources, later, nullptr});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(g->Wait().ok());
  EXPECT_TRUE(s->Wait().ok());
  for (std::size_t i = 0; i < kCount; ++i) {
    EXPECT_FALSE(FindPatternMismatch(destination.data() + (i + 1) * kBlock, kBlock, 7, i)) << i;
  }
  ASSERT_TRUE(b->CancelGrant(held->id()).ok());
  EXPECT_EQ(held->Wait().code(), StatusCode::kCancelled);
  EXPECT_TRUE(b->DeregisterRegion(dst).ok());
  EXPECT_EQ(b->DeregisterRegion(dst).code(), StatusCode::kNotFound);
  EXPECT_TRUE(a->DeregisterRegion(src).ok());
}

TEST_P(TransferLanesTest, EnginesWithOtherLaneCountsWorkBothWays) {
  auto three = EngineOrNull(GetParam(), 3), two = EngineOrNull(GetParam(), 2),
       one = EngineOrNull(GetParam(), 1);
  if (!three || !two || !one) GTEST_SKIP() << GetParam().name << " unavailable";
  constexpr PeerId kThree{3}, kTwo{2}, kOne{1};
  ASSERT_TRUE(three->Connect(kTwo, two->address()).ok());
  ASSERT_TRUE(two->Connect(kThree, three->address()).ok());
  ASSERT_TRUE(three->Connect(kOne, one->address()).ok());
  ASSERT_TRUE(one->Connect(kThree, three->address()).ok());
  struct Case {
    TransferEngine *from, *to;
    PeerId from_id, to_id;
    std::size_t threads;
  };
  const Case cases[] = {{three.get(), two.get(), kThree, kTwo, 2},
                        {two.get(), three.get(), kTwo, kThree, 2},
                        {three.get(), one.get(), kThree, kOne, 1},
                        {one.get(), three.get(), kOne, kThree, 1}};
  std::uint64_t seed = 60;
  for (const Case& c : cases) {
    const Moved m = Move(*c.from, c.from_id, *c.to, c.to_id, 9, ++seed);
    ASSERT_TRUE(m.grant.ok()) << seed << m.grant;
    ASSERT_TRUE(m.send.ok()) << seed << m.send;
    EXPECT_TRUE(m.exact) << seed;
    EXPECT_EQ(m.slice_threads.size(), c.threads) << seed;
  }
}

TEST_P(TransferLanesTest, AnAddressThatIsNoLaneListIsOneWorkerAddress) {
  auto a = EngineOrNull(GetParam(), 2), b = EngineOrNull(GetParam(), 2);
  if (!a || !b) GTEST_SKIP() << GetParam().name << " unavailable";
  // A lane list cut short, or with a lane count of 0, is refused before UCX sees it (UCX aborts
  // the process on an address it cannot parse); so is an empty address.
  WorkerAddress cut = b->address();
  cut.pop_back();
  EXPECT_EQ(a->Connect(kB, cut).code(), StatusCode::kInvalidArgument);
  WorkerAddress no_lanes = b->address();
  no_lanes.resize(12);
  std::fill(no_lanes.begin() + 8, no_lanes.end(), std::byte{0});
  EXPECT_EQ(a->Connect(kB, no_lanes).code(), StatusCode::kInvalidArgument);
  auto single = EngineOrNull(GetParam(), 1);
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(single->Connect(kB, cut).code(), StatusCode::kInvalidArgument);
  WorkerAddress empty;
  EXPECT_FALSE(a->Connect(kB, empty).ok());
  // The real one still connects, and a transfer works.
  ASSERT_TRUE(a->Connect(kB, b->address()).ok());
  ASSERT_TRUE(b->Connect(kA, a->address()).ok());
  const Moved m = Move(*a, kA, *b, kB, 4, 90);
  EXPECT_TRUE(m.grant.ok() && m.send.ok() && m.exact) << m.grant << " " << m.send;
}

INSTANTIATE_TEST_SUITE_P(Loopback, TransferLanesTest,
                         ::testing::Values(transfer_test::kTcp, transfer_test::kShm),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TransferLanes, TheOptionIsValidated) {
  for (std::uint32_t lanes : {0u, 17u}) {
    TransferEngineOptions o = transfer_test::OptionsFor(transfer_test::kTcp);
    o.lanes = lanes;
    auto engine = TransferEngine::Create(o);
    ASSERT_FALSE(engine.ok()) << lanes;
    EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument) << engine.status();
  }
}

}  // namespace
}  // namespace kvmesh
