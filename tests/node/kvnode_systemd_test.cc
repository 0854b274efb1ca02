// kvnode under systemd (Type=notify, deploy/systemd/kvnode.service): what it tells the service
// manager through $NOTIFY_SOCKET (sd_notify), received here on a datagram socket of the test's own
// as systemd would: READY=1 once it serves; at SIGTERM STOPPING=1 and a timeout extension; while it
// shuts down, each step as STATUS with a timeout extension — the flush's among them, so that a long
// flush is not killed at the unit's TimeoutStopSec.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

// A datagram socket bound to `path`, as systemd's notification socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::filesystem::path& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    bound_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  [[nodiscard]] bool bound() const { return bound_; }

  // Messages received until one contains `want` or `timeout` passes; all of them, in order.
  std::vector<std::string> ReceiveUntil(const std::string& want,
                                        std::chrono::milliseconds timeout) {
    std::vector<std::string> got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      got.emplace_back(buf, static_cast<std::size_t>(n));
      if (got.back().find(want) != std::string::npos) break;
    }
    return got;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool bound_ = false;
};

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& m : v) s += "[" + m + "]\n";
  return s;
}

TEST(KvnodeSystemdTest, TellsSystemdWhenItServesAndWhatItDoesWhileItStops) {
  ScratchDir dir;
  NotifySocket notify(dir.path() / "notify.sock");
  ASSERT_TRUE(notify.bound());
  // The child inherits the environment: kvnode finds the socket as under systemd.
  ASSERT_EQ(::setenv("NOTIFY_SOCKET", (dir.path() / "notify.sock").c_str(), 1), 0);
  auto node = KvnodeProcess::Start(dir.path(), TestConfig(dir.path()));
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(node.ok()) << node.status();
  const std::vector<std::string> ready = notify.ReceiveUntil("READY=1", std::chrono::seconds(20));
  ASSERT_FALSE(ready.empty());
  EXPECT_THAT(ready.back(), HasSubstr("READY=1"));
  EXPECT_THAT(ready.back(), HasSubstr("STATUS=serving"));

  // Blocks for the shutdown flush to write.
  {
    auto c = (*node)->Connect();
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<Token> prompt(200);
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>(i * 13 + 5);
    ASSERT_TRUE((*c)->Admit(1, prompt).ok());
    ASSERT_TRUE((*c)->StoreFullBlocks(1).ok());
    ASSERT_TRUE((*c)->Release(1).ok());
  }
  (*node)->process().Signal(SIGTERM);
  const std::vector<std::string> stop =
      notify.ReceiveUntil("closing the tiers", std::chrono::seconds(60));
  const std::string all = Joined(stop);
  ASSERT_GE(stop.size(), 3u) << all;
  // First STOPPING=1 with an extension covering the drain (10 s by default) and a minute more.
  EXPECT_THAT(stop.front(), HasSubstr("STOPPING=1"));
  EXPECT_THAT(stop.front(), HasSubstr("EXTEND_TIMEOUT_USEC=70000000"));
  // Then each step, each with an extension of a minute: draining, the flush (what it will write),
  // closing the tiers.
  EXPECT_THAT(all, HasSubstr("STATUS=shutting down: draining requests in flight\n"
                             "EXTEND_TIMEOUT_USEC=60000000"));
  EXPECT_THAT(all, HasSubstr("STATUS=shutting down: flushing to the disk tier, 0 of 12 blocks "
                             "written\nEXTEND_TIMEOUT_USEC=60000000"));
  EXPECT_THAT(stop.back(), HasSubstr("STATUS=shutting down: closing the tiers"));
  const auto st = (*node)->process().Wait(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->exited && st->code == 0);
  EXPECT_THAT((*node)->process().Stdout(), HasSubstr("flushed 12 blocks to disk"));
}

}  // namespace
}  // namespace kvmesh::node_test
