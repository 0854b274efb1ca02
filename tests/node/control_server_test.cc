// ControlServer's choice of thread for a request (node/control_server.h): a request that arrives
// with nothing else of its connection in flight runs inline on the io thread that read it while
// another io thread stays free; a request that takes long there never keeps other connections
// from being served; with one io thread nothing runs inline. A handler of its own (no node).
#include "node/control_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/strings.h"
#include "node/client.h"
#include "node/frame.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;
constexpr const char* kSecret = "control-server-test-secret-0123456789";
// A Lookup whose first token is this sleeps in the handler.
constexpr Token kSlowToken = 999;
constexpr std::chrono::milliseconds kSlow{600};

class SleepyHandler final : public RequestHandler {
 public:
  std::shared_ptr<SessionState> OpenSession(const SessionInfo& info) override {
    return std::make_shared<SessionState>(info);
  }
  HandlerResult Handle(SessionState&, const rpc::Request& request) override {
    if (request.has_lookup() && request.lookup().tokens_size() > 0 &&
        request.lookup().tokens(0) == static_cast<std::int32_t>(kSlowToken)) {
      slow_started.store(true);
      std::this_thread::sleep_for(kSlow);
    }
    HandlerResult r;
    r.response.mutable_lookup();
    return r;
  }
  void CloseSession(SessionState&) override {}
  KvEventBatch PollEvents(std::uint64_t, std::size_t) override { return {}; }

  std::atomic<bool> slow_started{false};
};

class ControlServerTest : public ::testing::Test {
 protected:
  void Start(int io_threads, std::chrono::microseconds busy_poll = {},
             std::chrono::milliseconds idle_timeout = std::chrono::milliseconds{300000},
             std::chrono::milliseconds frame_timeout = std::chrono::milliseconds{5000}) {
    ControlServerOptions o;
    o.idle_timeout = idle_timeout;
    o.handshake_timeout = frame_timeout;
    o.node_id = "test";
    o.secret = kSecret;
    o.unix_socket = (std::filesystem::temp_directory_path() /
                     ("kvmesh-cs-test-" + std::to_string(::getpid()) + ".sock"))
                        .string();
    std::filesystem::remove(o.unix_socket);
    o.io_threads = io_threads;
    o.worker_threads = 2;
    o.busy_poll = busy_poll;
    o.tcp_listen = "127.0.0.1:0";
    socket_ = o.unix_socket;
    auto s = ControlServer::Start(o, &handler_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove(socket_);
  }
  // On the Unix socket, or on TCP when `tcp`.
  std::unique_ptr<NodeClient> Connect(bool tcp = false) {
    NodeClientOptions o;
    o.address = tcp ? server_->tcp_address() : socket_;
    o.secret = kSecret;
    o.request_timeout = std::chrono::seconds(20);
    auto c = NodeClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // `n` Lookups in a row, each sent as soon as the one before was answered.
  static void Lookups(NodeClient& c, int n) {
    const std::vector<Token> t = {1, 2, 3};
    for (int i = 0; i < n; ++i) ASSERT_TRUE(c.Lookup(t).ok());
  }

  SleepyHandler handler_;
  std::string socket_;
  std::unique_ptr<ControlServer> server_;
};

TEST_F(ControlServerTest, OneAtATimeRequestsRunInlineWhenAnotherIoThreadIsFree) {
  Start(/*io_threads=*/2);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Lookups(*c, 20);
  const ControlServerStats s = server_->stats();
  EXPECT_EQ(s.requests_inline, 20);
  EXPECT_EQ(s.inflight, 0);
}

// NodeClientOptions::spin_wait adapts per kind of call: a kind answered after more than spin_wait
// stops spinning (two slow answers after a fast one), and spins again once two answers came
// within it (measured while it does not spin).
TEST_F(ControlServerTest, ClientSpinsOnlyForKindsAnsweredWithinSpinWait) {
  Start(/*io_threads=*/2);
  NodeClientOptions o;
  o.address = socket_;
  o.secret = kSecret;
  o.spin_wait = std::chrono::milliseconds(100);  // fast answers come well within it, slow ones not
  auto connected = NodeClient::Connect(o);
  ASSERT_TRUE(connected.ok()) << connected.status();
  NodeClient& c = **connected;
  const std::vector<Token> fast = {1, 2, 3}, slow = {kSlowToken, 1};
  ASSERT_TRUE(c.Lookup(fast).ok());
  EXPECT_EQ(c.spinning_calls(), 1);  // a kind starts out spinning
  ASSERT_TRUE(c.Lookup(slow).ok());  // spins 100 ms, then sleeps: answered after 600 ms
  ASSERT_TRUE(c.Lookup(slow).ok());  // spins: one slow answer after a fast one
  ASSERT_TRUE(c.Lookup(slow).ok());  // no spin: two slow answers in a row
  EXPECT_EQ(c.spinning_calls(), 3);
  ASSERT_TRUE(c.Lookup(fast).ok());  // no spin, but answered fast
  ASSERT_TRUE(c.Lookup(fast).ok());  // no spin; now two fast answers
  EXPECT_EQ(c.spinning_calls(), 3);
  ASSERT_TRUE(c.Lookup(fast).ok());  // spins again
  EXPECT_EQ(c.spinning_calls(), 4);
  // Without spin_wait nothing spins.
  auto plain = Connect();
  ASSERT_NE(plain, nullptr);
  Lookups(*plain, 3);
  EXPECT_EQ(plain->spinning_calls(), 0);
}

// A request's own timeout_ms governs how long the client waits, not the client's request_timeout:
// a peer link's client has the short fetch deadline as its request_timeout, and a handoff sent on
// it with a longer deadline was given up at the fetch deadline (seen under ASan on a veth pair).
TEST_F(ControlServerTest, TheClientWaitsForTheRequestsOwnTimeout) {
  Start(/*io_threads=*/2);
  NodeClientOptions o;
  o.address = socket_;
  o.secret = kSecret;
  o.request_timeout = kSlow / 3;  // the slow Lookup takes three times this
  auto connected = NodeClient::Connect(o);
  ASSERT_TRUE(connected.ok()) << connected.status();
  rpc::Request slow;
  slow.mutable_lookup()->add_tokens(static_cast<std::int32_t>(kSlowToken));
  slow.set_timeout_ms(static_cast<std::uint32_t>((4 * kSlow).count()));
  Result<rpc::Response> r = (*connected)->Call(slow);
  EXPECT_TRUE(r.ok()) << r.status();
  // Without a timeout of its own the request gets request_timeout (and a short grace).
  auto again = NodeClient::Connect(o);
  ASSERT_TRUE(again.ok()) << again.status();
  slow.clear_timeout_ms();
  r = (*again)->Call(slow);
  EXPECT_EQ(r.status().code(), StatusCode::kTimedOut) << r.status();
}

TEST_F(ControlServerTest, OneIoThreadRunsNothingInline) {
  Start(/*io_threads=*/1);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Lookups(*c, 5);
  EXPECT_EQ(server_->stats().requests_inline, 0);
}

// Busy polling: after answering a request inline, the io thread polls the connection for the next
// one while the connection sends back to back, so such requests are found without a wake-up
// (counted); once the connection is quiet nothing polls (the time stops growing), and a request
// that comes after a pause is not followed by a poll. Without it, nothing is counted.
TEST_F(ControlServerTest, BusyPollingFindsBackToBackRequestsAndStopsWhenQuiet) {
  // Long against the client's turnaround, so that even a sanitizer build's next request comes
  // within it.
  constexpr std::chrono::milliseconds kWindow{200};
  Start(/*io_threads=*/2, kWindow);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Lookups(*c, 20);
  const ControlServerStats busy = server_->stats();
  EXPECT_EQ(busy.requests_inline, 20);
  // The first request has no answer before it and the second's gap is measured, so the polls
  // after the second to the nineteenth find the third to the twentieth.
  EXPECT_EQ(busy.busy_poll_hits, 18);
  // Quiet: the poll after the last answer ends within kWindow.
  std::this_thread::sleep_for(2 * kWindow);
  const ControlServerStats quiet1 = server_->stats();
  std::this_thread::sleep_for(2 * kWindow);
  const ControlServerStats quiet2 = server_->stats();
  EXPECT_GE(quiet1.busy_poll_seconds, 0.8 * std::chrono::duration<double>(kWindow).count());
  EXPECT_EQ(quiet2.busy_poll_seconds, quiet1.busy_poll_seconds) << "an io thread kept polling";
  EXPECT_EQ(quiet2.busy_poll_hits, 18);
  // After the pause: a request that came late is not followed by a poll.
  Lookups(*c, 1);
  std::this_thread::sleep_for(2 * kWindow);
  EXPECT_EQ(server_->stats().busy_poll_seconds, quiet2.busy_poll_seconds);
  // A client that closes while the node polls its connection: the poll ends, the close is seen.
  // (The first request after the pause is not followed by a poll, the second is.)
  Lookups(*c, 2);
  c.reset();
  const auto closed_at = Steady::now();
  while (server_->stats().connections > 0 && Steady::now() - closed_at < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(server_->stats().connections, 0);
  EXPECT_LT(Steady::now() - closed_at, kWindow) << "the poll did not notice the close";
}

TEST_F(ControlServerTest, WithoutBusyPollingNothingIsPolled) {
  Start(/*io_threads=*/2);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Lookups(*c, 20);
  const ControlServerStats s = server_->stats();
  EXPECT_EQ(s.busy_poll_hits, 0);
  EXPECT_EQ(s.busy_poll_seconds, 0.0);
}

// With one io thread nothing runs inline, so nothing polls (an io thread must stay free).
TEST_F(ControlServerTest, OneIoThreadNeverPolls) {
  Start(/*io_threads=*/1, std::chrono::milliseconds(200));
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Lookups(*c, 5);
  EXPECT_EQ(server_->stats().busy_poll_seconds, 0.0);
}

// The slow request takes the only inline slot and its io thread; the other io thread serves a
// second connection at once (its request goes to the worker pool), and accepts and serves a new
// TCP connection (a peer that connects back while this node waits on it inline: a handoff's
// receiver fetching).
TEST_F(ControlServerTest, ALongInlineRequestLeavesAnIoThreadForTheOthers) {
  Start(/*io_threads=*/2);
  auto slow = Connect();
  auto quick = Connect();
  ASSERT_NE(slow, nullptr);
  ASSERT_NE(quick, nullptr);
  std::thread t([&] {
    const std::vector<Token> tokens = {kSlowToken};
    EXPECT_TRUE(slow->Lookup(tokens).ok());
  });
  while (!handler_.slow_started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto start = Steady::now();
  const std::vector<Token> tokens = {1};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(quick->Lookup(tokens).ok());
  auto fresh = Connect(/*tcp=*/true);
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(fresh->Lookup(tokens).ok());
  const auto took = Steady::now() - start;
  t.join();
  EXPECT_LT(took, kSlow / 2) << "the other connections waited for the slow request";
  const ControlServerStats s = server_->stats();
  EXPECT_EQ(s.requests_inline, 1);  // the slow one; the others found no free slot
  EXPECT_EQ(s.requests_total, 7);
}

// A client that writes many requests at once gets every answer, in order: inline, the next frame
// is read after the answer to the one before was written; pooled, the worker strand keeps order.
// A rotation of the secret (docs/kvnode.md, "Rotating the secret"): a second secret is accepted
// beside the first, the server proves itself with the one the client used (NodeClient checks the
// server's MAC), SetSecrets changes what later handshakes accept, and a session already open stays
// open whatever its secret.
TEST_F(ControlServerTest, ASecondSecretIsAcceptedAndSetSecretsAppliesToLaterHandshakes) {
  Start(2);
  const std::string kNew = "the-new-secret-0123456789abcdef";
  const auto connect = [&](const std::string& secret) {
    NodeClientOptions o;
    o.address = socket_;
    o.secret = secret;
    o.request_timeout = std::chrono::seconds(20);
    return NodeClient::Connect(o);
  };
  EXPECT_TRUE(connect(kSecret).ok());
  EXPECT_EQ(connect(kNew).status().code(), StatusCode::kPermissionDenied);
  // Step 1: the new secret is accepted too.
  server_->SetSecrets(kSecret, kNew);
  auto old_session = connect(kSecret);
  ASSERT_TRUE(old_session.ok()) << old_session.status();
  auto new_session = connect(kNew);
  ASSERT_TRUE(new_session.ok()) << new_session.status();
  Lookups(**new_session, 2);
  // Step 2: the new one first, the old one second; step 3: the old one no longer.
  server_->SetSecrets(kNew, kSecret);
  EXPECT_TRUE(connect(kSecret).ok());
  server_->SetSecrets(kNew, "");
  EXPECT_EQ(connect(kSecret).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(connect(kNew).ok());
  // The session that authenticated with the old secret is still open and served.
  Lookups(**old_session, 2);
  EXPECT_EQ(server_->stats().auth_failures, 2);
}

// A refused handshake is counted once and its connection closed at once: it once stayed open
// until the handshake timeout, which counted it again (KvmeshAuthFailures fired at 3 wrong
// secrets, not 6), holding a connection slot all that time.
TEST_F(ControlServerTest, ARefusedHandshakeIsCountedOnceAndClosedAtOnce) {
  Start(2, {}, std::chrono::milliseconds{300000}, std::chrono::milliseconds{3000});
  NodeClientOptions o;
  o.address = socket_;
  o.secret = "not-the-secret-0123456789";
  o.request_timeout = std::chrono::seconds(20);
  for (bool tcp : {false, true}) {
    if (tcp) o.address = server_->tcp_address();
    EXPECT_EQ(NodeClient::Connect(o).status().code(), StatusCode::kPermissionDenied);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (server_->stats().connections > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->stats().connections, 0) << "a refused connection is still open";
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // past the handshake timeout
  EXPECT_EQ(server_->stats().auth_failures, 2);
  EXPECT_NE(Connect(), nullptr);
}

TEST_F(ControlServerTest, PipelinedRequestsAreAnsweredInOrder) {
  for (const int io_threads : {1, 2}) {
    Start(io_threads);
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    std::string bytes;
    for (std::uint64_t id = 1; id <= 16; ++id) {
      rpc::Frame f;
      f.mutable_request()->set_id(id);
      f.mutable_request()->mutable_lookup()->mutable_tokens()->Add(static_cast<std::int32_t>(id));
      bytes += *EncodeFrame(f, 1 << 20);
    }
    ASSERT_TRUE(c->SendRaw(std::as_bytes(std::span(bytes))).ok());
    for (std::uint64_t id = 1; id <= 16; ++id) {
      auto r = c->ReadFrame();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->response().id(), id) << "io_threads " << io_threads;
    }
    c.reset();
    server_.reset();
  }
}

// The session reads what the socket holds at once and waits through asio only for the rest: a
// frame larger than one 64 KiB read, and frames that arrive in pieces (the header split, the
// payload split, pauses between), are all read whole and answered.
TEST_F(ControlServerTest, LargeFramesAndFramesInPiecesAreReadWhole) {
  Start(/*io_threads=*/2);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  std::vector<Token> many(40000);  // 160 KiB of tokens
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<Token>(i);
  ASSERT_TRUE(c->Lookup(many).ok());

  rpc::Frame f;
  f.mutable_request()->set_id(77);
  for (int i = 0; i < 1000; ++i) f.mutable_request()->mutable_lookup()->add_tokens(i);
  const std::string bytes = *EncodeFrame(f, 1 << 20);
  const auto all = std::as_bytes(std::span(bytes));
  for (const std::size_t cut : {std::size_t{3}, std::size_t{8}, bytes.size() / 2}) {
    // [0, cut), a pause, [cut, end): the first piece ends inside the header, at its end, or
    // inside the payload.
    ASSERT_TRUE(c->SendRaw(all.first(cut)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(c->SendRaw(all.subspan(cut)).ok());
    auto r = c->ReadFrame();
    ASSERT_TRUE(r.ok()) << r.status() << " cut at " << cut;
    EXPECT_EQ(r->response().id(), 77u);
    EXPECT_TRUE(r->response().has_lookup());
  }
  EXPECT_EQ(server_->stats().bad_frames, 0);
}

// The session's timer is re-armed only for an earlier deadline (control_session.cc): a connection
// that keeps sending outlives idle_timeout, one that goes quiet is closed about idle_timeout after
// its last request.
TEST_F(ControlServerTest, IdleTimeoutCountsFromTheLastRequest) {
  constexpr std::chrono::milliseconds kIdle{400};
  Start(/*io_threads=*/2, {}, kIdle);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const std::vector<Token> t = {1, 2, 3};
  for (int i = 0; i < 8; ++i) {  // 1.2 s: three idle timeouts, each pushed back
    ASSERT_TRUE(c->Lookup(t).ok()) << "request " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  const Steady::time_point last = Steady::now() - std::chrono::milliseconds(150);
  auto r = c->ReadFrame();  // nothing comes: the node closes the connection
  const auto after = Steady::now() - last;
  EXPECT_FALSE(r.ok());
  EXPECT_GE(after, kIdle - std::chrono::milliseconds(50));
  EXPECT_LT(after, kIdle + std::chrono::seconds(3));
}

// A frame begun after the idle deadline was armed has the earlier deadline of a frame: a client
// that stops mid-frame is dropped after that, not after idle_timeout.
TEST_F(ControlServerTest, AFrameStoppedMidwayIsDroppedAtTheFrameDeadline) {
  constexpr std::chrono::milliseconds kFrame{300};
  Start(/*io_threads=*/2, {}, std::chrono::milliseconds{60000}, kFrame);
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Lookups(*c, 3);
  // Past the handshake's deadline: the timer now waits for the idle one, a minute away.
  std::this_thread::sleep_for(2 * kFrame);
  rpc::Frame f;
  f.mutable_request()->set_id(9);
  for (int i = 0; i < 100; ++i) f.mutable_request()->mutable_lookup()->add_tokens(i);
  const std::string bytes = *EncodeFrame(f, 1 << 20);
  ASSERT_TRUE(c->SendRaw(std::as_bytes(std::span(bytes)).first(bytes.size() / 2)).ok());
  const Steady::time_point sent = Steady::now();
  auto r = c->ReadFrame();
  const auto after = Steady::now() - sent;
  EXPECT_FALSE(r.ok());
  EXPECT_GE(after, kFrame - std::chrono::milliseconds(50));
  EXPECT_LT(after, std::chrono::seconds(5)) << "dropped only at the idle deadline";
}

// connect_timeout covers the handshake: a listener that accepts and never says Hello fails the
// connect at connect_timeout, not at request_timeout.
TEST(NodeClientTest, AHandshakeThatNeverComesFailsAtTheConnectTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);  // the kernel completes the connect; nobody answers
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  NodeClientOptions o;
  o.address = StrCat("127.0.0.1:", ntohs(a.sin_port));
  o.secret = kSecret;
  o.connect_timeout = std::chrono::milliseconds(300);
  o.request_timeout = std::chrono::seconds(30);
  const Steady::time_point start = Steady::now();
  Result<std::unique_ptr<NodeClient>> c = NodeClient::Connect(o);
  const auto took = Steady::now() - start;
  ::close(listener);
  EXPECT_EQ(c.status().code(), StatusCode::kTimedOut) << c.status();
  EXPECT_NE(c.status().message().find("Hello"), std::string::npos) << c.status();
  EXPECT_LT(took, std::chrono::seconds(10)) << "waited for request_timeout";
}

}  // namespace
}  // namespace kvmesh
