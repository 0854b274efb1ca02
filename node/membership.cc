#include "node/membership.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.h"
#include "common/strings.h"
#include "node/etcd_client.h"

namespace kvmesh {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kBackoffFirst{100};
constexpr std::chrono::milliseconds kBackoffMax{5000};

class NoMembership final : public Membership {
 public:
  void UpdateSelf(PeerInfo) override {}
  bool WaitForFirstView(std::chrono::milliseconds) override { return true; }
  void Stop() override {}
};

class StaticMembership final : public Membership {
 public:
  StaticMembership(const ClusterSection& config, PeerTable* table) {
    std::vector<PeerInfo> members;
    for (const StaticPeer& p : config.peers) {
      PeerInfo info;
      info.node_id = p.node_id;
      info.control_address = p.address;
      members.push_back(std::move(info));
    }
    table->ReplaceAll(std::move(members));
  }
  void UpdateSelf(PeerInfo) override {}
  bool WaitForFirstView(std::chrono::milliseconds) override { return true; }
  void Stop() override {}
};

class EtcdMembership final : public Membership {
 public:
  EtcdMembership(const EtcdSection& config, PeerInfo self, PeerTable* table)
      : config_(config),
        // A call must end well within a keepalive period.
        client_(config.endpoints, std::chrono::milliseconds(std::max<std::int64_t>(
                                      200, std::int64_t{config.lease_ttl_s} * 1000 / 6))),
        key_(config.prefix + self.node_id),
        table_(table),
        self_(std::move(self)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~EtcdMembership() override { Stop(); }

  void UpdateSelf(PeerInfo self) override {
    std::lock_guard lock(mu_);
    self_ = std::move(self);
    self_dirty_ = true;
    wake_.notify_all();
  }

  bool WaitForFirstView(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    return wake_.wait_for(lock, timeout, [this] { return has_view_ || stopping_; }) && has_view_;
  }

  void Stop() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      wake_.notify_all();
    }
    thread_.join();
    if (lease_ != 0) {
      // Leaving: the key goes with the lease, so the others drop this node at their next list.
      if (Status st = client_.RevokeLease(lease_); !st.ok()) {
        KVMESH_LOG_WARN("etcd lease revoke failed lease {} error {}", lease_, st.ToString());
      } else {
        KVMESH_LOG_INFO("etcd membership left key {} lease {}", key_, lease_);
      }
    }
  }

 private:
  // Grants a lease and puts our key, when we have none or our PeerInfo changed.
  Status Join() {
    PeerInfo self;
    {
      std::lock_guard lock(mu_);
      self = self_;
      self_dirty_ = false;
    }
    if (lease_ == 0) {
      KVMESH_ASSIGN_OR_RETURN(lease_, client_.GrantLease(config_.lease_ttl_s));
      last_keepalive_ = Clock::now();
      ++health_.joins;
    }
    self.incarnation = static_cast<std::uint64_t>(lease_);
    Status st = client_.Put(key_, EncodePeerInfo(self), lease_);
    if (!st.ok()) {
      std::lock_guard lock(mu_);
      self_dirty_ = true;
      return st;
    }
    if (!joined_) KVMESH_LOG_INFO("etcd membership joined key {} lease {}", key_, lease_);
    joined_ = true;
    return Status::Ok();
  }

  Status KeepAlive() {
    if (Clock::now() - last_keepalive_ < std::chrono::seconds(config_.lease_ttl_s) / 3) {
      return Status::Ok();
    }
    Result<std::int64_t> ttl = client_.KeepAlive(lease_);
    if (ttl.ok()) {
      last_keepalive_ = Clock::now();
      return Status::Ok();
    }
    if (ttl.status().IsNotFound()) {
      KVMESH_LOG_WARN("etcd lease lapsed lease {}: joining again", lease_);
      lease_ = 0;
      joined_ = false;
    }
    return ttl.status();
  }

  Status Refresh() {
    KVMESH_ASSIGN_OR_RETURN(const std::vector<EtcdKeyValue> kvs,
                            client_.ListPrefix(config_.prefix));
    std::vector<PeerInfo> members;
    for (const EtcdKeyValue& kv : kvs) {
      Result<PeerInfo> info = DecodePeerInfo(kv.value);
      if (!info.ok()) {
        KVMESH_LOG_WARN("etcd member key ignored key {} error {}", kv.key,
                        info.status().ToString());
        continue;
      }
      members.push_back(std::move(info).value());
    }
    table_->ReplaceAll(std::move(members));
    health_.last_view = Clock::now();
    std::lock_guard lock(mu_);
    has_view_ = true;
    wake_.notify_all();
    return Status::Ok();
  }

  Status Step() {
    bool dirty = false;
    {
      std::lock_guard lock(mu_);
      dirty = self_dirty_;
    }
    if (lease_ == 0 || dirty) KVMESH_RETURN_IF_ERROR(Join());
    KVMESH_RETURN_IF_ERROR(KeepAlive());
    if (lease_ == 0) return Join();
    return Refresh();
  }

  void Run() {
    std::chrono::milliseconds backoff{0};
    bool failing = false;
    for (;;) {
      const Status st = Step();
      health_.ok = st.ok();
      health_.error = st.ok() ? std::string() : st.ToString();
      health_.lease = lease_;
      if (!st.ok()) ++health_.failures;
      table_->SetHealth(health_);
      if (st.ok()) {
        if (failing) KVMESH_LOG_INFO("etcd membership reachable again");
        failing = false;
        backoff = std::chrono::milliseconds(0);
      } else {
        if (!failing) {
          KVMESH_LOG_WARN("etcd membership failing (keeping the last view) error {}",
                          st.ToString());
        }
        failing = true;
        backoff = backoff.count() == 0 ? kBackoffFirst : std::min(backoff * 2, kBackoffMax);
      }
      const auto wait = failing ? backoff : config_.poll_interval;
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, wait, [this] { return stopping_ || self_dirty_; });
      if (stopping_) return;
    }
  }

  const EtcdSection config_;
  const EtcdClient client_;
  const std::string key_;
  PeerTable* const table_;
  // Touched only by the membership thread (and by Stop after it joined).
  std::int64_t lease_ = 0;
  bool joined_ = false;
  Clock::time_point last_keepalive_;
  MembershipHealth health_{.kind = "etcd"};  // a copy goes to the table after every step
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable wake_;
  PeerInfo self_;           // guarded by mu_
  bool self_dirty_ = true;  // guarded by mu_
  bool has_view_ = false;   // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
};

}  // namespace

std::string EncodePeerInfo(const PeerInfo& info) {
  const std::string_view ucx(reinterpret_cast<const char*>(info.ucx_address.data()),
                             info.ucx_address.size());
  return Json{{"node_id", info.node_id},
              {"control_address", info.control_address},
              {"ucx_address", Base64Encode(ucx)},
              {"role", static_cast<int>(info.role)},
              {"namespace", info.namespace_digest_hex},
              {"incarnation", std::to_string(info.incarnation)}}
      .dump();
}

Result<PeerInfo> DecodePeerInfo(std::string_view json) {
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("member is not a JSON object");
  PeerInfo info;
  const auto text = [&j](const char* name) -> std::string {
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  info.node_id = text("node_id");
  info.control_address = text("control_address");
  if (info.node_id.empty() || info.control_address.empty()) {
    return Status::Corruption("member lacks node_id or control_address");
  }
  KVMESH_ASSIGN_OR_RETURN(const std::string ucx, Base64Decode(text("ucx_address")));
  info.ucx_address.resize(ucx.size());
  std::transform(ucx.begin(), ucx.end(), info.ucx_address.begin(),
                 [](char c) { return static_cast<std::byte>(c); });
  const int role = j.value("role", 0);
  if (role < 0 || role > static_cast<int>(NodeRole::kCache)) {
    return Status::Corruption(StrCat("member role ", role, " is unknown"));
  }
  info.role = static_cast<NodeRole>(role);
  info.namespace_digest_hex = text("namespace");
  const std::string inc = text("incarnation");
  info.incarnation = inc.empty() ? 0 : std::strtoull(inc.c_str(), nullptr, 10);
  return info;
}

Result<std::unique_ptr<Membership>> Membership::Start(const ClusterSection& config, PeerInfo self,
                                                      PeerTable* table) {
  KVMESH_CHECK(self.node_id == table->self_id());
  // Logged here, on the caller's thread, before any membership thread logs: the first log call
  // creates spdlog's registry, and two threads doing it at once is a race (TSan, with two nodes
  // starting in one process).
  KVMESH_LOG_DEBUG("membership start kind {} self {}", MembershipKindName(config.membership),
                   self.node_id);
  MembershipHealth health;
  health.kind = std::string(MembershipKindName(config.membership));
  if (config.membership == MembershipKind::kStatic) health.last_view = Clock::now();
  table->SetHealth(std::move(health));
  switch (config.membership) {
    case MembershipKind::kNone: return std::unique_ptr<Membership>(new NoMembership());
    case MembershipKind::kStatic:
      return std::unique_ptr<Membership>(new StaticMembership(config, table));
    case MembershipKind::kEtcd:
      return std::unique_ptr<Membership>(new EtcdMembership(config.etcd, std::move(self), table));
  }
  return Status::InvalidArgument("unknown membership kind");
}

}  // namespace kvmesh
