// transfer_bench: the block transfer engine against ucx_perftest on the same transport and message
// size, on loopback — TCP (lo) and shared memory (posix + cma).
//
// Engine: two TransferEngines in this process, each with a pool of --pool-mib MiB (default 1 GiB)
// registered once; one grant + one send moves the whole pool as blocks of the given size, source
// block i to a shuffled destination block (distinct memory, every block once: no hot buffer). The
// time runs from the Grant call to both operations' completion; the first pass of each size is
// verified byte for byte.
// Baseline: ucx_perftest (Debian ucx-utils) as a server and a client subprocess on 127.0.0.1, the
// same UCX_TLS, UCX_NET_DEVICES and TCP segment sizes, ucp_am_bw and tag_bw with the same message
// size and about the same bytes; the faster of the two is the baseline (it moves one buffer over
// and over, so it is cache-hot where the engine is not).
//
// Each round runs am_bw, tag_bw and the engine back to back; a ratio is the median over rounds of
// the per-round ratio (robust to the load of a shared machine); throughputs printed are the best.
// RATIO lines: blocks >= 1 MiB goal >= 0.85, 64 KiB blocks goal >= 0.60. Beside them, INFO lines:
// perftest -e (peer error handling, as the engine's endpoints), a bare UCX loop moving the same
// blocks (the engine's cost over UCX itself), and for shared memory a cold CMA copy of the same
// blocks on one thread (the bound of one receiving progress thread on memory not in cache, which
// the hot-buffer perftest is not), and engines of one lane when the engines have more
// (TransferEngineOptions::lanes, --lanes N; the default is the engine's).
//
// Then the TCP segment sizes (UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE): each candidate pair with
// perftest and the engine (INFO lines), which is how the engine's defaults were chosen.
//
//   transfer_bench [--pool-mib N] [--rounds R] [--sweep-rounds R] [--transports tcp,shm]
//                  [--no-sweep] [--engine-only] [--block-kib 64|1024|4096] [--tcp-seg-kib N]
//                  [--lanes N]
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/perftest.h"
#include "common/aligned_buffer.h"
#include "common/check.h"
#include "common/log.h"
#include "transfer/transfer_engine.h"
#include "transfer/ucx_endpoint.h"
#include "transfer/ucx_memory.h"
#include "transfer/ucx_worker.h"

namespace kvmesh {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr std::uint64_t kKiB = 1024, kMiB = 1024 * 1024;

struct Args {
  std::uint64_t pool_mib = 1024;
  int rounds = 5;
  int sweep_rounds = 2;
  std::vector<std::string> transports = {"tcp", "shm"};
  bool sweep = true;
  bool perftest = true;          // --engine-only: no baseline (for profiling the engine alone)
  std::uint64_t only_block = 0;  // --block-kib N: only this block size in the main table
  std::uint64_t tcp_seg = 0;     // --tcp-seg-kib N: TX and RX segments of the main table's tcp
  std::uint32_t lanes = TransferEngineOptions{}.lanes;  // --lanes N: the engines' lanes
};

Args Parse(int argc, char** argv) {
  Args a;
  constexpr const char* kUsage =
      "usage: transfer_bench [--pool-mib N] [--rounds R] [--sweep-rounds R] [--transports "
      "tcp,shm]\n"
      "                      [--no-sweep] [--engine-only] [--block-kib 64|1024|4096]\n"
      "                      [--tcp-seg-kib N] [--lanes N]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (k == "--pool-mib") {
      a.pool_mib = std::strtoull(v, nullptr, 10), ++i;
    } else if (k == "--rounds") {
      a.rounds = std::atoi(v), ++i;
    } else if (k == "--sweep-rounds") {
      a.sweep_rounds = std::atoi(v), ++i;
    } else if (k == "--no-sweep") {
      a.sweep = false;
    } else if (k == "--block-kib") {
      a.only_block = std::strtoull(v, nullptr, 10) * kKiB, ++i;
    } else if (k == "--tcp-seg-kib") {
      a.tcp_seg = std::strtoull(v, nullptr, 10) * kKiB, ++i;
    } else if (k == "--engine-only") {
      a.perftest = false, a.sweep = false;
    } else if (k == "--lanes") {
      a.lanes = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10)), ++i;
    } else if (k == "--transports") {
      a.transports.clear();
      std::stringstream list(v);
      for (std::string t; std::getline(list, t, ',');) a.transports.push_back(t);
      ++i;
    } else {  // not run on a flag it does not know (it once ran the whole benchmark on --help)
      std::fprintf(stderr, "transfer_bench: unknown flag '%s'\n%s", k.c_str(), kUsage);
      std::exit(2);
    }
  }
  KVMESH_CHECK(a.pool_mib >= 64 && a.rounds > 0 && a.sweep_rounds > 0);
  return a;
}

struct TransportConfig {
  std::string name;  // tcp, shm
  std::string tls;
  std::string devices;
  std::uint64_t tx_seg = 0, rx_seg = 0;  // 0: UCX's default
  std::uint32_t lanes = TransferEngineOptions{}.lanes;
};

TransportConfig Tcp(std::uint64_t tx, std::uint64_t rx) { return {"tcp", "tcp", "lo", tx, rx}; }
TransportConfig Shm() { return {"shm", "posix,cma", "", 0, 0}; }

std::string SizeName(std::uint64_t bytes) {
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "MiB";
  return std::to_string(bytes / kKiB) + "KiB";
}

// ---- ucx_perftest ---------------------------------------------------------------------------

// `peer_errors`: perftest -e (endpoints with peer error handling, as the engine's), with the
// shared-memory settings the engine uses for it.
std::vector<std::string> PerftestEnv(const TransportConfig& t, bool peer_errors) {
  std::vector<std::string> env = {"UCX_TLS=" + t.tls, "UCX_WARN_UNUSED_ENV_VARS=n"};
  if (!t.devices.empty()) env.push_back("UCX_NET_DEVICES=" + t.devices);
  if (t.tx_seg != 0) env.push_back("UCX_TCP_TX_SEG_SIZE=" + std::to_string(t.tx_seg));
  if (t.rx_seg != 0) env.push_back("UCX_TCP_RX_SEG_SIZE=" + std::to_string(t.rx_seg));
  if (peer_errors) {
    env.push_back("UCX_MM_ERROR_HANDLING=y");
    env.push_back("UCX_CMA_MEMORY_INVALIDATE=y");
  }
  return env;
}

// Bytes per second of one ucx_perftest client/server pair (bench/perftest.h), or nothing when it
// failed.
std::optional<double> Perftest(const TransportConfig& t, const std::string& test,
                               std::uint64_t size, std::uint64_t bytes, bool peer_errors = false) {
  bench::PerftestOptions o;
  o.env = PerftestEnv(t, peer_errors);
  o.test = test;
  o.message_bytes = size;
  o.iterations = bench::PerftestIterations(size, bytes);
  o.peer_errors = peer_errors;
  Result<double> bw = bench::RunPerftest(o);
  if (!bw.ok()) {
    std::fprintf(stderr, "ucx_perftest %s of %s on %s failed (is ucx-utils installed?): %s\n",
                 test.c_str(), SizeName(size).c_str(), t.name.c_str(),
                 bw.status().ToString().c_str());
    return std::nullopt;
  }
  return *bw;
}

// ---- the engine -----------------------------------------------------------------------------

struct Engines {
  std::unique_ptr<TransferEngine> sender, receiver;
  RegionId source, destination;
};

constexpr PeerId kSender{1}, kReceiver{2};

Engines MakeEngines(const TransportConfig& t, AlignedBuffer& source, AlignedBuffer& destination) {
  TransferEngineOptions options;
  options.ucx.tls = t.tls;
  options.ucx.net_devices = t.devices;
  options.ucx.tcp_tx_seg_size = t.tx_seg;
  options.ucx.tcp_rx_seg_size = t.rx_seg;
  options.lanes = t.lanes;
  Engines e;
  auto sender = TransferEngine::Create(options);
  auto receiver = TransferEngine::Create(options);
  KVMESH_CHECK(sender.ok() && receiver.ok()) << sender.status() << " " << receiver.status();
  e.sender = std::move(*sender);
  e.receiver = std::move(*receiver);
  KVMESH_CHECK(e.sender->Connect(kReceiver, e.receiver->address()).ok());
  KVMESH_CHECK(e.receiver->Connect(kSender, e.sender->address()).ok());
  Result<RegionId> s = e.sender->RegisterRegion(source.data(), source.size());
  Result<RegionId> d = e.receiver->RegisterRegion(destination.data(), destination.size());
  KVMESH_CHECK(s.ok() && d.ok());
  e.source = *s;
  e.destination = *d;
  return e;
}

// Moves the whole pool once as `block`-byte blocks; returns bytes per second.
double EnginePass(Engines& e, std::uint64_t pool, std::uint64_t block, bool verify,
                  AlignedBuffer& source, AlignedBuffer& destination) {
  const std::uint64_t count = pool / block;
  std::vector<std::uint64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(block));
  std::vector<Slice> sources, destinations;
  sources.reserve(count);
  destinations.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    sources.push_back({e.source, i * block, block});
    destinations.push_back({e.destination, order[i] * block, block});
  }
  if (verify) std::memset(destination.data(), 0, destination.size());
  const TimePoint deadline = SystemClock::Default()->Now() + std::chrono::minutes(5);
  const auto start = SteadyClock::now();
  Result<TransferOp> grant = e.receiver->Grant({kSender, destinations, deadline, nullptr});
  KVMESH_CHECK(grant.ok()) << grant.status();
  Result<TransferOp> send = e.sender->Send({kReceiver, grant->id(), 0, sources, deadline, nullptr});
  KVMESH_CHECK(send.ok()) << send.status();
  const Status sent = send->Wait();
  const Status granted = grant->Wait();
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  KVMESH_CHECK(sent.ok() && granted.ok()) << sent << " " << granted;
  if (verify) {
    for (std::uint64_t i = 0; i < count; ++i) {
      KVMESH_CHECK(
          std::memcmp(source.data() + i * block, destination.data() + order[i] * block, block) == 0)
          << "block " << i << " of " << SizeName(block) << " differs";
    }
  }
  return static_cast<double>(count * block) / seconds;
}

// One thread copying the same blocks to the same shuffled places with process_vm_readv (what UCX's
// CMA rendezvous does, here from this process to itself): the copy bound of one progress thread on
// memory that is not in cache. Printed beside the shared-memory figures (INFO lines).
double ColdCmaPass(std::uint64_t pool, std::uint64_t block, AlignedBuffer& source,
                   AlignedBuffer& destination) {
  const std::uint64_t count = pool / block;
  std::vector<std::uint64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(block));
  const auto start = SteadyClock::now();
  for (std::uint64_t i = 0; i < count; ++i) {
    iovec local{destination.data() + order[i] * block, block};
    iovec remote{source.data() + i * block, block};
    KVMESH_CHECK(process_vm_readv(getpid(), &local, 1, &remote, 1, 0) ==
                 static_cast<ssize_t>(block));
  }
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return static_cast<double>(count * block) / seconds;
}

// ---- a bare UCX loop ------------------------------------------------------------------------

// The same blocks moved by a bare UCX loop: the same wrappers (peer error handling), rendezvous
// active messages of the same blocks to the same shuffled places, a window of 64, the receiver's
// worker progressed by a thread of its own — and nothing of the engine (no grants, no checks, no
// done message, no command queue). Printed beside the engine (INFO lines): what UCX itself does
// with distinct memory, so the distance to the hot-buffer perftest can be told apart from the
// engine's own cost.
class RawUcxLoop {
 public:
  RawUcxLoop(const TransportConfig& t, AlignedBuffer& source, AlignedBuffer& destination)
      : source_(source), destination_(destination) {
    UcxContextOptions options;
    options.tls = t.tls;
    options.net_devices = t.devices;
    options.tcp_tx_seg_size = t.tx_seg;
    options.tcp_rx_seg_size = t.rx_seg;
    for (Side* side : {&sender_, &receiver_}) {
      auto context = UcxContext::Create(options);
      KVMESH_CHECK(context.ok()) << context.status();
      side->context = std::move(*context);
      auto worker = UcxWorker::Create(*side->context);
      KVMESH_CHECK(worker.ok());
      side->worker = std::move(*worker);
    }
    auto s = UcxMemoryRegion::Map(*sender_.context, source.data(), source.size());
    auto d = UcxMemoryRegion::Map(*receiver_.context, destination.data(), destination.size());
    KVMESH_CHECK(s.ok() && d.ok());
    sender_.memory = std::move(*s);
    receiver_.memory = std::move(*d);
    auto to_receiver = UcxEndpoint::Create(*sender_.worker, receiver_.worker->address(), nullptr);
    auto to_sender = UcxEndpoint::Create(*receiver_.worker, sender_.worker->address(), nullptr);
    KVMESH_CHECK(to_receiver.ok() && to_sender.ok());
    sender_.ep = std::move(*to_receiver);
    receiver_.ep = std::move(*to_sender);
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = 1;
    handler.cb = &RawUcxLoop::OnData;
    handler.arg = this;
    KVMESH_CHECK(ucp_worker_set_am_recv_handler(receiver_.worker->get(), &handler) == UCS_OK);
  }
  ~RawUcxLoop() {
    // Endpoints before workers before contexts, each on this thread (the receiver thread is gone).
    sender_.ep.reset();
    receiver_.ep.reset();
  }
  RawUcxLoop(const RawUcxLoop&) = delete;
  RawUcxLoop& operator=(const RawUcxLoop&) = delete;

  // Moves the whole pool once; bytes per second.
  double Pass(std::uint64_t pool, std::uint64_t block) {
    const std::uint64_t count = pool / block;
    order_.resize(count);
    std::iota(order_.begin(), order_.end(), 0);
    std::shuffle(order_.begin(), order_.end(), std::mt19937_64(block));
    block_ = block;
    received_.store(0);
    std::vector<std::uint64_t> headers(count);
    std::iota(headers.begin(), headers.end(), 0);
    std::atomic<bool> stop{false};
    std::thread receiver([&] {
      while (!stop.load(std::memory_order_relaxed)) receiver_.worker->Progress();
    });
    const auto start = SteadyClock::now();
    std::uint64_t next = 0;
    while (next < count || in_flight_ > 0) {
      while (in_flight_ < 64 && next < count) {
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                             UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMH;
        param.cb.send = &RawUcxLoop::OnSent;
        param.user_data = this;
        param.flags = UCP_AM_SEND_FLAG_RNDV | UCP_AM_SEND_FLAG_REPLY;
        param.memh = sender_.memory->memh();
        void* request = ucp_am_send_nbx(sender_.ep->get(), 1, &headers[next], 8,
                                        source_.data() + next * block, block, &param);
        KVMESH_CHECK(!UCS_PTR_IS_ERR(request));
        if (request != nullptr) ++in_flight_;
        ++next;
      }
      sender_.worker->Progress();
    }
    while (received_.load() < count) std::this_thread::yield();
    const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
    stop.store(true);
    receiver.join();
    return static_cast<double>(count * block) / seconds;
  }

 private:
  struct Side {
    std::unique_ptr<UcxContext> context;
    std::unique_ptr<UcxWorker> worker;
    std::unique_ptr<UcxMemoryRegion> memory;
    std::unique_ptr<UcxEndpoint> ep;
  };

  static ucs_status_t OnData(void* arg, const void* header, std::size_t, void* data,
                             std::size_t length, const ucp_am_recv_param_t*) {
    auto* self = static_cast<RawUcxLoop*>(arg);
    std::uint64_t index = 0;
    std::memcpy(&index, header, sizeof(index));
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.recv_am = &RawUcxLoop::OnReceived;
    param.user_data = self;
    param.memh = self->receiver_.memory->memh();
    void* request = ucp_am_recv_data_nbx(
        self->receiver_.worker->get(), data,
        self->destination_.data() + self->order_[index] * self->block_, length, &param);
    if (request == nullptr) self->received_.fetch_add(1);
    return UCS_INPROGRESS;
  }
  static void OnReceived(void* request, ucs_status_t status, std::size_t, void* arg) {
    KVMESH_CHECK(status == UCS_OK) << ucs_status_string(status);
    ucp_request_free(request);
    static_cast<RawUcxLoop*>(arg)->received_.fetch_add(1);
  }
  static void OnSent(void* request, ucs_status_t status, void* arg) {
    KVMESH_CHECK(status == UCS_OK) << ucs_status_string(status);
    ucp_request_free(request);
    --static_cast<RawUcxLoop*>(arg)->in_flight_;
  }

  AlignedBuffer& source_;
  AlignedBuffer& destination_;
  Side sender_, receiver_;
  std::vector<std::uint64_t> order_;
  std::uint64_t block_ = 0;
  std::atomic<std::uint64_t> received_{0};
  int in_flight_ = 0;  // the sender's thread only
};

// ---- reporting ------------------------------------------------------------------------------

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double Best(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}
double Gbs(double bytes_per_second) { return bytes_per_second / 1e9; }

struct Row {
  std::vector<double> am, tag, engine, ratio, cma, cma_ratio, raw, raw_ratio;
  std::vector<double> peer, peer_ratio;  // perftest -e: the faster of am_bw and tag_bw
  std::vector<double> one_lane,
      one_lane_ratio;  // engines of one lane (when the main ones have more)
};

// Rounds of am_bw, tag_bw and the engine at one block size; the per-round ratio uses the faster
// of the two perftest tests of that round. With `peer_errors`, also both with perftest -e.
Row Measure(const TransportConfig& t, Engines& e, std::uint64_t pool, std::uint64_t block,
            const Args& args, AlignedBuffer& source, AlignedBuffer& destination,
            bool peer_errors = false, RawUcxLoop* raw = nullptr, Engines* one_lane = nullptr) {
  Row row;
  for (int r = 0; r < args.rounds; ++r) {
    std::optional<double> am, tag, am_peer, tag_peer;
    if (args.perftest) {
      am = Perftest(t, "ucp_am_bw", block, pool);
      tag = Perftest(t, "tag_bw", block, pool);
      if (peer_errors) {
        am_peer = Perftest(t, "ucp_am_bw", block, pool, true);
        tag_peer = Perftest(t, "tag_bw", block, pool, true);
      }
    }
    const double engine = EnginePass(e, pool, block, /*verify=*/r == 0, source, destination);
    if (one_lane != nullptr) {
      row.one_lane.push_back(EnginePass(*one_lane, pool, block, false, source, destination));
      row.one_lane_ratio.push_back(engine / row.one_lane.back());
    }
    if (raw != nullptr) {
      row.raw.push_back(raw->Pass(pool, block));
      row.raw_ratio.push_back(engine / row.raw.back());
    }
    if (t.name == "shm") {
      row.cma.push_back(ColdCmaPass(pool, block, source, destination));
      row.cma_ratio.push_back(engine / row.cma.back());
    }
    if (am) row.am.push_back(*am);
    if (tag) row.tag.push_back(*tag);
    row.engine.push_back(engine);
    const double baseline = std::max(am.value_or(0), tag.value_or(0));
    if (baseline > 0) row.ratio.push_back(engine / baseline);
    const double peer = std::max(am_peer.value_or(0), tag_peer.value_or(0));
    if (peer > 0) {
      row.peer.push_back(peer);
      row.peer_ratio.push_back(engine / peer);
    }
  }
  return row;
}

void RunTransport(const TransportConfig& t, const Args& args, AlignedBuffer& source,
                  AlignedBuffer& destination) {
  const std::uint64_t pool = args.pool_mib * kMiB;
  Engines e = MakeEngines(t, source, destination);
  std::optional<Engines> one_lane;
  if (t.lanes > 1) {
    TransportConfig single = t;
    single.lanes = 1;
    one_lane = MakeEngines(single, source, destination);
  }
  RawUcxLoop raw(t, source, destination);
  std::printf(
      "\n%s (UCX_TLS=%s%s%s, tcp segments tx %s rx %s), engines of %u lane%s, pool %s, %d "
      "rounds\n",
      t.name.c_str(), t.tls.c_str(),
      t.devices.empty() ? "" : " UCX_NET_DEVICES=", t.devices.c_str(),
      t.tx_seg ? SizeName(t.tx_seg).c_str() : "default",
      t.rx_seg ? SizeName(t.rx_seg).c_str() : "default", t.lanes, t.lanes == 1 ? "" : "s",
      SizeName(pool).c_str(), args.rounds);
  std::printf("%-8s %8s %12s %12s %12s %10s %10s\n", "block", "blocks", "am_bw GB/s", "tag_bw GB/s",
              "engine GB/s", "ratio med", "ratio min");
  struct Goal {
    std::uint64_t block;
    double goal;
  };
  for (const Goal g : {Goal{64 * kKiB, 0.60}, Goal{1 * kMiB, 0.85}, Goal{4 * kMiB, 0.85}}) {
    if (args.only_block != 0 && g.block != args.only_block) continue;
    const Row row = Measure(t, e, pool, g.block, args, source, destination, /*peer_errors=*/true,
                            &raw, one_lane ? &*one_lane : nullptr);
    const double min_ratio =
        row.ratio.empty() ? 0 : *std::min_element(row.ratio.begin(), row.ratio.end());
    std::printf("%-8s %8llu %12.2f %12.2f %12.2f %10.3f %10.3f\n", SizeName(g.block).c_str(),
                static_cast<unsigned long long>(pool / g.block), Gbs(Best(row.am)),
                Gbs(Best(row.tag)), Gbs(Best(row.engine)), Median(row.ratio), min_ratio);
    const char* baseline = Best(row.am) >= Best(row.tag) ? "ucp_am_bw" : "tag_bw";
    if (args.perftest) {  // --engine-only has no baseline: no ratio to judge
      std::printf("RATIO transfer_%s_%s %.3f ucx_perftest_%s_%s goal>=%.2f\n", t.name.c_str(),
                  SizeName(g.block).c_str(), Median(row.ratio), baseline, SizeName(g.block).c_str(),
                  g.goal);
    }
    if (!row.peer.empty()) {
      std::printf(
          "INFO transfer_%s_%s engine/perftest_with_peer_error_handling %.3f (perftest -e "
          "%.2f GB/s)\n",
          t.name.c_str(), SizeName(g.block).c_str(), Median(row.peer_ratio), Gbs(Best(row.peer)));
    }
    if (!row.raw.empty()) {
      std::printf("INFO transfer_%s_%s engine/bare_ucx_loop %.3f (bare UCX loop %.2f GB/s)\n",
                  t.name.c_str(), SizeName(g.block).c_str(), Median(row.raw_ratio),
                  Gbs(Best(row.raw)));
    }
    if (!row.one_lane.empty()) {
      std::printf("INFO transfer_%s_%s engine/one_lane_engines %.3f (%u lanes vs 1: %.2f GB/s)\n",
                  t.name.c_str(), SizeName(g.block).c_str(), Median(row.one_lane_ratio), t.lanes,
                  Gbs(Best(row.one_lane)));
    }
    if (!row.cma.empty()) {
      std::printf("INFO transfer_%s_%s engine/cold_cma_copy %.3f (cold cma %.2f GB/s)\n",
                  t.name.c_str(), SizeName(g.block).c_str(), Median(row.cma_ratio),
                  Gbs(Best(row.cma)));
    }
    std::fflush(stdout);
  }
}

// The TCP segment-size candidates: perftest and the engine at each (half the pool per run, the
// best of --sweep-rounds rounds).
void SweepSegments(const Args& args, AlignedBuffer& source, AlignedBuffer& destination) {
  Args sweep = args;
  sweep.pool_mib = args.pool_mib / 2;
  sweep.rounds = args.sweep_rounds;
  const std::uint64_t pool = sweep.pool_mib * kMiB;
  std::printf(
      "\ntcp segment sizes (UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE), %s per run, best of "
      "%d\n",
      SizeName(pool).c_str(), sweep.rounds);
  std::printf("%-10s %-8s %12s %12s %12s %10s\n", "tx/rx", "block", "am_bw GB/s", "tag_bw GB/s",
              "engine GB/s", "ratio med");
  const std::pair<std::uint64_t, std::uint64_t> candidates[] = {
      {8 * kKiB, 64 * kKiB}, {64 * kKiB, 64 * kKiB}, {256 * kKiB, 256 * kKiB}, {kMiB, kMiB}};
  for (const auto& [tx, rx] : candidates) {
    const TransportConfig t = Tcp(tx, rx);
    Engines e = MakeEngines(t, source, destination);
    for (const std::uint64_t block : {64 * kKiB, kMiB, 4 * kMiB}) {
      const Row row = Measure(t, e, pool, block, sweep, source, destination);
      const std::string seg = SizeName(tx) + "/" + SizeName(rx);
      std::printf("%-10s %-8s %12.2f %12.2f %12.2f %10.3f\n", seg.c_str(), SizeName(block).c_str(),
                  Gbs(Best(row.am)), Gbs(Best(row.tag)), Gbs(Best(row.engine)), Median(row.ratio));
      std::printf("INFO tcp_segments %s block %s am_bw %.2f tag_bw %.2f engine %.2f GB/s\n",
                  seg.c_str(), SizeName(block).c_str(), Gbs(Best(row.am)), Gbs(Best(row.tag)),
                  Gbs(Best(row.engine)));
      std::fflush(stdout);
    }
  }
}

int Run(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  KVMESH_CHECK(SetLogLevel("error").ok());  // not the peer_failed warning of each teardown
  const std::uint64_t pool = args.pool_mib * kMiB;
  Result<AlignedBuffer> source = AlignedBuffer::Allocate(pool);
  Result<AlignedBuffer> destination = AlignedBuffer::Allocate(pool);
  KVMESH_CHECK(source.ok() && destination.ok());
  // Every byte written once (resident, distinct content per block), outside any timed region.
  std::mt19937_64 random(42);
  for (std::uint64_t i = 0; i < pool; i += 8) {
    const std::uint64_t word = random();
    std::memcpy(source->data() + i, &word, 8);
  }
  std::memset(destination->data(), 0, pool);

  const TransferEngineOptions defaults;
  for (const std::string& name : args.transports) {
    // --tcp-seg-kib sets both segments of the main table's tcp (it was read and then ignored).
    const std::uint64_t tx = args.tcp_seg != 0 ? args.tcp_seg : defaults.ucx.tcp_tx_seg_size;
    const std::uint64_t rx = args.tcp_seg != 0 ? args.tcp_seg : defaults.ucx.tcp_rx_seg_size;
    TransportConfig t = name == "shm" ? Shm() : Tcp(tx, rx);
    t.lanes = args.lanes;
    RunTransport(t, args, *source, *destination);
  }
  if (args.sweep) SweepSegments(args, *source, *destination);
  return 0;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) { return kvmesh::Run(argc, argv); }
