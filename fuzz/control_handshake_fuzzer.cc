// Fuzz target control_handshake: the control server's per-connection state machine
// (node/control_server.h: handshake, then requests) through real sockets. The Session lives inside
// control_server.cc and reads from a socket, so it cannot be driven without one: one ControlServer
// (Unix socket and TCP on loopback) with the EngineService of a small node core
// (fuzz/node_rig.h, with a host and a RocksDB tier) runs for the whole fuzzing process, and every
// input is one client connection.
//
// Input: [flags u8][client name length u8][client name][role u8][stream...]
//   flags bit 0: authenticate first (the target answers the node's Hello with a correct
//                AuthRequest — the name and role from the input — and checks the AuthResult and
//                its server MAC); otherwise the stream is the handshake itself;
//   flags bit 1: TCP instead of the Unix socket.
// The stream's bytes are sent as they are. When they end on a frame boundary (the target decodes
// them as the server will), a Status request with id kMarkerId follows, and the target reads until
// its answer, which comes after the answers of every request before it (a connection's requests
// run in order). Then the client closes its side and reads until the node closes the connection.
// Oracles: the node never crashes (ASan/UBSan in the same process) and never hangs — it answers
// the marker and closes the connection within 20 s; every frame it sends decodes (node/frame.h),
// the first is a Hello with a 32-byte nonce; a correct handshake is always accepted (so the node
// still serves after every earlier input).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "common/check.h"
#include "common/log.h"
#include "common/strings.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/node_rig.h"
#include "fuzz/quiet_protobuf.h"
#include "node/auth.h"
#include "node/control_server.h"
#include "node/frame.h"

namespace kvmesh::fuzz {
namespace {

constexpr std::uint64_t kMarkerId = 0x6b766d6573680001;  // "kvmesh" 0001
constexpr std::uint32_t kMaxFrame = 64 << 10;
constexpr char kSecret[] = "fuzz-secret-0123456789abcdef";
constexpr auto kPatience = std::chrono::seconds(20);

// The node for the whole process; removed at exit.
class Server {
 public:
  Server() {
    char tmpl[] = "/tmp/kvmesh-fuzz-XXXXXX";
    KVMESH_CHECK(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    NodeRigOptions o;
    o.disk_path = dir_ + "/rocksdb";
    o.copy_threads = 1;
    o.manual_clock = false;
    rig_ = std::make_unique<NodeRig>(o);
    ControlServerOptions c;
    c.node_id = "fuzz";
    c.secret = kSecret;
    c.unix_socket = dir_ + "/kvnode.sock";
    c.tcp_listen = "127.0.0.1:0";
    c.max_frame_size = kMaxFrame;
    c.handshake_timeout = std::chrono::milliseconds(2000);
    c.idle_timeout = std::chrono::milliseconds(5000);
    c.max_inflight_per_connection = 4;
    c.io_threads = 1;
    c.worker_threads = 2;
    c.event_poll_interval = std::chrono::milliseconds(5);
    auto server = ControlServer::Start(c, &rig_->service());
    KVMESH_CHECK(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    rig_->service().SetServer(server_.get());
  }
  ~Server() {
    server_.reset();
    rig_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& unix_socket() const { return server_->unix_socket(); }
  std::string tcp_address() const { return server_->tcp_address(); }

 private:
  std::string dir_;
  std::unique_ptr<NodeRig> rig_;
  std::unique_ptr<ControlServer> server_;
};

Server& TheServer() {
  static Server* server = [] {
    KVMESH_CHECK(SetLogLevel("off").ok());
    auto* s = new Server();
    std::atexit([] { delete &TheServer(); });
    return s;
  }();
  return *server;
}

int Connect(bool tcp) {
  if (tcp) {
    const std::string addr = TheServer().tcp_address();
    const auto colon = addr.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1))));
    KVMESH_CHECK(::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) == 1);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    KVMESH_CHECK(fd >= 0);
    KVMESH_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0)
        << "connect " << addr << ": " << std::strerror(errno);
    return fd;
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const std::string& path = TheServer().unix_socket();
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  KVMESH_CHECK(fd >= 0);
  KVMESH_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0)
      << "connect " << path << ": " << std::strerror(errno);
  return fd;
}

// One client connection: bytes out, frames in, with a deadline on everything.
class Connection {
 public:
  explicit Connection(bool tcp)
      : fd_(Connect(tcp)), deadline_(std::chrono::steady_clock::now() + kPatience) {}
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void Queue(std::string_view bytes) { out_.append(bytes); }
  // Pumps until `until` (or the node closed the connection: false). Every frame received goes
  // through `on_frame`.
  template <typename Until>
  bool Pump(Until until) {
    while (!until()) {
      if (closed_) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline_ - std::chrono::steady_clock::now());
      KVMESH_CHECK(left.count() > 0) << "the node neither answered nor closed in time";
      pollfd p{fd_, static_cast<short>(POLLIN | (sent_ < out_.size() ? POLLOUT : 0)), 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      KVMESH_CHECK(n >= 0 || errno == EINTR);
      if (n <= 0) continue;
      if ((p.revents & POLLOUT) != 0) Send();
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) Receive();
    }
    return true;
  }
  void CloseWrite() { ::shutdown(fd_, SHUT_WR); }
  [[nodiscard]] bool closed() const { return closed_; }
  std::vector<rpc::Frame>& frames() { return frames_; }
  [[nodiscard]] bool all_sent() const { return sent_ == out_.size() || write_failed_; }

 private:
  void Send() {
    const ssize_t n =
        ::send(fd_, out_.data() + sent_, out_.size() - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent_ += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      write_failed_ = true;  // the node closed: the rest cannot be sent
      sent_ = out_.size();
    }
  }
  void Receive() {
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      closed_ = true;
      return;
    }
    if (n < 0) return;
    decoder_.Feed(std::as_bytes(std::span(buf, static_cast<std::size_t>(n))));
    while (true) {
      auto f = decoder_.Next();
      KVMESH_CHECK(f.ok()) << "the node sent a frame that does not decode: " << f.status();
      if (!f->has_value()) break;
      frames_.push_back(std::move(**f));
    }
  }

  const int fd_;
  const std::chrono::steady_clock::time_point deadline_;
  std::string out_;
  std::size_t sent_ = 0;
  bool write_failed_ = false;
  bool closed_ = false;
  FrameDecoder decoder_{std::max<std::uint32_t>(kMaxFrame, kHandshakeMaxFrameBytes)};
  std::vector<rpc::Frame> frames_;
};

std::string Frame(const rpc::Frame& f) { return std::move(EncodeFrame(f, kMaxFrame)).value(); }

// Answers the Hello correctly and checks the node's AuthResult.
void Authenticate(Connection& c, const std::string& name, rpc::ClientRole role) {
  KVMESH_CHECK(c.Pump([&] { return !c.frames().empty(); })) << "no Hello";
  const rpc::Frame& hello = c.frames().front();
  const std::string server_nonce = hello.hello().server_nonce();
  const std::string client_nonce = std::move(MakeAuthNonce()).value();
  rpc::Frame f;
  rpc::AuthRequest* a = f.mutable_auth_request();
  a->set_protocol_version(kProtocolVersion);
  a->set_client_nonce(client_nonce);
  a->set_client_name(name);
  a->set_role(role);
  a->set_mac(ClientMac(kSecret, kProtocolVersion, server_nonce, client_nonce, name,
                       static_cast<std::uint32_t>(role)));
  c.Queue(Frame(f));
  KVMESH_CHECK(c.Pump([&] { return c.frames().size() >= 2; })) << "no AuthResult";
  const rpc::Frame& r = c.frames()[1];
  KVMESH_CHECK(r.has_auth_result()) << "frame kind " << r.kind_case();
  KVMESH_CHECK(!r.auth_result().has_error() || r.auth_result().error().code() == 0)
      << "a correct handshake was refused: " << r.auth_result().error().message();
  KVMESH_CHECK(r.auth_result().server_mac() == ServerMac(kSecret, kProtocolVersion, client_nonce,
                                                         server_nonce,
                                                         r.auth_result().session_id()));
}

// Whether `stream` ends on a frame boundary with no bad header (the server then waits for the
// next frame, so a marker request after it is read as a frame).
bool EndsOnFrameBoundary(std::span<const std::byte> stream, std::uint32_t limit) {
  FrameDecoder d(limit);
  d.Feed(stream);
  while (true) {
    auto f = d.Next();
    if (!f.ok()) {
      if (f.status().IsInvalidArgument() && f.status().message() != "unknown message type") {
        return false;
      }
      continue;
    }
    if (!f->has_value()) return d.buffered() == 0;
  }
}

}  // namespace
}  // namespace kvmesh::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  using namespace kvmesh::fuzz;
  kvmesh::fuzz::QuietProtobuf();
  TheServer();
  FuzzInput in(data, size);
  const std::uint8_t flags = in.U8();
  const bool authenticate = (flags & 1) != 0;
  // A client name is a proto3 string: valid UTF-8, or the node cannot parse the AuthRequest
  // (that refusal is what the unauthenticated streams exercise). Printable ASCII here.
  std::string name = in.String(in.U8() % 33);
  for (char& ch : name) ch = static_cast<char>('a' + static_cast<unsigned char>(ch) % 26);
  const auto role = static_cast<rpc::ClientRole>(in.U8() % 4);
  const auto stream = in.Rest();

  Connection c((flags & 2) != 0);
  if (authenticate) {
    Authenticate(c, name, role);
  } else {
    KVMESH_CHECK(c.Pump([&] { return !c.frames().empty(); }) || c.closed());
  }
  KVMESH_CHECK(!c.frames().empty() && c.frames().front().has_hello() &&
               c.frames().front().hello().server_nonce().size() == kAuthNonceBytes)
      << "the node's first frame is not a Hello with a nonce";
  c.Queue(AsText(stream));
  const std::uint32_t limit = authenticate ? kMaxFrame : kHandshakeMaxFrameBytes;
  if (authenticate && EndsOnFrameBoundary(AsBytes(stream), limit)) {
    rpc::Frame marker;
    marker.mutable_request()->set_id(kMarkerId);
    marker.mutable_request()->mutable_status();
    c.Queue(Frame(marker));
    std::size_t seen = 0;
    bool answered = false;
    c.Pump([&] {
      for (; seen < c.frames().size(); ++seen) {
        const rpc::Frame& f = c.frames()[seen];
        answered = answered || (f.has_response() && f.response().id() == kMarkerId);
      }
      return answered;
    });
    // The stream ended on a frame boundary without a bad header: the node keeps the connection
    // and answers every request, the marker last.
    KVMESH_CHECK(answered) << "the marker request was not answered";
  }
  c.Pump([&] { return c.all_sent(); });
  c.CloseWrite();
  c.Pump([] { return false; });  // until the node closes the connection
  return 0;
}
