#include "node/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "node/auth.h"
#include "node/rpc_convert.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;

Status Errno(std::string_view what, int err) {
  return Status::PeerUnreachable(StrCat(what, ": ", std::strerror(err)));
}

// Connects a non-blocking socket within the deadline.
Status ConnectWithin(int fd, const sockaddr* addr, socklen_t len, Steady::time_point deadline,
                     std::string_view address) {
  if (::connect(fd, addr, len) == 0) return Status::Ok();
  if (errno != EINPROGRESS) return Errno(StrCat("cannot connect to ", address), errno);
  pollfd p{fd, POLLOUT, 0};
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
  const int r = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
  if (r == 0) return Status::TimedOut(StrCat("connecting to ", address, " timed out"));
  int err = 0;
  socklen_t err_len = sizeof(err);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
  if (r < 0 || err != 0) return Errno(StrCat("cannot connect to ", address), r < 0 ? errno : err);
  return Status::Ok();
}

Result<int> OpenSocket(const std::string& address, Steady::time_point deadline, bool* local) {
  std::string path;
  if (address.rfind("unix:", 0) == 0) {
    path = address.substr(5);
  } else if (address.find('/') != std::string::npos) {
    path = address;
  }
  *local = !path.empty();
  if (*local) {
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (path.size() >= sizeof(sun.sun_path)) {
      return Status::InvalidArgument(StrCat("socket path ", path, " is too long"));
    }
    std::memcpy(sun.sun_path, path.data(), path.size());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Errno("socket", errno);
    Status st =
        ConnectWithin(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun), deadline, address);
    if (!st.ok()) {
      ::close(fd);
      return st;
    }
    return fd;
  }
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument(
        StrCat("address '", address, "' is neither a socket path nor host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  const int port = std::atoi(address.c_str() + colon + 1);
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return Status::InvalidArgument(
        StrCat("address '", address, "': '", host, "' is not an IP address"));
  }
  if (port <= 0 || port > 65535) {
    return Status::InvalidArgument(StrCat("address '", address, "': bad port"));
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errno("socket", errno);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Status st = ConnectWithin(fd, reinterpret_cast<sockaddr*>(&ss), len, deadline, address);
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  return fd;
}

}  // namespace

NodeClient::NodeClient(int fd, NodeClientOptions options)
    : fd_(fd), options_(std::move(options)), decoder_(kHandshakeMaxFrameBytes) {}

NodeClient::~NodeClient() { Disconnect(); }

void NodeClient::Disconnect() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  for (int fd : pending_fds_) ::close(fd);
  pending_fds_.clear();
}

Result<std::unique_ptr<NodeClient>> NodeClient::Connect(const NodeClientOptions& options) {
  const Steady::time_point deadline = Steady::now() + options.connect_timeout;
  bool local = false;
  KVMESH_ASSIGN_OR_RETURN(const int fd, OpenSocket(options.address, deadline, &local));
  std::unique_ptr<NodeClient> c(new NodeClient(fd, options));
  c->local_ = local;
  KVMESH_RETURN_IF_ERROR(c->Handshake(deadline));
  return c;
}

Status NodeClient::Handshake(Steady::time_point deadline) {
  Result<rpc::Frame> first = ReadFrameUntil(deadline, nullptr, /*disconnect_on_timeout=*/true);
  if (!first.ok()) return first.status().WithContext("waiting for the node's Hello");
  rpc::Frame& hello = *first;
  if (hello.kind_case() == rpc::Frame::kAuthResult) {  // refused before the handshake
    return StatusFromError(hello.auth_result().error());
  }
  if (hello.kind_case() != rpc::Frame::kHello) {
    return Status::PeerUnreachable("the node did not start with Hello");
  }
  node_id_ = hello.hello().node_id();
  KVMESH_ASSIGN_OR_RETURN(const std::string nonce, MakeAuthNonce());
  rpc::Frame auth;
  rpc::AuthRequest* a = auth.mutable_auth_request();
  a->set_protocol_version(kProtocolVersion);
  a->set_client_nonce(nonce);
  a->set_client_name(options_.client_name);
  a->set_role(options_.role);
  a->set_mac(ClientMac(options_.secret, kProtocolVersion, hello.hello().server_nonce(), nonce,
                       options_.client_name, static_cast<std::uint32_t>(options_.role)));
  KVMESH_ASSIGN_OR_RETURN(const std::string bytes, EncodeFrame(auth, kHandshakeMaxFrameBytes));
  KVMESH_RETURN_IF_ERROR(SendRaw(std::as_bytes(std::span(bytes))));
  Result<rpc::Frame> reply = ReadFrameUntil(deadline, nullptr, /*disconnect_on_timeout=*/true);
  if (!reply.ok()) {
    return Status::PermissionDenied(StrCat("the node closed the connection during the handshake (",
                                           reply.status().message(), "): is the secret right?"));
  }
  if (reply->kind_case() != rpc::Frame::kAuthResult) {
    return Status::PeerUnreachable("the node did not answer the handshake");
  }
  const rpc::AuthResult& r = reply->auth_result();
  KVMESH_RETURN_IF_ERROR(StatusFromError(r.error()));
  const std::string expected = ServerMac(options_.secret, kProtocolVersion, nonce,
                                         hello.hello().server_nonce(), r.session_id());
  if (!MacEquals(expected, r.server_mac())) {
    Disconnect();
    return Status::PermissionDenied("the node could not prove it knows the secret");
  }
  session_id_ = r.session_id();
  decoder_.set_max_length(options_.max_frame_size);
  return Status::Ok();
}

Status NodeClient::SendRaw(std::span<const std::byte> bytes) {
  if (fd_ < 0) return Status::PeerUnreachable("not connected");
  const Steady::time_point deadline = Steady::now() + options_.request_timeout;
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        Disconnect();
        return Status::TimedOut("sending to the node timed out");
      }
      continue;
    }
    const int err = errno;
    Disconnect();
    return Errno("sending to the node", err);
  }
  return Status::Ok();
}

Status NodeClient::WaitReadable(Steady::time_point deadline) {
  // Spin first: a response that comes within spin_wait is read without this thread sleeping and
  // being woken (a wake-up is about 19 us on the VM this was measured on, docs/kvnode.md).
  // Only within Call, for a kind of call that has been answered within spin_wait (spin_now_).
  // Between polls the thread yields its core to any other thread ready on it (the node's, when
  // both run on one core), so a spin costs what would otherwise be idle time.
  if (spin_now_) {
    const Steady::time_point spin_until = Steady::now() + options_.spin_wait;
    do {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 0);
      if (r > 0) return Status::Ok();
      if (r < 0 && errno != EINTR) return Errno("poll", errno);
      ::sched_yield();
    } while (Steady::now() < spin_until);
  }
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
    if (left.count() <= 0) return Status::TimedOut("no response from the node in time");
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return Status::Ok();
    if (r == 0) return Status::TimedOut("no response from the node in time");
    if (errno != EINTR) return Errno("poll", errno);
  }
}

Result<rpc::Frame> NodeClient::ReadFrame(std::vector<int>* fds) {
  return ReadFrameUntil(Steady::now() + options_.request_timeout, fds,
                        /*disconnect_on_timeout=*/true);
}

Result<rpc::Frame> NodeClient::ReadFrameUntil(Steady::time_point deadline, std::vector<int>* fds,
                                              bool disconnect_on_timeout) {
  std::array<std::byte, 64 * 1024> buf;  // not zeroed: recvmsg fills what is read
  for (;;) {
    if (fd_ < 0) return Status::PeerUnreachable("not connected");
    Result<std::optional<rpc::Frame>> next = decoder_.Next();
    if (!next.ok()) {
      Disconnect();
      return Status::PeerUnreachable(StrCat("bad frame from the node: ", next.status().message()));
    }
    if (next->has_value()) {
      if (fds != nullptr) {
        fds->insert(fds->end(), pending_fds_.begin(), pending_fds_.end());
        pending_fds_.clear();
      }
      return std::move(**next);
    }
    Status ready = WaitReadable(deadline);
    if (!ready.ok()) {
      if (disconnect_on_timeout || ready.code() != StatusCode::kTimedOut) Disconnect();
      return ready;
    }
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * 64)> control{};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (local_) {
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
    }
    const ssize_t n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      Disconnect();
      return n == 0 ? Status::PeerUnreachable("the node closed the connection")
                    : Errno("receiving from the node", err);
    }
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        pending_fds_.push_back(fd);
      }
    }
    decoder_.Feed(std::span(buf.data(), static_cast<std::size_t>(n)));
  }
}

