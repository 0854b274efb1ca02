// The control server's per-connection session (node/control_server.h: handshake, requests,
// events, writing, timers and closing), and the server's accept loop and session registry.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

#include "common/check.h"
#include "common/log.h"
#include "common/strings.h"
#include "node/auth.h"
#include "node/control_server_internal.h"
#include "node/frame.h"
#include "node/rpc_convert.h"

namespace kvmesh {
namespace control_internal {

namespace asio = boost::asio;

namespace {

struct Outgoing {
  std::string bytes;
  std::vector<int> fds;
  bool events = false;  // an EventBatch of a subscription (one queued at a time)
};

}  // namespace

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ControlServer::Impl& server, Proto::socket socket, bool local, std::string peer)
      : server_(server),
        socket_(std::move(socket)),
        strand_(asio::make_strand(server.io)),
        work_strand_(asio::make_strand(server.workers.get_executor())),
        timer_(strand_),
        event_timer_(strand_),
        id_(server.next_session_id.fetch_add(1)),
        local_(local),
        peer_(std::move(peer)),
        started_(std::chrono::steady_clock::now()) {}

  [[nodiscard]] std::uint64_t id() const { return id_; }

  // Posted, never dispatched: the session's first handler must not run inside the accept handler.
  // From SendHello on, a session reads what has already arrived and runs it at once (ReadHeader's
  // ReadNow), the handshake and then requests inline; nested in the accept handler, a request
  // that arrived that early (a client faster than this thread) ran inside the acceptor's strand,
  // and no connection was accepted until it finished: a handoff's receiver, connecting back,
  // waited for the whole handoff (seen under ASan; gdb showed Execute under Session::Start).
  void Start() {
    asio::post(strand_, [self = shared_from_this()] { self->SendHello(); });
  }
  void PostClose(std::string reason) {
    asio::post(strand_,
               [self = shared_from_this(), reason = std::move(reason)] { self->Close(reason); });
  }

 private:
  enum class Phase : std::uint8_t { kHandshake, kReady, kClosed };
  const ControlServerOptions& opts() const { return server_.options; }

  void SendHello() {
    Result<std::string> nonce = MakeAuthNonce();
    if (!nonce.ok()) {
      Close(nonce.status().ToString());
      return;
    }
    server_nonce_ = *nonce;
    rpc::Frame f;
    rpc::Hello* h = f.mutable_hello();
    h->set_protocol_version(kProtocolVersion);
    h->set_server_nonce(server_nonce_);
    h->set_node_id(opts().node_id);
    SendFrame(f);
    UpdateTimer();
    ReadHeader();
  }

  // ---- reading
  // Reading is tried at once, on this thread: a frame the socket already holds is read and
  // handled here (OnHeader, OnPayload) instead of through an asio operation, whose completion goes
  // through the scheduler and may run on another io thread — a thread wake-up, and the request's
  // bytes and the node's state in another core's caches. Only what would block waits for asio.
  // At most kMaxFramesAtOnce frames are handled in a row this way (they nest on the stack); the
  // next one goes through asio, so that one busy connection cannot hold an io thread forever.
  static constexpr int kMaxFramesAtOnce = 8;

