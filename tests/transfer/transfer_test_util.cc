#include "tests/transfer/transfer_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "common/check.h"

namespace kvmesh::transfer_test {

TransferEngineOptions OptionsFor(const Transport& transport, const Clock* clock) {
  TransferEngineOptions options;
  options.ucx.tls = transport.tls;
  options.ucx.net_devices = transport.devices;
  options.busy_poll = std::chrono::microseconds(transport.busy_poll_us);
  options.lanes = transport.lanes;
  if (transport.lanes > 1) options.min_striped_slice_bytes = 0;
  options.clock = clock;
  return options;
}

EnginePair MakeEnginePair(const Transport& transport, const Clock* clock) {
  EnginePair pair;
  auto a = TransferEngine::Create(OptionsFor(transport, clock));
  auto b = TransferEngine::Create(OptionsFor(transport, clock));
  if (!a.ok() || !b.ok()) {
    pair.skip_reason = std::string(transport.name) +
                       " unavailable: " + (a.ok() ? b.status() : a.status()).ToString();
    return pair;
  }
  Status ab = (*a)->Connect(kPeerB, (*b)->address());
  Status ba = (*b)->Connect(kPeerA, (*a)->address());
  if (!ab.ok() || !ba.ok()) {
    pair.skip_reason =
        std::string(transport.name) + " cannot connect: " + (ab.ok() ? ba : ab).ToString();
    return pair;
  }
  pair.a = std::move(*a);
  pair.b = std::move(*b);
  return pair;
}

namespace {
std::uint64_t SplitMix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::byte PatternByte(std::uint64_t seed, std::uint64_t slice, std::size_t offset) {
  const std::uint64_t word = SplitMix(seed * 0x100000001b3ull ^ (slice << 32) ^ (offset / 8));
  return static_cast<std::byte>(word >> (8 * (offset % 8)));
}
}  // namespace

void FillPattern(std::byte* data, std::size_t length, std::uint64_t seed, std::uint64_t slice) {
  std::size_t i = 0;
  for (; i + 8 <= length; i += 8) {
    const std::uint64_t word = SplitMix(seed * 0x100000001b3ull ^ (slice << 32) ^ (i / 8));
    std::memcpy(data + i, &word, 8);
  }
  for (; i < length; ++i) data[i] = PatternByte(seed, slice, i);
}

std::optional<std::size_t> FindPatternMismatch(const std::byte* data, std::size_t length,
                                               std::uint64_t seed, std::uint64_t slice) {
  std::size_t i = 0;
  for (; i + 8 <= length; i += 8) {
    const std::uint64_t word = SplitMix(seed * 0x100000001b3ull ^ (slice << 32) ^ (i / 8));
    if (std::memcmp(data + i, &word, 8) != 0) {
      for (std::size_t j = i; j < i + 8; ++j) {
        if (data[j] != PatternByte(seed, slice, j)) return j;
      }
    }
  }
  for (; i < length; ++i) {
    if (data[i] != PatternByte(seed, slice, i)) return i;
  }
  return std::nullopt;
}

bool AllBytesAre(const std::byte* data, std::size_t length, std::byte value) {
  for (std::size_t i = 0; i < length; ++i) {
    if (data[i] != value) return false;
  }
  return true;
}

std::string ToHex(const WorkerAddress& address) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(address.size() * 2);
  for (std::byte b : address) {
    hex.push_back(kDigits[static_cast<unsigned>(b) >> 4]);
    hex.push_back(kDigits[static_cast<unsigned>(b) & 15]);
  }
  return hex;
}

std::optional<WorkerAddress> FromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  WorkerAddress address(hex.size() / 2);
  for (std::size_t i = 0; i < address.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    address[i] = static_cast<std::byte>(hi * 16 + lo);
  }
  return address;
}

AlignedBuffer MustAllocate(std::size_t size, std::byte fill) {
  Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(size);
  KVMESH_CHECK(buffer.ok()) << buffer.status().ToString();
  std::memset(buffer->data(), static_cast<int>(fill), size);
  return std::move(*buffer);
}

std::unique_ptr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv) {
  int to_child[2], from_child[2];
  KVMESH_CHECK(pipe2(to_child, O_CLOEXEC) == 0 && pipe2(from_child, O_CLOEXEC) == 0);
  const pid_t pid = fork();
  KVMESH_CHECK(pid >= 0);
  if (pid == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, to_child[1], from_child[0]));
}

ChildProcess::~ChildProcess() {
  Kill();
  close(in_fd_);
  close(out_fd_);
}

bool ChildProcess::WriteLine(const std::string& line) {
  const std::string text = line + "\n";
  return write(in_fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::optional<std::string> ChildProcess::ReadLine(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd fd{out_fd_, POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(out_fd_, chunk, sizeof(chunk));
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void ChildProcess::Signal(int signal_number) {
  if (!reaped_) kill(pid_, signal_number);
}

void ChildProcess::Kill() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
}

}  // namespace kvmesh::transfer_test