Result<rpc::Response> NodeClient::Call(rpc::Request request, std::vector<int>* fds) {
  const std::uint64_t id = next_id_++;
  request.set_id(id);
  if (request.timeout_ms() == 0) {
    request.set_timeout_ms(static_cast<std::uint32_t>(options_.request_timeout.count()));
  }
  const std::chrono::milliseconds timeout(request.timeout_ms());
  const int kind = static_cast<int>(request.body_case());
  rpc::Frame f;
  *f.mutable_request() = std::move(request);
  KVMESH_ASSIGN_OR_RETURN(const std::string bytes, EncodeFrame(f, options_.max_frame_size));
  KVMESH_RETURN_IF_ERROR(SendRaw(std::as_bytes(std::span(bytes))));
  const bool adaptive = options_.spin_wait.count() > 0;
  std::uint8_t* score =
      adaptive ? &spin_score_.try_emplace(kind, kSpinScoreStart).first->second : nullptr;
  spin_now_ = adaptive && *score >= kSpinScoreSpin;
  spinning_calls_ += spin_now_ ? 1 : 0;
  const Steady::time_point sent = Steady::now();
  // The wait is the request's own timeout (a handoff's or a fetch's deadline, which may be longer
  // or shorter than request_timeout), plus a grace for the node's answer at that deadline to
  // arrive.
  const Steady::time_point wait_until = sent + timeout + kAnswerGrace;
  for (;;) {
    Result<rpc::Frame> reply = ReadFrameUntil(wait_until, fds, /*disconnect_on_timeout=*/true);
    if (!reply.ok()) {
      spin_now_ = false;
      return reply.status();
    }
    if (reply->kind_case() != rpc::Frame::kResponse) continue;
    rpc::Response& r = *reply->mutable_response();
    if (r.id() != id && r.id() != 0) continue;  // a stale event batch of an old subscription
    spin_now_ = false;
    if (adaptive) {
      // Learn whether this kind of call is answered within spin_wait (also while not spinning).
      const bool fast = Steady::now() - sent <= options_.spin_wait;
      *score = fast ? std::min<std::uint8_t>(kSpinScoreMax, *score + 1)
                    : static_cast<std::uint8_t>(*score > 0 ? *score - 1 : 0);
    }
    KVMESH_RETURN_IF_ERROR(StatusFromError(r.error()));
    return std::move(r);
  }
}

Result<rpc::AttachResponse> NodeClient::Attach(std::vector<int>* fds) {
  rpc::Request req;
  req.mutable_attach();
  KVMESH_ASSIGN_OR_RETURN(rpc::Response r, Call(std::move(req), fds));
  return std::move(*r.mutable_attach());
}

Result<AdmitReply> NodeClient::Admit(std::uint64_t request_id, std::span<const Token> tokens,
                                     const SequenceOptions& options) {
  rpc::Request req;
  rpc::AdmitRequest* a = req.mutable_admit();
  a->set_request_id(request_id);
  a->mutable_tokens()->Add(tokens.begin(), tokens.end());
  ToProto(options, a->mutable_options());
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, Call(std::move(req)));
  const rpc::AdmitResponse& ar = r.admit();
  AdmitReply out;
  out.result.reused_tokens = ar.reused_tokens();
  out.result.reused_blocks = ar.reused_blocks();
  out.result.partial_tokens = ar.partial_tokens();
  out.result.partial = static_cast<PartialReuse>(ar.partial());
  for (const rpc::BlockTable& t : ar.tables()) out.result.tables.push_back(FromProto(t));
  out.pool_hit_blocks = ar.pool_hit_blocks();
  out.host_hit_blocks = ar.host_hit_blocks();
  out.disk_hit_blocks = ar.disk_hit_blocks();
  out.remote_hit_blocks = ar.remote_hit_blocks();
  return out;
}

Result<rpc::HandoffResponse> NodeClient::HandOffTo(const std::string& to_node_id,
                                                   const std::string& to_address,
                                                   std::span<const Token> tokens,
                                                   const SequenceOptions& options,
                                                   std::uint32_t deadline_ms) {
  return HandOff(to_node_id, to_address, tokens, options, deadline_ms, std::nullopt);
}

Result<rpc::HandoffResponse> NodeClient::HandOff(const std::string& to_node_id,
                                                 const std::string& to_address,
                                                 std::span<const Token> tokens,
                                                 const SequenceOptions& options,
                                                 std::uint32_t deadline_ms,
                                                 std::optional<std::uint64_t> stream_request) {
  rpc::Request req;
  rpc::HandOffToRequest* h = req.mutable_hand_off_to();
  h->set_to_node_id(to_node_id);
  h->set_to_address(to_address);
  h->mutable_tokens()->Add(tokens.begin(), tokens.end());
  ToProto(options, h->mutable_options());
  h->set_deadline_ms(deadline_ms);
  if (stream_request) {
    h->set_stream(true);
    h->set_request_id(*stream_request);
  }
  KVMESH_ASSIGN_OR_RETURN(rpc::Response r, Call(std::move(req)));
  return std::move(*r.mutable_hand_off_to());
}

Result<rpc::HandoffResponse> NodeClient::HandOffStream(
    std::uint64_t request_id, const std::string& to_node_id, const std::string& to_address,
    std::span<const Token> tokens, const SequenceOptions& options, std::uint32_t deadline_ms) {
  return HandOff(to_node_id, to_address, tokens, options, deadline_ms, request_id);
}

Result<rpc::HandoffResponse> NodeClient::HandOffLayers(std::uint64_t handoff_id,
                                                       std::int32_t layers_done, bool wait) {
  rpc::Request req;
  rpc::HandoffLayersDone* l = req.mutable_hand_off_layers();
  l->set_handoff_id(handoff_id);
  l->set_layers_done(layers_done);
  l->set_wait(wait);
  KVMESH_ASSIGN_OR_RETURN(rpc::Response r, Call(std::move(req)));
  return std::move(*r.mutable_hand_off_layers());
}

Result<std::int64_t> NodeClient::StoreFullBlocks(std::uint64_t request_id,
                                                 std::optional<std::int64_t> num_computed_tokens) {
  rpc::Request req;
  rpc::StoreFullBlocksRequest* s = req.mutable_store_full_blocks();
  s->set_request_id(request_id);
  if (num_computed_tokens) s->set_num_computed_tokens(*num_computed_tokens);
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, Call(std::move(req)));
  return r.store_full_blocks().stored_blocks();
}

Result<AppendResult> NodeClient::AppendTokens(std::uint64_t request_id,
                                              std::span<const Token> tokens) {
  rpc::Request req;
  rpc::AppendTokensRequest* a = req.mutable_append_tokens();
  a->set_request_id(request_id);
  a->mutable_tokens()->Add(tokens.begin(), tokens.end());
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, Call(std::move(req)));
  AppendResult out;
  out.num_tokens = r.append_tokens().num_tokens();
  for (const rpc::Int32List& l : r.append_tokens().new_blocks()) {
    out.new_blocks.emplace_back(l.values().begin(), l.values().end());
  }
  for (const rpc::Int64List& l : r.append_tokens().released_positions()) {
    out.released_positions.emplace_back(l.values().begin(), l.values().end());
  }
  return out;
}

Status NodeClient::Release(std::uint64_t request_id) {
  rpc::Request req;
  req.mutable_release()->set_request_id(request_id);
  return Call(std::move(req)).status();
}

Result<std::int64_t> NodeClient::Prefetch(std::span<const Token> tokens,
                                          const SequenceOptions& options) {
  rpc::Request req;
  rpc::PrefetchRequest* p = req.mutable_prefetch();
  p->mutable_tokens()->Add(tokens.begin(), tokens.end());
  ToProto(options, p->mutable_options());
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, Call(std::move(req)));
  return r.prefetch().blocks();
}

Result<rpc::LookupResponse> NodeClient::Lookup(std::span<const Token> tokens,
                                               const SequenceOptions& options) {
  rpc::Request req;
  rpc::LookupRequest* l = req.mutable_lookup();
  l->mutable_tokens()->Add(tokens.begin(), tokens.end());
  ToProto(options, l->mutable_options());
  KVMESH_ASSIGN_OR_RETURN(rpc::Response r, Call(std::move(req)));
  return std::move(*r.mutable_lookup());
}

Result<KvEventBatch> NodeClient::PollEvents(std::uint64_t from_seq, std::uint32_t max_events) {
  rpc::Request req;
  req.mutable_poll_events()->set_from_seq(from_seq);
  req.mutable_poll_events()->set_max_events(max_events);
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, Call(std::move(req)));
  return FromProto(r.events());
}

Status NodeClient::SubscribeEvents(std::uint64_t from_seq) {
  rpc::Request req;
  req.set_id(next_id_++);
  req.mutable_subscribe_events()->set_from_seq(from_seq);
  subscription_id_ = req.id();
  rpc::Frame f;
  *f.mutable_request() = std::move(req);
  KVMESH_ASSIGN_OR_RETURN(const std::string bytes, EncodeFrame(f, options_.max_frame_size));
  return SendRaw(std::as_bytes(std::span(bytes)));
}

Result<std::optional<KvEventBatch>> NodeClient::NextEvents(std::chrono::milliseconds wait) {
  const Steady::time_point deadline = Steady::now() + wait;
  for (;;) {
    Result<rpc::Frame> frame = ReadFrameUntil(deadline, nullptr, /*disconnect_on_timeout=*/false);
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kTimedOut && connected()) {
        return std::optional<KvEventBatch>();
      }
      return frame.status();
    }
    if (frame->kind_case() != rpc::Frame::kResponse) continue;
    const rpc::Response& r = frame->response();
    if (r.id() != subscription_id_ && r.id() != 0) continue;
    KVMESH_RETURN_IF_ERROR(StatusFromError(r.error()));
    if (r.body_case() != rpc::Response::kEvents) continue;
    return std::optional<KvEventBatch>(FromProto(r.events()));
  }
}

Result<rpc::StatusResponse> NodeClient::GetStatus() {
  rpc::Request req;
  req.mutable_status();
  KVMESH_ASSIGN_OR_RETURN(rpc::Response r, Call(std::move(req)));
  return std::move(*r.mutable_status());
}

}  // namespace kvmesh