  // Reads into data[got, size) what the socket holds, without waiting (asio keeps its sockets
  // non-blocking). True when the range is full, or when the stream ended or failed (`ec`); false
  // when the rest has not arrived yet.
  bool ReadNow(char* data, std::size_t size, std::size_t& got, error_code& ec) {
    const int fd = socket_.native_handle();
    while (got < size) {
      const ssize_t n = ::recv(fd, data + got, size - got, MSG_DONTWAIT);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
      } else if (n == 0) {
        ec = asio::error::eof;
        return true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return false;
      } else if (errno != EINTR) {
        ec = error_code(errno, asio::error::get_system_category());
        return true;
      }
    }
    return true;
  }

  void ReadHeader() {
    if (phase_ == Phase::kClosed) return;
    reading_payload_ = false;
    std::size_t got = 0;
    error_code ec;
    if (frames_at_once_ < kMaxFramesAtOnce) {
      if (ReadNow(reinterpret_cast<char*>(header_.data()), header_.size(), got, ec)) {
        ++frames_at_once_;
        OnHeader(ec);
        --frames_at_once_;
        return;
      }
      if (got == 0) {
        // Nothing yet: wait until the socket is readable, then read here. (An asio read would try
        // the socket again first and, finding the bytes, hand its completion to the scheduler.)
        socket_.async_wait(Proto::socket::wait_read,
                           asio::bind_executor(strand_, [self = shared_from_this()](error_code e) {
                             if (e) {
                               self->Close(e.message());
                             } else {
                               self->ReadHeader();
                             }
                           }));
        return;
      }
    }
    asio::async_read(
        socket_, asio::buffer(header_) + got,
        asio::bind_executor(strand_, [self = shared_from_this()](error_code ec2, std::size_t) {
          self->OnHeader(ec2);
        }));
  }

  void OnHeader(error_code ec) {
    if (ec) {
      Close(ec == asio::error::eof ? "closed by peer" : ec.message());
      return;
    }
    const std::uint32_t limit =
        phase_ == Phase::kHandshake ? kHandshakeMaxFrameBytes : opts().max_frame_size;
    Result<FrameHeader> h = DecodeFrameHeader(header_, limit);
    if (!h.ok()) {
      server_.bad_frames.fetch_add(1);
      if (phase_ == Phase::kHandshake) server_.auth_failures.fetch_add(1);
      SendError(0, h.status());
      close_after_write_ = true;
      if (!writing_) Close(h.status().message());
      return;
    }
    payload_.resize(h->length);
    reading_payload_ = true;
    payload_started_ = std::chrono::steady_clock::now();
    back_to_back_ = answered_at_ && payload_started_ - *answered_at_ <= opts().busy_poll;
    answered_at_.reset();
    UpdateTimer();
    std::size_t got = 0;
    error_code ec2;
    if (ReadNow(payload_.data(), payload_.size(), got, ec2)) {
      OnPayload(ec2);
      return;
    }
    // The rest in as few reads as it takes (asio's own completion conditions read at most 64 KiB
    // at a time).
    const std::size_t rest = payload_.size() - got;
    asio::async_read(
        socket_, asio::buffer(payload_) + got,
        [rest](const error_code& e, std::size_t n) -> std::size_t { return e ? 0 : rest - n; },
        asio::bind_executor(strand_, [self = shared_from_this()](error_code ec3, std::size_t) {
          self->OnPayload(ec3);
        }));
  }

  void OnPayload(error_code ec) {
    if (ec) {
      Close(ec == asio::error::eof ? "closed by peer mid-frame" : ec.message());
      return;
    }
    reading_payload_ = false;
    last_activity_ = std::chrono::steady_clock::now();
    Result<rpc::Frame> frame = DecodeFramePayload(
        std::span(reinterpret_cast<const std::byte*>(payload_.data()), payload_.size()));
    payload_.clear();
    if (payload_.capacity() > (1u << 20)) std::string().swap(payload_);  // keep small buffers
    if (!frame.ok()) {
      server_.bad_frames.fetch_add(1);
      if (phase_ == Phase::kHandshake) {
        Reject(frame.status().message());
        return;
      }
      SendError(0, frame.status());
      UpdateTimer();
      ReadHeader();
      return;
    }
    if (phase_ == Phase::kHandshake) {
      OnHandshakeFrame(*frame);
    } else {
      OnReadyFrame(std::move(*frame));
    }
    if (phase_ != Phase::kClosed && !close_after_write_) {
      UpdateTimer();
      if (answered_inline_) PollForNextRequest();
      ReadHeader();
    }
  }

  // Busy polling (control_server.h): after an answer written inline to an engine (the Unix
  // socket), peek at the socket for up to busy_poll; ReadHeader then finds the next request there
  // and reads it at once, on this thread. Only while the connection sends back to back — the
  // request just answered came within busy_poll of the answer before it — so that a connection of
  // sparse requests costs no polling (and no inline slot). Holds an inline slot meanwhile, so
  // another io thread stays free.
  void PollForNextRequest() {
    using Steady = std::chrono::steady_clock;
    answered_inline_ = false;
    const auto window = opts().busy_poll;
    answered_at_ = Steady::now();
    if (!local_ || window.count() <= 0 || !back_to_back_ || !server_.TakeInlineSlot()) return;
    const Steady::time_point start = *answered_at_;
    const int fd = socket_.native_handle();
    bool found = false;
    for (;;) {
      char byte;
      const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) {
        found = true;
        break;
      }
      // The peer closed, or an error: the read reports it.
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
      if (Steady::now() - start >= window) break;
    }
    const Steady::time_point now = Steady::now();
    server_.ReturnInlineSlot();
    if (found) server_.busy_poll_hits.fetch_add(1, std::memory_order_relaxed);
    server_.busy_poll_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count(),
        std::memory_order_relaxed);
  }

  // ---- handshake
  void OnHandshakeFrame(const rpc::Frame& frame) {
    if (frame.kind_case() != rpc::Frame::kAuthRequest) {
      Reject("authenticate first: the first message must be an AuthRequest");
      return;
    }
    const rpc::AuthRequest& a = frame.auth_request();
    if (a.protocol_version() != kProtocolVersion) {
      Reject(StrCat("protocol version ", a.protocol_version(),
                    " is not supported (this node "
                    "speaks ",
                    kProtocolVersion, ")"));
      return;
    }
    // The secret the client proved it holds: the node's, or the second one during a rotation.
    const std::shared_ptr<const ControlServer::Impl::Secrets> secrets = server_.CurrentSecrets();
    const auto proves = [&](const std::string& secret) {
      return !secret.empty() &&
             MacEquals(ClientMac(secret, a.protocol_version(), server_nonce_, a.client_nonce(),
                                 a.client_name(), static_cast<std::uint32_t>(a.role())),
                       a.mac());
    };
    const std::string* used = nullptr;
    if (a.client_nonce().size() == kAuthNonceBytes) {
      if (proves(secrets->secret)) {
        used = &secrets->secret;
      } else if (proves(secrets->second)) {
        used = &secrets->second;
      }
    }
    if (used == nullptr) {
      Reject("authentication failed: wrong secret");
      return;
    }
    SessionInfo info;
    info.session_id = id_;
    info.role = a.role();
    info.client_name = a.client_name();
    info.peer = peer_;
    info.local = local_;
    state_ = server_.handler->OpenSession(info);
    phase_ = Phase::kReady;
    server_.sessions_opened.fetch_add(1);
    rpc::Frame reply;
    rpc::AuthResult* r = reply.mutable_auth_result();
    r->set_session_id(id_);
    r->set_server_mac(ServerMac(*used, kProtocolVersion, a.client_nonce(), server_nonce_, id_));
    SendFrame(reply);
    KVMESH_LOG_DEBUG("session open id {} peer {} client {} role {}", id_, peer_, a.client_name(),
                     rpc::ClientRole_Name(a.role()));
  }

  // Counted once; closed once the answer is written. (Set after SendFrame, whose write completes
  // at once when the socket takes it, the flag came too late: the connection stayed open until
  // the handshake timeout, which counted it a second time.)
  void Reject(const std::string& why) {
    server_.auth_failures.fetch_add(1);
    KVMESH_LOG_WARN("handshake refused peer {} reason {}", peer_, why);
    rpc::Frame reply;
    SetError(reply.mutable_auth_result()->mutable_error(), Status::PermissionDenied(why));
    close_after_write_ = true;
    SendFrame(reply);
    if (!writing_) Close(why);
  }

  // ---- requests
  void OnReadyFrame(rpc::Frame frame) {
    if (frame.kind_case() != rpc::Frame::kRequest) {
      server_.bad_frames.fetch_add(1);
      SendError(0, Status::InvalidArgument(StrCat(
                       "unexpected message (frame kind ", static_cast<int>(frame.kind_case()),
                       ") after authentication: only requests are accepted")));
      return;
    }
    rpc::Request& req = *frame.mutable_request();
    const std::uint64_t rid = req.id();
    if (req.body_case() == rpc::Request::BODY_NOT_SET) {
      server_.bad_frames.fetch_add(1);
      SendError(rid, Status::InvalidArgument("unknown message type"));
      return;
    }
    if (server_.draining.load()) {
      SendError(rid, Status::PeerUnreachable("node is shutting down"));
      return;
    }
    if (req.body_case() == rpc::Request::kSubscribeEvents) {
      subscribe_id_ = rid;
      next_event_seq_ = req.subscribe_events().from_seq();
      PollEvents();
      return;
    }
    if (inflight_ >= opts().max_inflight_per_connection) {
      Rejected(rid, StrCat("too many requests in flight on this connection (limit ",
                           opts().max_inflight_per_connection, ")"));
      return;
    }
    if (server_.inflight.fetch_add(1) >= opts().max_inflight_total) {
      server_.inflight.fetch_sub(1);
      Rejected(rid, StrCat("too many requests in flight on this node (limit ",
                           opts().max_inflight_total, ")"));
      return;
    }
    ++inflight_;
    const auto timeout =
        req.timeout_ms() > 0 ? std::chrono::milliseconds(req.timeout_ms()) : opts().request_timeout;
    const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
    // Inline: with nothing else of this session in flight (its requests stay in order, one at a
    // time) and another io thread free for the sockets, the request runs here, on this session's
    // strand, and its response is written from here: no hand-off to a worker and back, two thread
    // wake-ups of the four a request otherwise costs (about 19 us each on the 2-core VM this was
    // measured on; docs/kvnode.md). Else it goes to the worker pool.
    if (inflight_ == 1 && server_.TakeInlineSlot()) {
      server_.requests_inline.fetch_add(1, std::memory_order_relaxed);
      HandlerResult result = Execute(req, deadline);
      server_.ReturnInlineSlot();
      Finish(std::move(result));
      answered_inline_ = true;
      return;
    }
    asio::post(work_strand_, [self = shared_from_this(), req = std::move(req), deadline] {
      self->Run(req, deadline);
    });
  }

  void Rejected(std::uint64_t rid, std::string why) {
    server_.requests_rejected.fetch_add(1);
    SendError(rid, Status::ResourceExhausted(std::move(why)));
  }

  // On the worker strand.
  void Run(const rpc::Request& req, SteadyTime deadline) {
    HandlerResult result = Execute(req, deadline);
    asio::post(strand_, [self = shared_from_this(), result = std::move(result)]() mutable {
      self->Finish(std::move(result));
    });
  }

  // The request's answer: the handler's, unless its deadline passed or the node is draining. On
  // the worker strand, or inline on the session's strand (OnReadyFrame).
  HandlerResult Execute(const rpc::Request& req, SteadyTime deadline) {
    HandlerResult result;
    if (std::chrono::steady_clock::now() > deadline) {
      result.response.set_id(req.id());
      SetError(result.response.mutable_error(),
               Status::TimedOut("the request's deadline passed before it could run"));
    } else if (server_.draining.load()) {
      result.response.set_id(req.id());
      SetError(result.response.mutable_error(), Status::PeerUnreachable("node is shutting down"));
    } else {
      result = server_.handler->Handle(*state_, req);
      result.response.set_id(req.id());
    }
    return result;
  }

  void Finish(HandlerResult result) {
    --inflight_;
    server_.inflight.fetch_sub(1);
    server_.cv.notify_all();
    if (phase_ == Phase::kClosed) return;
    server_.requests_total.fetch_add(1);
    if (result.response.has_error() && result.response.error().code() != 0) {
      server_.requests_failed.fetch_add(1);
    }
    rpc::Frame f;
    *f.mutable_response() = std::move(result.response);
    if (!local_) result.fds.clear();
    SendFrame(f, std::move(result.fds));
    UpdateTimer();
  }

  void SendError(std::uint64_t rid, const Status& status) {
    server_.requests_total.fetch_add(1);
    server_.requests_failed.fetch_add(1);
    rpc::Frame f;
    rpc::Response* r = f.mutable_response();
    r->set_id(rid);
    SetError(r->mutable_error(), status);
    SendFrame(f);
  }

  // ---- events
  void PollEvents() {
    if (phase_ == Phase::kClosed || !subscribe_id_) return;
    if (!event_queued_) {
      KvEventBatch batch = server_.handler->PollEvents(next_event_seq_, 4096);
      if (!batch.events.empty() || batch.lost) {
        next_event_seq_ = batch.next_seq;
        rpc::Frame f;
        rpc::Response* r = f.mutable_response();
        r->set_id(*subscribe_id_);
        ToProto(batch, r->mutable_events());
        Outgoing o;
        Result<std::string> bytes = EncodeFrame(f, opts().max_frame_size);
        if (bytes.ok()) {
          o.bytes = std::move(*bytes);
          o.events = true;
          event_queued_ = true;
          Enqueue(std::move(o));
        }
      }
    }
    event_timer_.expires_after(opts().event_poll_interval);
    event_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->PollEvents();
    });
  }

  // ---- writing
  void SendFrame(const rpc::Frame& f, std::vector<int> fds = {}) {
    Result<std::string> bytes =
        EncodeFrame(f, std::max<std::uint32_t>(opts().max_frame_size, kHandshakeMaxFrameBytes));
    if (!bytes.ok()) {
      // A response too large for a frame: say so instead.
      KVMESH_LOG_WARN("response not sent peer {} error {}", peer_, bytes.status().ToString());
      if (f.kind_case() == rpc::Frame::kResponse) SendError(f.response().id(), bytes.status());
      return;
    }
    Enqueue(Outgoing{std::move(*bytes), std::move(fds), false});
  }

  void Enqueue(Outgoing o) {
    if (phase_ == Phase::kClosed) return;
    out_.push_back(std::move(o));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (out_.empty() || phase_ == Phase::kClosed) {
      writing_ = false;
      if (close_after_write_) Close("handshake refused or bad frame");
      return;
    }
    writing_ = true;
    Outgoing& o = out_.front();
    std::size_t sent = 0;
    if (!o.fds.empty()) {
      const Result<std::size_t> n = SendWithDescriptors(o);
      if (!n.ok()) {
        Close(n.status().ToString());
        return;
      }
      if (*n == 0) {  // the socket buffer is full: wait until writable, then try again
        socket_.async_wait(Proto::socket::wait_write,
                           asio::bind_executor(strand_, [self = shared_from_this()](error_code ec) {
                             if (ec) {
                               self->Close(ec.message());
                             } else {
                               self->WriteNext();
                             }
                           }));
        return;
      }
      sent = *n;
      o.fds.clear();
    }
    // As with reading: what the socket takes now is written here, and only the rest waits for
    // asio (whose completion would wake another io thread).
    const int fd = socket_.native_handle();
    while (sent < o.bytes.size()) {
      const ssize_t n =
          ::send(fd, o.bytes.data() + sent, o.bytes.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else if (n < 0 && errno != EINTR) {
        Close(StrCat("send: ", std::strerror(errno)));
        return;
      }
    }
    if (sent == o.bytes.size()) {
      OnWritten(error_code{});
      return;
    }
    asio::async_write(
        socket_, asio::buffer(o.bytes.data() + sent, o.bytes.size() - sent),
        asio::bind_executor(strand_, [self = shared_from_this()](error_code ec, std::size_t) {
          self->OnWritten(ec);
        }));
  }

  // sendmsg with SCM_RIGHTS on the first bytes; returns the bytes sent (0: would block).
  Result<std::size_t> SendWithDescriptors(const Outgoing& o) {
    std::vector<char> control(CMSG_SPACE(sizeof(int) * o.fds.size()), 0);
    iovec iov{const_cast<char*>(o.bytes.data()), o.bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * o.fds.size());
    std::memcpy(CMSG_DATA(cm), o.fds.data(), sizeof(int) * o.fds.size());
    const ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return std::size_t{0};
      return Status::IoError(StrCat("sendmsg: ", std::strerror(errno)));
    }
    return static_cast<std::size_t>(n);
  }

  void OnWritten(error_code ec) {
    if (phase_ == Phase::kClosed)
      return;  // out_ is kept (the write's buffer) until the session goes
    if (ec) {
      Close(ec.message());
      return;
    }
    if (out_.front().events) event_queued_ = false;
    out_.pop_front();
    WriteNext();
  }

  // ---- timers and closing
  // The one deadline that applies now: the handshake's, a started frame's, or idleness.
  std::optional<SteadyTime> Deadline() const {
    if (phase_ == Phase::kHandshake) return started_ + opts().handshake_timeout;
    if (reading_payload_) return payload_started_ + opts().handshake_timeout;
    if (inflight_ > 0 || subscribe_id_) return std::nullopt;
    return last_activity_ + opts().idle_timeout;
  }

  // Lazy: the timer is re-armed only when the deadline now is earlier than the one it waits for
  // (or none waits). A later deadline — the common case, each frame pushing idleness further — or
  // none at all leaves it as it is: it fires early, finds the deadline not passed, and waits again.
  // Re-arming per frame would cancel the pending wait each time, and asio completes a cancelled
  // wait through the scheduler: a wake-up of another io thread per frame for nothing.
  void UpdateTimer() {
    if (phase_ == Phase::kClosed) return;
    const std::optional<SteadyTime> d = Deadline();
    if (!d || (timer_armed_ && timer_expiry_ <= *d)) return;
    timer_armed_ = true;
    timer_expiry_ = *d;
    timer_.expires_at(*d);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;  // re-armed (a newer wait is pending) or closed
      self->timer_armed_ = false;
      const std::optional<SteadyTime> now_deadline = self->Deadline();
      if (now_deadline && std::chrono::steady_clock::now() >= *now_deadline) {
        if (self->phase_ == Phase::kHandshake) self->server_.auth_failures.fetch_add(1);
        self->Close(self->phase_ == Phase::kHandshake ? "handshake timeout"
                    : self->reading_payload_          ? "frame not completed in time"
                                                      : "idle timeout");
      } else {
        self->UpdateTimer();
      }
    });
  }

  void Close(std::string_view reason) {
    if (phase_ == Phase::kClosed) return;
    const bool had_session = state_ != nullptr;
    phase_ = Phase::kClosed;
    KVMESH_LOG_DEBUG("connection closed id {} peer {} reason {}", id_, peer_, reason);
    error_code ec;
    socket_.shutdown(Proto::socket::shutdown_both, ec);
    socket_.close(ec);
    timer_.cancel();
    event_timer_.cancel();
    server_.connections.fetch_sub(1);
    server_.Unregister(id_);
    if (had_session) {
      // After every request of this session already posted (the worker strand is serial).
      asio::post(work_strand_, [self = shared_from_this()] {
        self->server_.handler->CloseSession(*self->state_);
        self->state_.reset();
      });
    }
  }

  ControlServer::Impl& server_;
  Proto::socket socket_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::strand<asio::thread_pool::executor_type> work_strand_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;  // a wait on timer_ is pending, for timer_expiry_
  SteadyTime timer_expiry_;
  asio::steady_timer event_timer_;
  const std::uint64_t id_;
  const bool local_;
  const std::string peer_;
  const SteadyTime started_;
  SteadyTime last_activity_ = std::chrono::steady_clock::now();
  SteadyTime payload_started_;
  Phase phase_ = Phase::kHandshake;
  FrameHeaderBytes header_{};
  std::string payload_;
  bool reading_payload_ = false;
  int frames_at_once_ = 0;  // frames read and handled in a row without asio (ReadHeader)
  std::deque<Outgoing> out_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool answered_inline_ = false;  // the last request ran inline: poll for the next (busy_poll)
  // When the last inline answer was written (none: the last request did not run inline), and
  // whether the request being handled came within busy_poll of it: polling's "back to back" test.
  std::optional<std::chrono::steady_clock::time_point> answered_at_;
  bool back_to_back_ = false;
  int inflight_ = 0;
  std::string server_nonce_;
  std::shared_ptr<SessionState> state_;
  std::optional<std::uint64_t> subscribe_id_;
  std::uint64_t next_event_seq_ = 1;
  bool event_queued_ = false;
};

}  // namespace control_internal

namespace asio = boost::asio;
using control_internal::error_code;
using control_internal::Proto;
using control_internal::Session;

void ControlServer::Impl::Accept(asio::basic_socket_acceptor<Proto>& acceptor, bool local) {
  // Only this handler, which re-arms the acceptor, runs on the strand; the accepted socket keeps
  // the acceptor's executor (io), so its session's I/O runs on any io thread.
  acceptor.async_accept(asio::bind_executor(
      accept_strand, [this, &acceptor, local](error_code ec, Proto::socket socket) {
        if (ec) {
          if (ec != asio::error::operation_aborted && !stopped.load()) {
            KVMESH_LOG_WARN("accept failed error {}", ec.message());
            Accept(acceptor, local);
          }
          return;
        }
        if (draining.load() || connections.load() >= options.max_connections) {
          Refuse(std::move(socket));
        } else {
          std::string peer = "unix";
          if (!local) {
            error_code pec;
            const Proto::endpoint ep = socket.remote_endpoint(pec);
            asio::ip::tcp::endpoint tcp_ep;
            if (!pec) {
              std::memcpy(tcp_ep.data(), ep.data(),
                          std::min<std::size_t>(ep.size(), sizeof(sockaddr_in6)));
              peer = StrCat(tcp_ep.address().to_string(), ":", tcp_ep.port());
            }
          }
          connections.fetch_add(1);
          auto s = std::make_shared<Session>(*this, std::move(socket), local, std::move(peer));
          Register(s);
          s->Start();
        }
        Accept(acceptor, local);
      }));
}

void ControlServer::Impl::Register(const std::shared_ptr<Session>& s) {
  MutexLock lock(&mu);
  sessions[s->id()] = s;
}

void ControlServer::Impl::Unregister(std::uint64_t id) {
  MutexLock lock(&mu);
  sessions.erase(id);
  cv.notify_all();
}

void ControlServer::Impl::CloseAll() {
  std::vector<std::shared_ptr<Session>> open;
  {
    MutexLock lock(&mu);
    for (auto& [id, weak] : sessions) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) s->PostClose("node stopping");
}

}  // namespace kvmesh
