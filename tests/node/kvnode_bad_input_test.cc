// Bad input through a real kvnode's real sockets: a wrong secret, no handshake, oversized frames,
// unknown message types, malformed and truncated payloads, a client that stops mid-frame, a
// flood of connections, more requests in flight than allowed. Each gets a clear error or a closed
// connection; the node keeps serving others and its memory stays bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "node/frame.h"
#include "node/rpc_convert.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

// A raw Unix-socket connection (no handshake).
class RawConnection {
 public:
  explicit RawConnection(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::memcpy(sun.sun_path, path.data(), path.size());
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] bool connected() const { return connected_; }
  void Send(std::string_view bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // Reads until `timeout` or EOF; returns what came and whether the peer closed.
  std::string ReadAll(std::chrono::milliseconds timeout, bool* closed) {
    std::string out;
    *closed = false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return out;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        *closed = true;
        return out;
      }
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// Frames in `bytes` (header + payload each), decoded; stops at the first bad one.
std::vector<rpc::Frame> Frames(const std::string& bytes) {
  FrameDecoder d(1 << 20);
  d.Feed(std::as_bytes(std::span(bytes)));
  std::vector<rpc::Frame> out;
  for (;;) {
    auto f = d.Next();
    if (!f.ok() || !f->has_value()) return out;
    out.push_back(std::move(**f));
  }
}

std::int64_t VmRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

class KvnodeBadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    // One io thread: every request runs on the worker pool (none inline, node/control_server.h),
    // so a client that pipelines requests reaches the in-flight limit.
    auto n = KvnodeProcess::Start(
        dir_->path(),
        TestConfig(dir_->path(), 4096, "8MiB", "", "",
                   "  max_connections: 48\n  max_inflight_per_connection: 4\n  io_threads: 1\n"));
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = n->release();
  }
  static void TearDownTestSuite() {
    delete node_;
    delete dir_;
  }
  // The node still answers a good client.
  static void ExpectServing() {
    auto c = node_->Connect("good-client");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE((*c)->GetStatus().ok());
  }
  static ScratchDir* dir_;
  static KvnodeProcess* node_;
};
ScratchDir* KvnodeBadInputTest::dir_ = nullptr;
KvnodeProcess* KvnodeBadInputTest::node_ = nullptr;

TEST_F(KvnodeBadInputTest, WrongSecretIsRefusedClearly) {
  NodeClientOptions o = node_->Client("intruder");
  o.secret = "not-the-secret-0123456789";
  auto c = NodeClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("wrong secret"));
  o.address = node_->tcp_address();  // the same over TCP
  EXPECT_EQ(NodeClient::Connect(o).status().code(), StatusCode::kPermissionDenied);
  ExpectServing();
}

TEST_F(KvnodeBadInputTest, SilenceAndRequestsBeforeTheHandshakeCloseTheConnection) {
  RawConnection silent(node_->unix_socket());
  ASSERT_TRUE(silent.connected());
  bool closed = false;
  const std::string hello = silent.ReadAll(std::chrono::seconds(5), &closed);
  EXPECT_TRUE(closed) << "a silent client must be dropped after handshake_timeout (2 s)";
  ASSERT_FALSE(Frames(hello).empty());
  EXPECT_EQ(Frames(hello)[0].kind_case(), rpc::Frame::kHello);
  // A request instead of the handshake: refused, closed.
  RawConnection eager(node_->unix_socket());
  rpc::Frame req;
  req.mutable_request()->set_id(1);
  req.mutable_request()->mutable_status();
  eager.Send(*EncodeFrame(req, 1024));
  const auto frames = Frames(eager.ReadAll(std::chrono::seconds(5), &closed));
  EXPECT_TRUE(closed);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(StatusFromError(frames[1].auth_result().error()).code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(frames[1].auth_result().error().message(), HasSubstr("authenticate first"));
  ExpectServing();
}

TEST_F(KvnodeBadInputTest, OversizedFramesBeforeAndAfterAuthentication) {
  RawConnection c(node_->unix_socket());
  const FrameHeaderBytes h = EncodeFrameHeader(1u << 20);  // 1 MiB: over the 1 KiB handshake limit
  c.Send({reinterpret_cast<const char*>(h.data()), h.size()});
  bool closed = false;
  const auto frames = Frames(c.ReadAll(std::chrono::seconds(5), &closed));
  EXPECT_TRUE(closed);
  ASSERT_GE(frames.size(), 2u);
  EXPECT_THAT(frames.back().response().error().message(), HasSubstr("exceeds the limit of 1024"));
  auto client = node_->Connect();
  ASSERT_TRUE(client.ok());
  const FrameHeaderBytes big = EncodeFrameHeader(64u << 20);  // over max_frame_size (4 MiB)
  ASSERT_TRUE((*client)->SendRaw(big).ok());
  auto reply = (*client)->ReadFrame();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_THAT(reply->response().error().message(), HasSubstr("exceeds the limit"));
  EXPECT_FALSE((*client)->ReadFrame().ok());  // then closed: the stream cannot be resynchronised
  ExpectServing();
}

TEST_F(KvnodeBadInputTest, UnknownTypesAndMalformedPayloadsGetErrorsAndTheConnectionStays) {
  auto client = node_->Connect();
  ASSERT_TRUE(client.ok());
  // A request with no body (an unknown message type to this node).
  rpc::Frame empty;
  empty.mutable_request()->set_id(41);
  const std::string empty_bytes = *EncodeFrame(empty, 1024);
  ASSERT_TRUE((*client)->SendRaw(std::as_bytes(std::span(empty_bytes))).ok());
  auto r1 = (*client)->ReadFrame();
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->response().id(), 41u);
  EXPECT_THAT(r1->response().error().message(), HasSubstr("unknown message type"));
  // Garbage and a truncated message under valid headers.
  for (const std::string& payload :
       {std::string("\xff\xff\xff\xff\xff\xff", 6), std::string("\x22\x10\x08\x01\x5a", 5)}) {
    const FrameHeaderBytes h = EncodeFrameHeader(static_cast<std::uint32_t>(payload.size()));
    std::string bytes(reinterpret_cast<const char*>(h.data()), h.size());
    bytes += payload;
    ASSERT_TRUE((*client)->SendRaw(std::as_bytes(std::span(bytes))).ok());
    auto r = (*client)->ReadFrame();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->response().error().code(), 0u);
  }
  // The same connection still works.
  EXPECT_TRUE((*client)->GetStatus().ok());
}

