// The peer process of transfer_peer_failure_test: one TransferEngine driven by lines on stdin,
// answering on stdout. The test spawns it, kills it (SIGKILL) in the middle of a transfer and
// spawns a new one.
//
//   argv: transfer_peer_helper <tls> <net_devices or "-"> [lanes]
//   out:  address <hex>                         at start
//   in:   connect <hex>                         out: ok | error <status>
//   in:   send <id> <count> <len> <seed> <chunk> <pause_ms>
//         sends slices [0, count) of `len` bytes with the test pattern (seed, slice), `chunk`
//         slices per Send with `pause_ms` between them; out: sent <status code name> at the end
//   in:   grant <count> <len> <deadline_ms>     out: granted <id>, later grant_done <code name>
//   in:   quit
// The test's engine is PeerId 1 for the helper.
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "tests/transfer/transfer_test_util.h"

namespace kvmesh {
namespace {

constexpr PeerId kTest{1};

// Whole lines, flushed (the test reads line by line), from the main and the progress thread.
void Say(const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cout << line << std::endl;
}

void RunSend(TransferEngine& engine, std::istringstream& in) {
  std::uint64_t id = 0, count = 0, length = 0, seed = 0, chunk = 1, pause_ms = 0;
  in >> id >> count >> length >> seed >> chunk >> pause_ms;
  static std::vector<AlignedBuffer> keep;  // the source memory lives until the process ends
  keep.push_back(transfer_test::MustAllocate(count * length, std::byte{0}));
  AlignedBuffer& source = keep.back();
  Result<RegionId> region = engine.RegisterRegion(source.data(), source.size());
  if (!region.ok()) return Say("error " + region.status().ToString());
  std::vector<Slice> slices;
  for (std::uint64_t i = 0; i < count; ++i) {
    transfer_test::FillPattern(source.data() + i * length, length, seed, i);
    slices.push_back({*region, i * length, length});
  }
  const TimePoint deadline = SystemClock::Default()->Now() + std::chrono::seconds(60);
  std::vector<TransferOp> ops;
  for (std::uint64_t first = 0; first < count; first += chunk) {
    const std::span<const Slice> part =
        std::span<const Slice>(slices).subspan(first, std::min(chunk, count - first));
    Result<TransferOp> op = engine.Send(
        {kTest, TransferId{id}, static_cast<std::uint32_t>(first), part, deadline, nullptr});
    if (!op.ok()) return Say("error " + op.status().ToString());
    ops.push_back(*op);
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  Status status;
  for (const TransferOp& op : ops) {
    Status s = op.Wait();
    if (status.ok()) status = s;
  }
  Say("sent " + std::string(StatusCodeName(status.code())));
}

void RunGrant(TransferEngine& engine, std::istringstream& in) {
  std::uint64_t count = 0, length = 0, deadline_ms = 0;
  in >> count >> length >> deadline_ms;
  static std::vector<AlignedBuffer> keep;
  keep.push_back(transfer_test::MustAllocate(count * length, std::byte{0}));
  AlignedBuffer& destination = keep.back();
  Result<RegionId> region = engine.RegisterRegion(destination.data(), destination.size());
  if (!region.ok()) return Say("error " + region.status().ToString());
  std::vector<Slice> slices;
  for (std::uint64_t i = 0; i < count; ++i) slices.push_back({*region, i * length, length});
  Result<TransferOp> op = engine.Grant(
      {kTest, slices, SystemClock::Default()->Now() + std::chrono::milliseconds(deadline_ms),
       [](TransferId, const Status& status) {
         Say("grant_done " + std::string(StatusCodeName(status.code())));
       }});
  if (!op.ok()) return Say("error " + op.status().ToString());
  Say("granted " + std::to_string(op->id().value));
}

int Main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: transfer_peer_helper <tls> <net_devices or -> [lanes]\n";
    return 2;
  }
  TransferEngineOptions options;
  options.ucx.tls = argv[1];
  if (std::string(argv[2]) != "-") options.ucx.net_devices = argv[2];
  if (argc == 4) options.lanes = static_cast<std::uint32_t>(std::stoul(argv[3]));
  Result<std::unique_ptr<TransferEngine>> engine = TransferEngine::Create(options);
  if (!engine.ok()) {
    Say("error " + engine.status().ToString());
    return 1;
  }
  Say("address " + transfer_test::ToHex((*engine)->address()));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "connect") {
      std::string hex;
      in >> hex;
      std::optional<WorkerAddress> address = transfer_test::FromHex(hex);
      Status status = address ? (*engine)->Connect(kTest, *address)
                              : Status::InvalidArgument("bad hex address");
      Say(status.ok() ? "ok" : "error " + status.ToString());
    } else if (command == "send") {
      RunSend(**engine, in);
    } else if (command == "grant") {
      RunGrant(**engine, in);
    } else if (command == "quit") {
      break;
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) { return kvmesh::Main(argc, argv); }
