// Shared pieces of the transfer tests: the transports under test, engine pairs on loopback,
// byte patterns that make every slice's bytes distinct and checkable, hex for worker addresses,
// and a child process with line pipes (the peer helper).
//
// Thread safety: as each type says; the free functions are pure.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/aligned_buffer.h"
#include "transfer/transfer_engine.h"

namespace kvmesh::transfer_test {

struct Transport {
  const char* name;         // "tcp", "shm"
  const char* tls;          // UCX_TLS
  const char* devices;      // UCX_NET_DEVICES ("" = any)
  int busy_poll_us = 0;     // TransferEngineOptions::busy_poll
  std::uint32_t lanes = 1;  // TransferEngineOptions::lanes (with lanes, every grant of two or more
                            // slices is striped: min_striped_slice_bytes 0)
};
inline constexpr Transport kTcp{"tcp", "tcp", "lo"};
inline constexpr Transport kShm{"shm", "posix,cma", ""};
// The progress threads poll 500 us after each event before they sleep (the default sleeps at once).
inline constexpr Transport kTcpBusyPoll{"tcp_busy_poll", "tcp", "lo", 500};
// Three lanes on each side: every grant and send of two or more slices is striped over them.
inline constexpr Transport kTcpLanes{"tcp_3_lanes", "tcp", "lo", 0, 3};
inline constexpr Transport kShmLanes{"shm_3_lanes", "posix,cma", "", 0, 3};

TransferEngineOptions OptionsFor(const Transport& transport, const Clock* clock = nullptr);

// Two engines connected both ways (a = PeerId 1 as seen by b, b = PeerId 2 as seen by a). Empty
// with `skip_reason` set when the transport is unavailable here.
struct EnginePair {
  std::unique_ptr<TransferEngine> a, b;
  std::string skip_reason;
};
inline constexpr PeerId kPeerA{1};
inline constexpr PeerId kPeerB{2};
EnginePair MakeEnginePair(const Transport& transport, const Clock* clock = nullptr);

// Fills / checks `length` bytes with the pattern of (seed, slice): distinct for every pair.
void FillPattern(std::byte* data, std::size_t length, std::uint64_t seed, std::uint64_t slice);
// The offset of the first byte that differs from the pattern, or nothing.
std::optional<std::size_t> FindPatternMismatch(const std::byte* data, std::size_t length,
                                               std::uint64_t seed, std::uint64_t slice);
// True when all `length` bytes equal `value`.
bool AllBytesAre(const std::byte* data, std::size_t length, std::byte value);

std::string ToHex(const WorkerAddress& address);
std::optional<WorkerAddress> FromHex(const std::string& hex);

AlignedBuffer MustAllocate(std::size_t size, std::byte fill);

// A child process with its stdin and stdout on pipes. The destructor kills it (SIGKILL) if it is
// still running and reaps it, so a failing test never leaves it behind.
class ChildProcess {
 public:
  static std::unique_ptr<ChildProcess> Spawn(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  bool WriteLine(const std::string& line);
  // The next line of its stdout (without the newline), or nothing after `timeout` or at EOF.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout);
  void Signal(int signal_number);
  // Kills with SIGKILL and reaps. Idempotent.
  void Kill();

 private:
  ChildProcess(pid_t pid, int in_fd, int out_fd) : pid_(pid), in_fd_(in_fd), out_fd_(out_fd) {}
  pid_t pid_;
  int in_fd_;
  int out_fd_;
  bool reaped_ = false;
  std::string buffer_;
};

}  // namespace kvmesh::transfer_test