TEST_F(KvnodeBadInputTest, AClientThatStopsMidFrameIsDropped) {
  auto client = node_->Connect();
  ASSERT_TRUE(client.ok());
  const FrameHeaderBytes h = EncodeFrameHeader(100);
  ASSERT_TRUE((*client)->SendRaw(h).ok());
  const std::string half(50, 'x');
  ASSERT_TRUE((*client)->SendRaw(std::as_bytes(std::span(half))).ok());
  const auto start = std::chrono::steady_clock::now();
  auto r = (*client)->ReadFrame();  // nothing comes; the node closes after handshake_timeout
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ExpectServing();
}

// Whether a pipelined burst reaches the limit is a race between the node's io thread reading
// frames and its worker running them (about ten times slower per frame): a loaded machine can
// deschedule the reader until the worker has caught up (a whole-suite `ctest -j2` run once saw
// no refusal in 64). So up to three bursts, each checked, and a refusal asked of any of them.
TEST_F(KvnodeBadInputTest, TooManyRequestsInFlightAreRefusedNotQueued) {
  auto client = node_->Connect();
  ASSERT_TRUE(client.ok());
  std::vector<Token> prompt(16384, 11);
  int refused_total = 0;
  for (int burst = 0; burst < 3 && refused_total == 0; ++burst) {
    // 64 lookups of a 16k-token prompt in one write: at most 4 may be in flight at once.
    std::string bytes;
    for (std::uint64_t id = 1; id <= 64; ++id) {
      rpc::Frame f;
      f.mutable_request()->set_id(1000 * burst + id);
      f.mutable_request()->mutable_lookup()->mutable_tokens()->Add(prompt.begin(), prompt.end());
      bytes += *EncodeFrame(f, 4 << 20);
    }
    ASSERT_TRUE((*client)->SendRaw(std::as_bytes(std::span(bytes))).ok());
    int answered = 0;
    int refused = 0;
    while (answered < 64) {
      auto r = (*client)->ReadFrame();
      ASSERT_TRUE(r.ok()) << r.status();
      ++answered;
      if (StatusFromError(r->response().error()).IsResourceExhausted()) {
        ++refused;
        EXPECT_THAT(r->response().error().message(), HasSubstr("limit 4"));
      }
    }
    EXPECT_LT(refused, 64);  // the first of a burst always runs
    refused_total += refused;
  }
  EXPECT_GT(refused_total, 0);
  auto s = (*client)->GetStatus();
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->requests_rejected(), refused_total);
}

TEST_F(KvnodeBadInputTest, AFloodOfConnectionsIsBoundedAndLeavesNothingBehind) {
  const pid_t pid = node_->process().pid();
  const std::int64_t rss_before = VmRssKiB(pid);
  std::vector<std::unique_ptr<RawConnection>> flood;
  for (int i = 0; i < 200; ++i)
    flood.push_back(std::make_unique<RawConnection>(node_->unix_socket()));
  // Over max_connections (48): refused at once with a clear error.
  int refused = 0;
  for (auto& c : flood) {
    bool closed = false;
    const auto frames = Frames(c->ReadAll(std::chrono::milliseconds(200), &closed));
    if (!frames.empty() && frames[0].kind_case() == rpc::Frame::kAuthResult) {
      EXPECT_THAT(frames[0].auth_result().error().message(), HasSubstr("too many connections"));
      ++refused;
    }
  }
  EXPECT_GE(refused, 200 - 48);
  const std::int64_t rss_flood = VmRssKiB(pid);
  flood.clear();
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    auto c = node_->Connect("counter");
    if (c.ok()) {
      auto s = (*c)->GetStatus();
      back = s.ok() && s->connections() == 1;
    }
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(back) << "connections not released after the flood";
  EXPECT_LT(rss_flood - rss_before, 64 * 1024) << "the flood grew the node by more than 64 MiB";
  ExpectServing();
}

}  // namespace
}  // namespace kvmesh::node_test
