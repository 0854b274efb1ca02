// A peer process (transfer_peer_helper) killed with SIGKILL in the middle of a transfer, over TCP
// and over shared memory (skipped where UCX cannot use it): the operation on this side completes
// with kPeerUnreachable within 2 s of the kill, the grant is released (no receive in flight, its
// region can be deregistered), and a new helper process — a new address under the same PeerId —
// is connected and transfers byte-exact, without restarting this engine.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "tests/transfer/transfer_test_util.h"

namespace kvmesh {
namespace {

using transfer_test::ChildProcess;
using transfer_test::FindPatternMismatch;
using transfer_test::MustAllocate;
using transfer_test::Transport;

constexpr PeerId kHelper{7};
constexpr auto kLineWait = std::chrono::seconds(20);
constexpr auto kFailureBound = std::chrono::seconds(2);

class TransferPeerFailureTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    if (std::string(GetParam().tls) == "posix,cma") {
      // CMA between processes needs ptrace rights: Yama's scope 0 (or no Yama) for a child that
      // reads its parent's memory.
      std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
      int scope = 0;
      if (yama >> scope && scope != 0) GTEST_SKIP() << "cma needs ptrace_scope 0, it is " << scope;
    }
    auto engine = TransferEngine::Create(transfer_test::OptionsFor(GetParam()));
    if (!engine.ok()) GTEST_SKIP() << GetParam().name << " unavailable: " << engine.status();
    engine_ = std::move(*engine);
  }

  // Spawns a helper and connects it and this engine both ways.
  std::unique_ptr<ChildProcess> StartHelper() {
    const std::string devices = *GetParam().devices ? GetParam().devices : "-";
    auto child = ChildProcess::Spawn(
        {KVMESH_PEER_HELPER, GetParam().tls, devices, std::to_string(GetParam().lanes)});
    std::optional<std::string> line = child->ReadLine(kLineWait);
    if (!line || line->rfind("address ", 0) != 0) {
      ADD_FAILURE() << "helper said: " << line.value_or("<nothing>");
      return nullptr;
    }
    std::optional<WorkerAddress> address = transfer_test::FromHex(line->substr(8));
    if (!address) {
      ADD_FAILURE() << "bad address line";
      return nullptr;
    }
    Status status = engine_->Connect(kHelper, *address);
    if (!status.ok()) {
      ADD_FAILURE() << status;
      return nullptr;
    }
    child->WriteLine("connect " + transfer_test::ToHex(engine_->address()));
    line = child->ReadLine(kLineWait);
    if (line != "ok") {
      ADD_FAILURE() << "helper connect: " << line.value_or("<nothing>");
      return nullptr;
    }
    return child;
  }

  void WaitForReceived(std::uint64_t slices) {
    const auto until = std::chrono::steady_clock::now() + kLineWait;
    while (engine_->stats().slices_received < slices && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  TimePoint Later() const { return SystemClock::Default()->Now() + std::chrono::seconds(60); }

  std::unique_ptr<TransferEngine> engine_;
};

// A grant of `count` slices of `length` bytes in `memory` (registered as `region`).
std::vector<Slice> Contiguous(RegionId region, std::uint64_t count, std::uint64_t length) {
  std::vector<Slice> slices;
  for (std::uint64_t i = 0; i < count; ++i) slices.push_back({region, i * length, length});
  return slices;
}

TEST_P(TransferPeerFailureTest, SenderKilledMidTransfer) {
  constexpr std::uint64_t kCount = 32, kLength = 1 << 20, kSeed = 5;
  std::unique_ptr<ChildProcess> helper = StartHelper();
  ASSERT_NE(helper, nullptr);
  AlignedBuffer memory = MustAllocate(kCount * kLength, std::byte{0});
  Result<RegionId> region = engine_->RegisterRegion(memory.data(), memory.size());
  ASSERT_TRUE(region.ok());
  const std::vector<Slice> slices = Contiguous(*region, kCount, kLength);
  Result<TransferOp> grant = engine_->Grant({kHelper, slices, Later(), nullptr});
  ASSERT_TRUE(grant.ok());
  // 4 slices every 100 ms: the transfer takes about 0.8 s; it is killed after the first 4.
  std::ostringstream command;
  command << "send " << grant->id().value << " " << kCount << " " << kLength << " " << kSeed
          << " 4 100";
  ASSERT_TRUE(helper->WriteLine(command.str()));
  WaitForReceived(4);
  ASSERT_GE(engine_->stats().slices_received, 4u);
  ASSERT_FALSE(grant->done());
  // SIGKILL and reap, as the peer's parent (its service manager) would: UCX's shared-memory
  // keepalive sees a zombie as alive.
  const auto killed_at = std::chrono::steady_clock::now();
  helper->Kill();
  ASSERT_TRUE(grant->WaitFor(kFailureBound + std::chrono::milliseconds(500)));
  const auto took = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(took, kFailureBound);
  std::cout << "grant failed " << std::chrono::duration<double, std::milli>(took).count()
            << " ms after the kill: " << grant->status() << "\n";
  EXPECT_EQ(grant->status().code(), StatusCode::kPeerUnreachable) << grant->status();

  const TransferStats stats = engine_->stats();
  EXPECT_EQ(stats.slices_receiving, 0u);
  EXPECT_GE(stats.peer_failures, 1u);
  for (std::uint64_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(FindPatternMismatch(memory.data() + i * kLength, kLength, kSeed, i)) << i;
  }
  EXPECT_EQ(engine_->Grant({kHelper, slices, Later(), nullptr}).status().code(),
            StatusCode::kPeerUnreachable);
  ASSERT_TRUE(engine_->DeregisterRegion(*region).ok()) << "the failed grant still holds it";

  // A new peer process under the same id: connected and used, this engine not restarted.
  std::unique_ptr<ChildProcess> again = StartHelper();
  ASSERT_NE(again, nullptr);
  std::memset(memory.data(), 0, memory.size());
  region = engine_->RegisterRegion(memory.data(), memory.size());
  ASSERT_TRUE(region.ok());
  const std::vector<Slice> fresh = Contiguous(*region, 8, kLength);
  grant = engine_->Grant({kHelper, fresh, Later(), nullptr});
  ASSERT_TRUE(grant.ok());
  std::ostringstream second;
  second << "send " << grant->id().value << " 8 " << kLength << " 9 8 0";
  ASSERT_TRUE(again->WriteLine(second.str()));
  ASSERT_TRUE(grant->WaitFor(kLineWait));
  EXPECT_TRUE(grant->status().ok()) << grant->status();
  EXPECT_EQ(again->ReadLine(kLineWait), "sent ok");
  for (std::uint64_t i = 0; i < 8; ++i) {
    EXPECT_FALSE(FindPatternMismatch(memory.data() + i * kLength, kLength, 9, i)) << i;
  }
}

TEST_P(TransferPeerFailureTest, ReceiverKilledMidTransfer) {
  constexpr std::uint64_t kCount = 32, kLength = 1 << 20;
  std::unique_ptr<ChildProcess> helper = StartHelper();
  ASSERT_NE(helper, nullptr);
  ASSERT_TRUE(helper->WriteLine("grant " + std::to_string(kCount) + " " + std::to_string(kLength) +
                                " 60000"));
  std::optional<std::string> line = helper->ReadLine(kLineWait);
  ASSERT_TRUE(line && line->rfind("granted ", 0) == 0) << line.value_or("<nothing>");
  const TransferId id{std::stoull(line->substr(8))};
  AlignedBuffer memory = MustAllocate(kCount * kLength, std::byte{0x6B});
  Result<RegionId> region = engine_->RegisterRegion(memory.data(), memory.size());
  ASSERT_TRUE(region.ok());
  const std::vector<Slice> slices = Contiguous(*region, kCount, kLength);
  // Half of the grant: delivered, but the send waits for the whole grant, which never comes.
  Result<TransferOp> send = engine_->Send(
      {kHelper, id, 0, std::span<const Slice>(slices).first(kCount / 2), Later(), nullptr});
  ASSERT_TRUE(send.ok());
  const auto until = std::chrono::steady_clock::now() + kLineWait;
  while (engine_->stats().slices_sent < kCount / 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(engine_->stats().slices_sent, kCount / 2);
  ASSERT_FALSE(send->done());
  const auto killed_at = std::chrono::steady_clock::now();
  helper->Kill();
  ASSERT_TRUE(send->WaitFor(kFailureBound + std::chrono::milliseconds(500)));
  const auto took = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(took, kFailureBound);
  std::cout << "send failed " << std::chrono::duration<double, std::milli>(took).count()
            << " ms after the kill: " << send->status() << "\n";
  EXPECT_EQ(send->status().code(), StatusCode::kPeerUnreachable) << send->status();
  EXPECT_TRUE(engine_->DeregisterRegion(*region).ok());
}

INSTANTIATE_TEST_SUITE_P(Loopback, TransferPeerFailureTest,
                         ::testing::Values(transfer_test::kTcp, transfer_test::kShm,
                                           transfer_test::kTcpLanes, transfer_test::kShmLanes),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvmesh
