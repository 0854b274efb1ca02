#include "node/control_load.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "common/strings.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;

constexpr std::int64_t kAdmitTokens = 256;

struct ClientResult {
  std::vector<ControlLoadOp> ops;
  std::map<std::string, std::int64_t> errors_by_code;
  std::string first_error;
  bool lost = false;             // the node closed the connection
  Steady::time_point stopped{};  // when the client sent its last request
};

}  // namespace

std::vector<Token> LoadPrompt(std::int64_t n, std::uint64_t seed) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& tok : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    tok = static_cast<Token>(x % 100000u);
  }
  return t;
}

double LatencyQuantile(std::vector<double> us, double q) {
  if (us.empty()) return 0;
  std::sort(us.begin(), us.end());
  const auto i =
      static_cast<std::size_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(us.size() - 1));
  return us[i];
}

Result<ControlLoadResult> RunControlLoad(const ControlLoadOptions& o) {
  if (o.clients < 1) return Status::InvalidArgument("clients must be at least 1");
  if (o.prompt_tokens < 2) return Status::InvalidArgument("prompt_tokens must be at least 2");
  if (o.rate_per_client < 0) return Status::InvalidArgument("rate_per_client must not be negative");
  ControlLoadResult result;
  const std::vector<Token> hit = LoadPrompt(o.prompt_tokens, 1);
  const std::vector<Token> miss = LoadPrompt(o.prompt_tokens, 2);
  {
    NodeClientOptions co = o.client;
    co.client_name = "control-load-warmup";
    KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> warm, NodeClient::Connect(co));
    SequenceOptions lowest;  // the first to go once the run is over
    lowest.retention.push_back({0, o.prompt_tokens, kMinPriority, std::nullopt});
    KVMESH_RETURN_IF_ERROR(warm->Admit(1, hit, lowest).status().WithContext("warm-up admit"));
    KVMESH_RETURN_IF_ERROR(warm->StoreFullBlocks(1).status());
    KVMESH_RETURN_IF_ERROR(warm->Release(1));
    KVMESH_ASSIGN_OR_RETURN(const rpc::LookupResponse l, warm->Lookup(hit));
    result.cached_tokens = l.pool_tokens() + l.host_tokens() + l.disk_tokens();
  }
  std::vector<std::unique_ptr<NodeClient>> clients;
  for (int i = 0; i < o.clients; ++i) {
    NodeClientOptions co = o.client;
    co.client_name = StrCat("control-load-", i);
    KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, NodeClient::Connect(co));
    clients.push_back(std::move(c));
  }
  std::vector<std::string> names = {"lookup_hit", "lookup_miss", "status"};
  if (o.admit_release) names.emplace_back("admit_release");
  std::vector<ClientResult> per(clients.size());
  std::atomic<std::int64_t> done{0};
  std::atomic<int> running{static_cast<int>(clients.size())};
  const Steady::time_point start = Steady::now();
  const Steady::time_point end = start + o.duration;
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] {
      NodeClient& c = *clients[i];
      ClientResult& r = per[i];
      for (const std::string& n : names) r.ops.push_back({n, {}, 0});
      const std::vector<Token> own = LoadPrompt(kAdmitTokens, 1000 + i);
      std::uint64_t request_id = 1;
      const auto interval = std::chrono::duration_cast<Steady::duration>(
          std::chrono::duration<double>(o.rate_per_client > 0 ? 1.0 / o.rate_per_client : 0));
      // Paced clients start spread over one interval, so their requests do not come in bursts.
      Steady::time_point next = start + interval * static_cast<std::int64_t>(i) /
                                            static_cast<std::int64_t>(clients.size());
      for (std::size_t k = i; Steady::now() < end; ++k) {
        if (o.rate_per_client > 0) {
          std::this_thread::sleep_until(next);
          next += interval;
          if (Steady::now() >= end) break;
        }
        const std::size_t op = k % names.size();
        const Steady::time_point t0 = Steady::now();
        Status st;
        switch (op) {
          case 0: st = c.Lookup(hit).status(); break;
          case 1: st = c.Lookup(miss).status(); break;
          case 2: st = c.GetStatus().status(); break;
          default: {
            st = c.Admit(request_id, own).status();
            if (st.ok()) st = c.Release(request_id);
            ++request_id;
            break;
          }
        }
        const double us = std::chrono::duration<double, std::micro>(Steady::now() - t0).count();
        done.fetch_add(1, std::memory_order_relaxed);
        if (st.ok()) {
          r.ops[op].latencies_us.push_back(us);
          continue;
        }
        ++r.ops[op].errors;
        ++r.errors_by_code[std::string(StatusCodeName(st.code()))];
        if (r.first_error.empty()) r.first_error = StrCat(names[op], ": ", st.ToString());
        if (!c.connected()) {  // the node closed this connection
          r.lost = true;
          break;
        }
      }
      r.stopped = Steady::now();
      running.fetch_sub(1, std::memory_order_release);
    });
  }
  if (o.progress) {
    while (Steady::now() < end && running.load(std::memory_order_acquire) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      o.progress(std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - start),
                 done.load());
    }
  }
  for (auto& t : threads) t.join();
  Steady::time_point last = start;
  for (const ClientResult& r : per) {
    last = std::max(last, r.stopped);
    result.clients_lost += r.lost ? 1 : 0;
  }
  result.seconds = std::chrono::duration<double>(last - start).count();
  for (const std::string& n : names) result.ops.push_back({n, {}, 0});
  for (const ClientResult& r : per) {
    for (std::size_t k = 0; k < r.ops.size(); ++k) {
      ControlLoadOp& into = result.ops[k];
      into.latencies_us.insert(into.latencies_us.end(), r.ops[k].latencies_us.begin(),
                               r.ops[k].latencies_us.end());
      into.errors += r.ops[k].errors;
      result.requests += static_cast<std::int64_t>(r.ops[k].latencies_us.size()) + r.ops[k].errors;
      result.errors += r.ops[k].errors;
    }
    for (const auto& [code, n] : r.errors_by_code) result.errors_by_code[code] += n;
    if (result.first_error.empty()) result.first_error = r.first_error;
  }
  return result;
}

}  // namespace kvmesh
