// host_tier_bench: offload of scattered primary-pool blocks into the host tier (bundle encode with
// its XXH3-128 checksum into slots, one pass) and onboard back into scattered pool blocks (one
// pass: copy while checksumming, the destination being a restore's hidden block), against a
// memcpy of the same number of bytes, measured in the same run on buffers touched the same way.
//
// Two block sizes, FP8 cache, 8 KV heads, head_dim 128, 16 tokens per block, every component
// (K/V plus per-token-head scales): 8 layers (256 KiB of K/V + 8 KiB of scales) and 32 layers
// (Llama-3-8B: 1 MiB + 32 KiB). For each:
//   - one thread: HostTier::Put / GetForRestore in a loop vs one memcpy — RATIO goal >= 0.80;
//   - the offload engine's copy workers (--threads T): offload as the block manager drives it
//     (OnEvictDeferrable with a move-out ticket per victim, the workers copy, then Drain) and
//     onboard (OffloadEngine::Onboard of all blocks: the caller and the workers) vs a memcpy split
//     over T threads — RATIO goal >= 0.90.
// Each repeat runs memcpy, offload and onboard back to back; a ratio is the median over repeats of
// the per-repeat ratio (robust to the load of a shared machine); throughputs are the best.
// The time per stage (the tier's own counters: index bookkeeping, encode / verify+copy) is printed
// beside what a checksum alone (XXH3-128) and a streaming copy alone take over the same bytes, so
// that what is left of a gap is explained by a measurement.
//
//   host_tier_bench [--blocks-mib M] [--repeats R] [--threads T]
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/check.h"
#include "common/log.h"
#include "common/thread_pool.h"
#include "store/host_tier.h"
#include "store/offload_engine.h"
#include "store/stream_copy.h"

namespace kvmesh {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int total_mib = 256;  // bytes moved per repeat, per block size
  int repeats = 7;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--blocks-mib") a.total_mib = v;
    if (k == "--repeats") a.repeats = v;
    if (k == "--threads") a.threads = v;
  }
  KVMESH_CHECK(a.total_mib > 0 && a.repeats > 0 && a.threads > 0);
  return a;
}

AlignedBuffer Touched(std::size_t bytes, std::uint8_t seed) {
  auto buf = AlignedBuffer::Allocate(bytes);
  KVMESH_CHECK(buf.ok());
  // Written once, every byte: resident, no page faults inside a timed region.
  auto* p = reinterpret_cast<std::uint8_t*>(buf->data());
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::uint8_t>(i * 131 + seed);
  return std::move(*buf);
}

void ParallelMemcpy(ThreadPool* pool, std::byte* dst, const std::byte* src, std::size_t bytes,
                    int parts) {
  if (pool == nullptr || parts <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const std::size_t chunk = (bytes + parts - 1) / parts;
  pool->ParallelFor(parts, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::size_t off = i * chunk;
      if (off < bytes) std::memcpy(dst + off, src + off, std::min(chunk, bytes - off));
    }
  });
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double Timed(F&& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Result {
  double memcpy_s = 1e30, offload_s = 1e30, onboard_s = 1e30;
  double offload_ratio = 0, onboard_ratio = 0;
};

// A pool of 2n blocks of `layout` (every component) and the scattered source/destination blocks.
struct Fixture {
  Fixture(const KvPoolLayout& l, int n) : layout(l), blocks(n) {
    const std::int64_t pool_blocks = 2 * static_cast<std::int64_t>(n);
    data = Touched(layout.data().BytesPerBlock() * pool_blocks, 1);
    scales = Touched(layout.scale().BytesPerBlock() * pool_blocks, 2);
    pool.layout = layout;
    pool.num_blocks = pool_blocks;
    pool.base[0] = data.data();
    pool.base[1] = scales.data();
    std::mt19937 rng(7);
    std::vector<std::int64_t> perm(pool_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    from.assign(perm.begin(), perm.begin() + n);
    to.assign(perm.begin() + n, perm.end());
    for (int i = 0; i < n; ++i) {
      Sha256 h;
      h.UpdateValue(i);
      ids.push_back(h.FinishContentId());
    }
    bytes = static_cast<std::size_t>(layout.BytesPerBlock()) * n;
    msrc = Touched(bytes, 3);
    mdst = Touched(bytes, 4);
  }
  void CheckRoundTrip() const {
    for (int i = 0; i < blocks; i += std::max(1, blocks / 16)) {
      for (int c = 0; c < 2; ++c) {
        const auto comp = static_cast<KvComponent>(c);
        KVMESH_CHECK(std::memcmp(pool.BlockBytes(comp, from[i]), pool.BlockBytes(comp, to[i]),
                                 layout.component(comp).BytesPerBlock()) == 0);
      }
    }
  }
  KvPoolLayout layout;
  int blocks;
  AlignedBuffer data, scales, msrc, mdst;
  KvPoolView pool;
  std::vector<std::int64_t> from, to;
  std::vector<ContentId> ids;
  std::size_t bytes = 0;
};

void PrintStages(const char* what, const TierStageTimes& st, double checksum_s, double copy_s,
                 double total_s) {
  std::printf(
      "  stages %-9s index %.4f s, encode %.4f s, verify+copy %.4f s (%.0f%% of the %.4f s); "
      "alone over the same bytes: XXH3-128 %.4f s, streaming copy %.4f s\n",
      what, st.index_s, st.encode_s, st.decode_s,
      total_s > 0 ? 100 * (st.index_s + st.encode_s + st.decode_s) / total_s : 0.0, total_s,
      checksum_s, copy_s);
}

// One thread: the tier's calls in a loop.
Result RunOneThread(Fixture& f, const Args& args) {
  auto codec = BundleCodec::Create(f.layout, 1.0f);
  KVMESH_CHECK(codec.ok());
  HostTierOptions o;
  o.capacity_bytes = f.blocks * ((codec->bundle_bytes() + 63) / 64 * 64);
  o.pools = {{TierPoolId{0}, f.layout, 1.0f, 0}};
  o.memory = HostMemoryKind::kAuto;
  auto tier_or = HostTier::Create(o);
  KVMESH_CHECK(tier_or.ok()) << tier_or.status().ToString();
  HostTier& tier = **tier_or;
  auto erase_all = [&] {
    for (const auto& id : f.ids) tier.Erase(TierPoolId{0}, id).IgnoreError();
  };
  auto offload = [&] {
    for (int i = 0; i < f.blocks; ++i) {
      KVMESH_CHECK(tier.Put(TierPoolId{0}, f.ids[i], f.pool, f.from[i], 35).ok());
    }
  };
  auto onboard = [&] {
    for (int i = 0; i < f.blocks; ++i) {
      KVMESH_CHECK(tier.GetForRestore(TierPoolId{0}, f.ids[i], f.pool, f.to[i]).ok());
    }
  };
  offload();  // warm-up: every slot written once
  erase_all();
  Result r;
  std::vector<double> off_ratios, on_ratios;
  TierStageTimes off_stages, on_stages;
  for (int rep = 0; rep < args.repeats; ++rep) {
    erase_all();
    const double m = Timed([&] { std::memcpy(f.mdst.data(), f.msrc.data(), f.bytes); });
    const TierStageTimes before = tier.stats().stages;
    const double off = Timed(offload);
    const TierStageTimes mid = tier.stats().stages;
    const double on = Timed(onboard);
    const TierStageTimes after = tier.stats().stages;
    if (off < r.offload_s) off_stages = mid - before;
    if (on < r.onboard_s) on_stages = after - mid;
    r.memcpy_s = std::min(r.memcpy_s, m);
    r.offload_s = std::min(r.offload_s, off);
    r.onboard_s = std::min(r.onboard_s, on);
    off_ratios.push_back(m / off);
    on_ratios.push_back(m / on);
  }
  r.offload_ratio = Median(off_ratios);
  r.onboard_ratio = Median(on_ratios);
  f.CheckRoundTrip();
  KVMESH_CHECK(tier.stats().corrupt == 0);
  // The stages' parts alone, over the same bytes (the tier's slots, the pool's blocks).
  double checksum_s = 1e30, copy_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    checksum_s = std::min(checksum_s, Timed([&] {
                            XXH128_hash_t h{};
                            for (int i = 0; i < f.blocks; ++i) {
                              const auto* b = f.pool.BlockBytes(KvComponent::kData, f.from[i]);
                              h.low64 ^= XXH3_128bits(b, f.layout.data().BytesPerBlock()).low64;
                            }
                            KVMESH_CHECK(h.low64 != 1);
                          }));
    copy_s = std::min(copy_s, Timed([&] {
                        for (int i = 0; i < f.blocks; ++i) {
                          CopyStreaming(f.pool.BlockBytes(KvComponent::kData, f.to[i]),
                                        f.pool.BlockBytes(KvComponent::kData, f.from[i]),
                                        f.layout.data().BytesPerBlock());
                        }
                      }));
  }
  PrintStages("offload", off_stages, checksum_s, copy_s, r.offload_s);
  PrintStages("onboard", on_stages, checksum_s, copy_s, r.onboard_s);
  return r;
}

// The offload engine's copy workers: offload as the block manager drives it, onboard in one call.
Result RunEngine(Fixture& f, const Args& args) {
  auto codec = BundleCodec::Create(f.layout, 1.0f);
  KVMESH_CHECK(codec.ok());
  OffloadEngineOptions o;
  o.pools = {f.pool};
  o.host_capacity_bytes = f.blocks * ((codec->bundle_bytes() + 63) / 64 * 64);
  o.copy_threads = args.threads;
  o.host_memory = HostMemoryKind::kAuto;
  auto engine_or = OffloadEngine::Create(o);
  KVMESH_CHECK(engine_or.ok()) << engine_or.status().ToString();
  OffloadEngine& engine = **engine_or;
  MoveOutQueue moves;
  auto erase_all = [&] {
    for (const auto& id : f.ids) engine.host()->Erase(TierPoolId{0}, id).IgnoreError();
  };
  auto offload = [&] {
    for (int i = 0; i < f.blocks; ++i) {
      EvictedBlock e;
      e.pool = PoolId{0};
      e.block = BlockId{static_cast<std::int32_t>(f.from[i])};
      e.content_id = f.ids[i];
      e.priority = kTierDefaultPriority;
      MoveOutTicket ticket = moves.Issue(PoolId{0}, e.block);
      engine.OnEvictDeferrable(e, ticket);
      KVMESH_CHECK(!ticket.valid());  // taken
    }
    engine.Drain();
    std::vector<MovedOutBlock> done;
    moves.TakeCompleted(&done);
    KVMESH_CHECK(static_cast<int>(done.size()) == f.blocks);
  };
  std::vector<BlockId> to_blocks;
  for (std::int64_t b : f.to) to_blocks.push_back(BlockId{static_cast<std::int32_t>(b)});
  auto onboard = [&] {
    const OnboardResult r = engine.Onboard(f.ids, to_blocks);
    KVMESH_CHECK(r.restored == f.blocks) << r.stop_reason.ToString();
  };
  ThreadPool memcpy_workers(args.threads - 1);
  offload();
  erase_all();
  Result r;
  std::vector<double> off_ratios, on_ratios;
  for (int rep = 0; rep < args.repeats; ++rep) {
    erase_all();
    const double m = Timed([&] {
      ParallelMemcpy(&memcpy_workers, f.mdst.data(), f.msrc.data(), f.bytes, args.threads);
    });
    const double off = Timed(offload);
    const double on = Timed(onboard);
    r.memcpy_s = std::min(r.memcpy_s, m);
    r.offload_s = std::min(r.offload_s, off);
    r.onboard_s = std::min(r.onboard_s, on);
    off_ratios.push_back(m / off);
    on_ratios.push_back(m / on);
  }
  r.offload_ratio = Median(off_ratios);
  r.onboard_ratio = Median(on_ratios);
  f.CheckRoundTrip();
  return r;
}

int Run(const Args& args) {
  std::printf(
      "host_tier_bench: %d MiB per block size and repeat; best of %d interleaved repeats; "
      "ratios: median of the per-repeat ratios; %d copy threads for the engine rows\n",
      args.total_mib, args.repeats, args.threads);
  std::printf("%-8s %-20s %12s %12s %12s %10s %10s\n", "block", "who", "memcpy GB/s",
              "offload GB/s", "onboard GB/s", "off/memcpy", "on/memcpy");
  struct Size {
    const char* name;
    int layers;
  };
  for (const Size& size : {Size{"256KiB", 8}, Size{"1MiB", 32}}) {
    KvPoolGeometry g;
    g.dtype = KvDtype::kFP8;
    g.layout = KvLayout::kHND;
    g.num_layers = size.layers;
    g.kv_factor = 2;
    g.num_kv_heads = 8;
    g.tokens_per_block = 16;
    g.head_dim = 128;
    auto layout = MakeKvPoolLayout(g);
    KVMESH_CHECK(layout.ok());
    const int n = static_cast<int>((static_cast<std::int64_t>(args.total_mib) << 20) /
                                   layout->BytesPerBlock());
    Fixture f(*layout, n);
    const double gb = static_cast<double>(f.bytes) / 1e9;
    const Result one = RunOneThread(f, args);
    std::printf("%-8s %-20s %12.2f %12.2f %12.2f %10.2f %10.2f\n", size.name, "tier, 1 thread",
                gb / one.memcpy_s, gb / one.offload_s, gb / one.onboard_s, one.offload_ratio,
                one.onboard_ratio);
    std::printf("RATIO host_tier_offload_%s %.2f memcpy goal>=0.80\n", size.name,
                one.offload_ratio);
    std::printf("RATIO host_tier_onboard_%s %.2f memcpy goal>=0.80\n", size.name,
                one.onboard_ratio);
    if (args.threads > 1) {
      const Result mt = RunEngine(f, args);
      std::printf("%-8s engine, %-2d threads   %12.2f %12.2f %12.2f %10.2f %10.2f\n", size.name,
                  args.threads, gb / mt.memcpy_s, gb / mt.offload_s, gb / mt.onboard_s,
                  mt.offload_ratio, mt.onboard_ratio);
      std::printf("RATIO host_tier_engine_offload_%s_%dthreads %.2f memcpy_%dthreads goal>=0.90\n",
                  size.name, args.threads, mt.offload_ratio, args.threads);
      std::printf("RATIO host_tier_engine_onboard_%s_%dthreads %.2f memcpy_%dthreads goal>=0.90\n",
                  size.name, args.threads, mt.onboard_ratio, args.threads);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  kvmesh::SetLogLevel("warn").IgnoreError();
  return kvmesh::Run(kvmesh::Parse(argc, argv));
}
