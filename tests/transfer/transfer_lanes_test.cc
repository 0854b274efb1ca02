// TransferEngine with lanes (TransferEngineOptions::lanes): a grant of several slices is striped
// over every lane both engines have — its slices arrive on as many progress threads — and its id
// carries the stripe's width, unless its slices are small (min_striped_slice_bytes); engines with
// different lane counts (one of them single-lane) work with each other in both directions; a
// striped operation counts once in stats(); the option is validated; a malformed lane list is
// refused before UCX sees it; a refused DeregisterRegion leaves the region on every lane, and a
// second one while one is under way is refused; a striped send with a lane that cannot send fails
// whole. Over TCP and shared memory on loopback, byte for
// byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
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

// A lane list as a multi-lane engine writes it (transfer_engine.cc): the magic, the count, then
// each lane's address with its length, little-endian.
WorkerAddress LaneList(const std::vector<WorkerAddress>& lanes) {
  WorkerAddress out;
  const auto put_u32 = [&out](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
  };
  for (char c : std::string_view("KVMLANES")) out.push_back(static_cast<std::byte>(c));
  put_u32(static_cast<std::uint32_t>(lanes.size()));
  for (const WorkerAddress& lane : lanes) {
    put_u32(static_cast<std::uint32_t>(lane.size()));
    out.insert(out.end(), lane.begin(), lane.end());
  }
  return out;
}

// Keeps one progress thread of `receiver` busy: a 64-byte grant there (from `sender_id`), sent by
// `sender` (to `receiver_id`), whose on_slice waits until Release() — so that whatever else that
// lane is asked to do waits behind it. Destroy it before the engines.
class HeldLane {
 public:
  HeldLane() = default;
  HeldLane(const HeldLane&) = delete;
  HeldLane& operator=(const HeldLane&) = delete;
  // Lets go and waits for the grant and the send, which use this object's memory.
  ~HeldLane() {
    Release();
    if (grant_.ok()) grant_->Wait().IgnoreError();
    if (send_.ok()) send_->Wait().IgnoreError();
  }

  // OK once the lane's thread is inside the on_slice (within 10 s).
  Status Hold(TransferEngine& sender, PeerId receiver_id, TransferEngine& receiver,
              PeerId sender_id) {
    src_ = sender.RegisterRegion(source_.data(), kBytes).value();
    dst_ = receiver.RegisterRegion(destination_.data(), kBytes).value();
    const std::vector<Slice> slices = {{dst_, 0, kBytes}};
    GrantRequest hold{sender_id, slices, SystemClock::Default()->Now() + std::chrono::seconds(30),
                      nullptr};
    hold.on_slice = [this](std::uint32_t) {
      std::unique_lock<std::mutex> lock(mu_);
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    };
    grant_ = receiver.Grant(hold);
    if (!grant_.ok()) return grant_.status();
    const std::vector<Slice> sources = {{src_, 0, kBytes}};
    send_ = sender.Send({receiver_id, grant_->id(), 0, sources, hold.deadline, nullptr});
    if (!send_.ok()) return send_.status();
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [this] { return held_; })) {
      return Status::TimedOut("the held lane never got its slice");
    }
    return Status::Ok();
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  TransferOp& grant() { return *grant_; }
  TransferOp& send() { return *send_; }
  RegionId source_region() const { return src_; }
  RegionId destination_region() const { return dst_; }

 private:
  static constexpr std::size_t kBytes = 64;
  AlignedBuffer source_ = MustAllocate(kBytes, std::byte{1});
  AlignedBuffer destination_ = MustAllocate(kBytes, std::byte{0});
  RegionId src_, dst_;
  Result<TransferOp> grant_ = Status::Cancelled("not granted");
  Result<TransferOp> send_ = Status::Cancelled("not sent");
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

// A DeregisterRegion under way on the lanes refuses a second one of the same region at once
// (kFailedPrecondition), and the first then completes: the region goes from every lane once. The
// first is kept under way by a lane of b whose progress thread waits in an on_slice of a grant in
// another region; both calls race, so whichever comes second is the one refused.
TEST_P(TransferLanesTest, ASecondDeregistrationWhileOneIsUnderWayIsRefused) {
  auto a = EngineOrNull(GetParam(), 3), b = EngineOrNull(GetParam(), 3);
  if (!a || !b) GTEST_SKIP() << GetParam().name << " unavailable";
  ASSERT_TRUE(a->Connect(kB, b->address()).ok());
  ASSERT_TRUE(b->Connect(kA, a->address()).ok());
  AlignedBuffer region = MustAllocate(kBlock, std::byte{0});
  const RegionId doomed = b->RegisterRegion(region.data(), region.size()).value();
  HeldLane lane;
  ASSERT_TRUE(lane.Hold(*a, kB, *b, kA).ok());
  // Two calls race; neither can finish while the lane is held, so one is under way and the other
  // must be refused without waiting for it.
  std::mutex results_mu;
  std::condition_variable results_cv;
  std::vector<Status> results;
  std::vector<std::thread> callers;
  for (int i = 0; i < 2; ++i) {
    callers.emplace_back([&] {
      Status st = b->DeregisterRegion(doomed);
      std::lock_guard<std::mutex> lock(results_mu);
      results.push_back(std::move(st));
      results_cv.notify_all();
    });
  }
  Status refused;
  {
    std::unique_lock<std::mutex> lock(results_mu);
    const bool one =
        results_cv.wait_for(lock, std::chrono::seconds(10), [&] { return !results.empty(); });
    if (one) refused = results.front();
  }
  lane.Release();
  for (std::thread& t : callers) t.join();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("another call"), std::string::npos) << refused;
  EXPECT_TRUE(results.back().ok()) << results.back();
  EXPECT_EQ(b->DeregisterRegion(doomed).code(), StatusCode::kNotFound);
  EXPECT_TRUE(lane.send().Wait().ok());
  EXPECT_TRUE(lane.grant().Wait().ok());
  EXPECT_TRUE(b->DeregisterRegion(lane.destination_region()).ok());
  EXPECT_TRUE(a->DeregisterRegion(lane.source_region()).ok());
}

// A striped send whose part cannot be made on one lane (that lane's connection failed while the
// others work) fails whole, and only once the parts already made have ended: the source memory is
// the caller's again when Send returns (its region deregisters at once). The peer's three lanes are
// three single-lane engines here, so that one of them can go alone, and the one that plays lane 0
// is kept from answering, so that the part made there is still in flight when the send fails. TCP
// only: a peer engine in this process that goes away is noticed at once only through its socket.
TEST_P(TransferLanesTest, AStripedSendWithALaneThatCannotSendFailsWholeAndLeavesNothingInFlight) {
  if (std::string(GetParam().tls).find("tcp") == std::string::npos) {
    GTEST_SKIP() << "only TCP reports a peer's close at once";
  }
  auto a = EngineOrNull(GetParam(), 3);
  std::vector<std::unique_ptr<TransferEngine>> lanes;
  for (int k = 0; k < 3; ++k) lanes.push_back(EngineOrNull(GetParam(), 1));
  if (!a || !lanes[0] || !lanes[1] || !lanes[2]) GTEST_SKIP() << GetParam().name << " unavailable";
  ASSERT_TRUE(
      a->Connect(kB, LaneList({lanes[0]->address(), lanes[1]->address(), lanes[2]->address()}))
          .ok());
  // The peer's lane 0 is kept busy: its progress thread waits in the on_slice of a grant of its own
  // until the end, so the part a's lane 0 makes stays in flight until a cancels it.
  ASSERT_TRUE(lanes[0]->Connect(kA, a->address()).ok());
  HeldLane lane0;
  ASSERT_TRUE(lane0.Hold(*a, kB, *lanes[0], kA).ok());
  lanes[1].reset();  // the peer's lane 1 goes: a's lane 1 connection fails
  for (int i = 0; i < 500 && a->stats().peer_failures == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(a->stats().peer_failures, 0u) << "a never saw the lane go";
  constexpr std::size_t kCount = 3;
  AlignedBuffer source = MustAllocate(kCount * kBlock, std::byte{0});
  const RegionId src = a->RegisterRegion(source.data(), source.size()).value();
  std::vector<Slice> sources;
  for (std::size_t i = 0; i < kCount; ++i) sources.push_back({src, i * kBlock, kBlock});
  const TransferId id{(0x5EEDull << 4) | 2};  // striped over three lanes
  const TimePoint later = SystemClock::Default()->Now() + std::chrono::seconds(30);
  Result<TransferOp> send = a->Send({kB, id, 0, sources, later, nullptr});
  ASSERT_FALSE(send.ok());
  EXPECT_EQ(send.status().code(), StatusCode::kPeerUnreachable) << send.status();
  // Lane 0's part was made, then cancelled and waited for: nothing uses the region any more.
  EXPECT_TRUE(a->DeregisterRegion(src).ok());
  const TransferStats s = a->stats();
  // Cancelling a part with a rendezvous in flight closes its lane's connection to that peer, so
  // the other send on it (the one that holds the peer's lane 0) fails too: a peer with a lane down
  // is a peer going away.
  EXPECT_EQ(s.sends_started, 2u);
  EXPECT_EQ(s.sends_failed, 2u);
  EXPECT_EQ(s.sends_completed, 0u);
  lane0.Release();
  EXPECT_FALSE(lane0.send().Wait().ok());
  EXPECT_TRUE(lane0.grant().Wait().ok()) << "its one slice had arrived";
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
