// Many threads on two engines at once (TCP loopback; engines of one lane and of three), built and
// run under TSan too: each thread
// grants on one engine and sends from the other — half of them in each direction — checks every
// byte, and now and then cancels a grant before its send (which must then be refused), while
// another thread reads the statistics.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/transfer/transfer_test_util.h"

namespace kvmesh {
namespace {

using transfer_test::FindPatternMismatch;
using transfer_test::kPeerA;
using transfer_test::kPeerB;
using transfer_test::MustAllocate;

constexpr int kThreads = 4;
constexpr int kRounds = 24;
constexpr std::size_t kSlices = 8;
constexpr std::size_t kSlice = 16 * 1024;
constexpr std::size_t kPerThread = kSlices * kSlice;

struct Side {
  TransferEngine* engine;
  PeerId peer;  // the other engine, as this one names it
  AlignedBuffer memory;
  RegionId region;
};

class TransferConcurrencyTest : public ::testing::TestWithParam<transfer_test::Transport> {};

TEST_P(TransferConcurrencyTest, ThreadsGrantSendAndCancelOnBothEngines) {
  transfer_test::EnginePair pair = transfer_test::MakeEnginePair(GetParam());
  if (!pair.skip_reason.empty()) GTEST_SKIP() << pair.skip_reason;
  Side a{pair.a.get(), kPeerB, MustAllocate(kThreads * kPerThread, std::byte{0}), {}};
  Side b{pair.b.get(), kPeerA, MustAllocate(kThreads * kPerThread, std::byte{0}), {}};
  for (Side* side : {&a, &b}) {
    Result<RegionId> region =
        side->engine->RegisterRegion(side->memory.data(), side->memory.size());
    ASSERT_TRUE(region.ok());
    side->region = *region;
  }

  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread reader([&] {
    std::uint64_t last = 0;
    while (!stop.load()) {
      const TransferStats s = a.engine->stats();
      if (s.slices_received < last) failures.fetch_add(1);
      last = s.slices_received;
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Even threads send a → b, odd ones b → a; each uses its own part of both regions.
      Side& sender = (t % 2 == 0) ? a : b;
      Side& receiver = (t % 2 == 0) ? b : a;
      const std::size_t base = t * kPerThread;
      std::vector<Slice> sources, destinations;
      for (std::size_t i = 0; i < kSlices; ++i) {
        sources.push_back({sender.region, base + i * kSlice, kSlice});
        destinations.push_back({receiver.region, base + i * kSlice, kSlice});
      }
      for (int round = 0; round < kRounds; ++round) {
        const std::uint64_t seed = t * 1000 + round;
        for (std::size_t i = 0; i < kSlices; ++i) {
          transfer_test::FillPattern(sender.memory.data() + base + i * kSlice, kSlice, seed, i);
        }
        const TimePoint later = SystemClock::Default()->Now() + std::chrono::seconds(60);
        Result<TransferOp> grant = receiver.engine->Grant({receiver.peer, destinations, later});
        if (!grant.ok()) {
          failures.fetch_add(1);
          continue;
        }
        const bool cancel = round % 6 == 5;
        if (cancel && (!receiver.engine->CancelGrant(grant->id()).ok() ||
                       grant->Wait().code() != StatusCode::kCancelled)) {
          failures.fetch_add(1);
        }
        Result<TransferOp> send =
            sender.engine->Send({sender.peer, grant->id(), 0, sources, later});
        if (!send.ok()) {
          failures.fetch_add(1);
          continue;
        }
        const Status sent = send->Wait();
        if (cancel) {
          // Refused by the receiver (no such grant), or told by its "done" that the grant was
          // cancelled when that message overtook the send: both say the transfer failed.
          if (sent.code() != StatusCode::kNotFound && sent.code() != StatusCode::kCancelled) {
            failures.fetch_add(1);
          }
          continue;
        }
        if (!sent.ok() || !grant->Wait().ok()) {
          failures.fetch_add(1);
          continue;
        }
        for (std::size_t i = 0; i < kSlices; ++i) {
          if (FindPatternMismatch(receiver.memory.data() + base + i * kSlice, kSlice, seed, i)) {
            failures.fetch_add(1);
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  stop.store(true);
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  const int cancelled = kThreads * (kRounds / 6);
  const int completed = kThreads * kRounds - cancelled;
  const TransferStats sa = a.engine->stats(), sb = b.engine->stats();
  EXPECT_EQ(sa.grants_completed + sb.grants_completed, static_cast<std::uint64_t>(completed));
  EXPECT_EQ(sa.grants_failed + sb.grants_failed, static_cast<std::uint64_t>(cancelled));
  EXPECT_EQ(sa.sends_completed + sb.sends_completed, static_cast<std::uint64_t>(completed));
  EXPECT_EQ(sa.slices_received + sb.slices_received, completed * kSlices);
  // Every slice of a send to a cancelled grant was posted before the first refusal came back.
  EXPECT_EQ(sa.rejected_unknown_transfer + sb.rejected_unknown_transfer, cancelled * kSlices);
}

INSTANTIATE_TEST_SUITE_P(Loopback, TransferConcurrencyTest,
                         ::testing::Values(transfer_test::kTcp, transfer_test::kTcpLanes),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvmesh
