// rocksdb_tier_bench: puts of many blocks into the RocksDB tier, then gets of them in random order,
// against RocksDB's own db_bench run in the same process tree just before, with the same value
// size (the bundle size), key size (16), key count and options: no compression, WAL off, the same
// write buffers, block cache, bloom filter (10 bits a key), file sizes, level sizing, background
// jobs, and the tier's blob-file settings (values in blob files, garbage collection off as in a
// tier whose files hold no garbage, level-0 trigger) — at three value sizes: 4 KiB, 256 KiB and
// 1 MiB blocks.
//
//   db_bench --benchmarks=fillseq,flush,waitforcompaction         (a fresh database)
//   db_bench --benchmarks=readrandom --use_existing_db=1          (N random reads)
//
// The tier's put is timed over the puts alone (as fillseq is; flush and compaction wait run untimed
// afterwards, as db_bench's own steps do), and includes the bundle encode with its checksum (the
// value goes to RocksDB as pieces pointing into the pool block) and the index record. Its get is
// GetForRestore into a scattered pool block — a restore destination, so verified in the same pass
// as the copy (one pass over RocksDB's pinned buffer, no staging copy) — plus the index lookup and
// recency update. Keys: db_bench's are sequential; the tier's bundles are keyed by put order too
// (data keys, store/rocksdb_tier.h), its meta records by content id (random).
//
// ReadOptions are measured, not assumed: the tier's get with RocksDB's block checksums on
// (db_bench's --verify_checksum=1) and off (the tier's default; db_bench --verify_checksum=0; the
// bundle's own checksum still verifies every byte), each against db_bench with the same setting,
// and without filling the block cache (INFO only: db_bench has no such flag); the tier's default
// against db_bench's default read (INFO: what a user gets against RocksDB as it comes); and
// batched gets of 16 consecutive blocks through MultiGet (INFO, against readrandom). Each row
// prints the time per stage — index bookkeeping, the RocksDB read, verify+copy, and what a checksum
// alone and a streaming copy alone take over the same bytes.
//
//   rocksdb_tier_bench [--sizes 4k,256k,1m] [--scale F] [--rounds N] [--db_bench PATH]
//
// --scale multiplies the key counts (40,000 / 1,000 / 250: about 170, 265 and 265 MB).
// --rounds (default 3): each size is measured N times, each round a fresh database and tier with
// its own db_bench runs just before; every round's table is printed, and the RATIO and INFO lines
// give the median of the rounds' ratios (each ratio taken within its round), followed by every
// round's value. On a small shared machine one round of 40,000 4 KiB puts takes about 0.3 s and
// two rounds of the same binary differed by up to 1.8x: one round is not a measurement.
#define XXH_STATIC_LINKING_ONLY
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/check.h"
#include "common/log.h"
#include "common/strings.h"
#include "store/rocksdb_tier.h"
#include "store/stream_copy.h"

namespace kvmesh {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<std::string> sizes = {"4k", "256k", "1m"};
  double scale = 1.0;
  std::string db_bench = "/usr/bin/db_bench";
  int rounds = 3;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--scale") a.scale = std::atof(argv[i + 1]);
    if (k == "--db_bench") a.db_bench = argv[i + 1];
    if (k == "--rounds") a.rounds = std::atoi(argv[i + 1]);
    if (k == "--sizes") {
      a.sizes.clear();
      std::stringstream s(argv[i + 1]);
      for (std::string part; std::getline(s, part, ',');) a.sizes.push_back(part);
    }
  }
  KVMESH_CHECK(a.scale > 0);
  KVMESH_CHECK(a.rounds > 0) << "--rounds must be at least 1";
  return a;
}

// The options both sides use (the tier's, written out for db_bench).
struct Shared {
  std::int64_t write_buffer = 64ll << 20;
  int max_write_buffers = 2;
  std::int64_t cache = 8ll << 20;
  std::int64_t target_file = 64ll << 20;
  std::int64_t level_base = 256ll << 20;
  int background_jobs = 2;
};

struct DbBenchResult {
  double ops_per_s = 0;
  double mb_per_s = 0;
  bool found = false;
};

// Runs db_bench and returns the figures of the named benchmark from its report line, e.g.
// "fillseq      :     512.345 micros/op 1951 ops/sec 0.525 seconds 1024 operations;  504.1 MB/s".
DbBenchResult RunDbBench(const std::string& cmd, const std::string& name) {
  std::printf("$ %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  KVMESH_CHECK(p != nullptr);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = pclose(p);
  DbBenchResult r;
  const std::regex line("^" + name +
                        R"(\s*:\s*([0-9.]+) micros/op ([0-9.]+) ops/sec.*?([0-9.]+) MB/s)");
  std::istringstream lines(out);
  std::string l;
  while (std::getline(lines, l)) {
    std::smatch m;
    if (std::regex_search(l, m, line)) {
      r.ops_per_s = std::stod(m[2]);
      r.mb_per_s = std::stod(m[3]);
      r.found = true;
      std::printf("  %s\n", l.c_str());
    }
  }
  if (rc != 0 || !r.found) std::printf("db_bench failed (rc %d):\n%s\n", rc, out.c_str());
  return r;
}

template <typename F>
double Timed(F&& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A block geometry whose bundle is about the named size.
KvPoolGeometry GeometryFor(const std::string& size) {
  KvPoolGeometry g;
  g.kv_factor = 2;
  g.layout = KvLayout::kHND;
  if (size == "4k") {  // the tiered replay's block: 1 layer, 1 head, 512 tokens, head_dim 4
    g.dtype = KvDtype::kFP8PerTensor;
    g.num_layers = 1;
    g.num_kv_heads = 1;
    g.tokens_per_block = 512;
    g.head_dim = 4;
    return g;
  }
  g.dtype = KvDtype::kFP8;  // K/V plus per-token-head scales
  g.num_kv_heads = 8;
  g.tokens_per_block = 16;
  g.head_dim = 128;
  g.num_layers = size == "256k" ? 8 : 32;
  return g;
}

int KeysFor(const std::string& size, double scale) {
  const int base = size == "4k" ? 40000 : size == "256k" ? 1000 : 250;
  return std::max(16, static_cast<int>(base * scale));
}

struct Pool {
  explicit Pool(const KvPoolLayout& layout, std::int64_t blocks) {
    view.layout = layout;
    view.num_blocks = blocks;
    for (int c = 0; c < kNumKvComponents; ++c) {
      if (!layout.components[c].present()) continue;
      auto buf = AlignedBuffer::Allocate(layout.components[c].BytesPerBlock() * blocks);
      KVMESH_CHECK(buf.ok());
      auto* p = reinterpret_cast<std::uint8_t*>(buf->data());
      for (std::size_t i = 0; i < buf->size(); ++i) p[i] = static_cast<std::uint8_t>(i * 131 + c);
      view.base[c] = buf->data();
      memory.push_back(std::move(*buf));
    }
  }
  std::vector<AlignedBuffer> memory;
  KvPoolView view;
};

void PrintStages(const char* what, int ops, const TierStageTimes& st, double checksum_s,
                 double copy_s) {
  const double us = 1e6 / ops;
  std::printf(
      "  %-22s per op: index %.2f us, rocksdb %.2f us, verify+copy %.2f us, encode %.2f us "
      "(alone over the same bytes: XXH3-128 %.2f us, streaming copy %.2f us)\n",
      what, st.index_s * us, (st.read_s + st.write_s) * us, st.decode_s * us, st.encode_s * us,
      checksum_s * us, copy_s * us);
}

struct Size {
  std::string name;
  int keys = 0;
  std::int64_t value_size = 0;
};

// One round's ratios, by the name of its RATIO/INFO line (without the size suffix), in the order
// they were printed; `ratio` says whether the line is a RATIO (else INFO) and `rest` is the text
// after the figure (baseline and goal).
struct RoundLine {
  std::string name;
  bool ratio = false;
  double value = 0;
  std::string rest;
};

std::vector<RoundLine> RunSize(const Args& args, const std::string& size_name) {
  std::vector<RoundLine> lines;
  auto layout = MakeKvPoolLayout(GeometryFor(size_name));
  KVMESH_CHECK(layout.ok());
  auto codec = BundleCodec::Create(*layout, 1.0f);
  KVMESH_CHECK(codec.ok());
  Size size{size_name, KeysFor(size_name, args.scale), codec->bundle_bytes()};
  const Shared sh;
  char tmpl[] = "/tmp/kvmesh-rocksdb-bench-XXXXXX";
  KVMESH_CHECK(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  std::printf("\n== %s blocks: %d keys, value (bundle) %lld bytes\n", size.name.c_str(), size.keys,
              static_cast<long long>(size.value_size));
  const std::string common = StrCat(
      args.db_bench, " --db=", dir, "/db_bench --num=", size.keys,
      " --value_size=", size.value_size,
      " --key_size=16 --compression_type=none --disable_wal=1 --write_buffer_size=",
      sh.write_buffer, " --max_write_buffer_number=", sh.max_write_buffers,
      " --cache_size=", sh.cache, " --target_file_size_base=", sh.target_file,
      " --max_bytes_for_level_base=", sh.level_base,
      " --level_compaction_dynamic_level_bytes=true --max_background_jobs=", sh.background_jobs,
      // Blob GC off, as the tier runs while its files hold no garbage (rocksdb_tier.h).
      " --bloom_bits=10 --threads=1 --seed=1 --enable_blob_files=true --min_blob_size=0 "
      "--blob_compression_type=none --enable_blob_garbage_collection=false "
      "--blob_garbage_collection_force_threshold=0.5 --level0_file_num_compaction_trigger=2");
  const DbBenchResult fill = RunDbBench(
      common + " --benchmarks=fillseq,flush,waitforcompaction --use_existing_db=0", "fillseq");
  const std::string reads = StrCat(" --use_existing_db=1 --reads=", size.keys);
  const DbBenchResult read_verify =
      RunDbBench(common + reads + " --benchmarks=readrandom --verify_checksum=1", "readrandom");
  const DbBenchResult read_noverify =
      RunDbBench(common + reads + " --benchmarks=readrandom --verify_checksum=0", "readrandom");

  // The tier, with the same options, over a primary pool of 2N touched blocks.
  Pool pool(*layout, 2 * static_cast<std::int64_t>(size.keys));
  RocksDbTierOptions o;
  o.path = dir + "/tier";
  o.capacity_bytes = 1ll << 40;
  o.pools = {{TierPoolId{0}, *layout, 1.0f}};
  o.durability = DiskDurability::kNone;  // as db_bench --disable_wal=1: no timed flushes
  o.write_buffer_bytes = sh.write_buffer;
  o.max_write_buffer_number = sh.max_write_buffers;
  o.block_cache_bytes = sh.cache;
  o.max_background_jobs = sh.background_jobs;
  auto tier_or = RocksDbTier::Open(o);
  KVMESH_CHECK(tier_or.ok()) << tier_or.status().ToString();
  RocksDbTier& tier = **tier_or;
  std::vector<ContentId> ids(size.keys);
  for (int i = 0; i < size.keys; ++i) {
    Sha256 h;
    h.UpdateValue(i);
    ids[i] = h.FinishContentId();
  }
  std::mt19937 rng(11);
  std::vector<std::int64_t> perm(2 * static_cast<std::size_t>(size.keys));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const TierStageTimes s0 = tier.stats().stages;
  const double put_s = Timed([&] {
    for (int i = 0; i < size.keys; ++i) {
      KVMESH_CHECK(tier.Put(TierPoolId{0}, ids[i], pool.view, perm[i], 35).ok());
    }
  });
  const TierStageTimes put_stages = tier.stats().stages - s0;
  KVMESH_CHECK(tier.Flush().ok());
  KVMESH_CHECK(tier.WaitForCompactions().ok());
  // The tier's reads under each ReadOptions choice (the same random order each time).
  std::vector<int> order(size.keys);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  auto dst = [&](int i) { return perm[size.keys + i]; };
  struct Variant {
    const char* name;
    bool verify, fill;
    const DbBenchResult* baseline;
    const char* baseline_name;
    bool ratio;
  };
  const Variant variants[] = {
      {"get", true, true, &read_verify, "db_bench_readrandom", true},
      {"get_no_rocksdb_crc", false, true, &read_noverify, "db_bench_readrandom_noverify", true},
      {"get_no_fill_cache", true, false, &read_verify, "db_bench_readrandom", false},
  };
  std::printf("%-28s %12s %12s %10s\n", "", "ops/s", "MB/s", "ratio");
  std::printf("%-28s %12.0f %12.1f\n", "db_bench fillseq", fill.ops_per_s, fill.mb_per_s);
  const double put_ops = size.keys / put_s;
  const double mb = static_cast<double>(size.value_size) / 1048576.0;
  std::printf("%-28s %12.0f %12.1f %10.2f\n", "tier put", put_ops, put_ops * mb,
              fill.found ? put_ops / fill.ops_per_s : 0.0);
  // What a checksum alone and a copy alone take over the blocks' bytes (per operation).
  const std::int64_t block_bytes = layout->BytesPerBlock();
  const double checksum_s = Timed([&] {
    XXH128_hash_t h{};
    for (int i = 0; i < size.keys; ++i) {
      for (int c = 0; c < kNumKvComponents; ++c) {
        if (!layout->components[c].present()) continue;
        const auto comp = static_cast<KvComponent>(c);
        h.low64 ^=
            XXH3_128bits(pool.view.BlockBytes(comp, perm[i]), layout->components[c].BytesPerBlock())
                .low64;
      }
    }
    KVMESH_CHECK(h.low64 != 1);
  });
  const double copy_s = Timed([&] {
    for (int i = 0; i < size.keys; ++i) {
      for (int c = 0; c < kNumKvComponents; ++c) {
        if (!layout->components[c].present()) continue;
        const auto comp = static_cast<KvComponent>(c);
        CopyStreaming(pool.view.BlockBytes(comp, dst(i)), pool.view.BlockBytes(comp, perm[i]),
                      layout->components[c].BytesPerBlock());
      }
    }
  });
  PrintStages("put", size.keys, put_stages, checksum_s, copy_s);
  lines.push_back({StrCat("rocksdb_tier_put_", size.name), true,
                   fill.found ? put_ops / fill.ops_per_s : 0.0, "db_bench_fillseq goal>=0.80"});
  for (const Variant& v : variants) {
    tier.SetReadOptions(v.verify, v.fill);
    const TierStageTimes before = tier.stats().stages;
    const double get_s = Timed([&] {
      for (int k = 0; k < size.keys; ++k) {
        const int i = order[k];
        KVMESH_CHECK(tier.GetForRestore(TierPoolId{0}, ids[i], pool.view, dst(i)).ok());
      }
    });
    const TierStageTimes stages = tier.stats().stages - before;
    const double ops = size.keys / get_s;
    const double base = v.baseline->found ? v.baseline->ops_per_s : 0.0;
    std::printf("%-28s %12.0f %12.1f %10.2f   (vs %s %.0f ops/s)\n",
                StrCat("tier ", v.name).c_str(), ops, ops * mb, base > 0 ? ops / base : 0.0,
                v.baseline_name, base);
    PrintStages(v.name, size.keys, stages, checksum_s, copy_s);
    lines.push_back({StrCat("rocksdb_tier_", v.name, "_", size.name), v.ratio,
                     base > 0 ? ops / base : 0.0, StrCat(v.baseline_name, " goal>=0.80")});
    if (!v.verify && v.fill && read_verify.found) {  // the tier's default read options
      lines.push_back({StrCat("rocksdb_tier_get_default_", size.name), false,
                       ops / read_verify.ops_per_s,
                       "db_bench_readrandom (the tier's default, RocksDB's checksums off, against "
                       "db_bench's default, on)"});
    }
  }
  // Batched: a prefix's consecutive blocks in one MultiGet (as a restore reads them).
  tier.SetReadOptions(true, true);
  constexpr int kBatch = 16;
  std::vector<Status> statuses(kBatch);
  std::vector<std::int64_t> blocks(kBatch);
  const TierStageTimes before = tier.stats().stages;
  const double batch_s = Timed([&] {
    for (int k = 0; k + kBatch <= size.keys; k += kBatch) {
      const int first = order[k] / kBatch * kBatch;  // a random run of 16 consecutive ids
      const int n = std::min(kBatch, size.keys - first);
      for (int j = 0; j < n; ++j) blocks[j] = dst(first + j);
      tier.GetManyForRestore(TierPoolId{0}, std::span(ids).subspan(first, n), pool.view,
                             std::span(blocks).first(n), std::span(statuses).first(n));
      for (int j = 0; j < n; ++j) KVMESH_CHECK(statuses[j].ok()) << statuses[j].ToString();
    }
  });
  const int batched_ops = size.keys / kBatch * kBatch;
  const double batch_ops = batched_ops / batch_s;
  std::printf("%-28s %12.0f %12.1f %10.2f   (vs db_bench_readrandom)\n", "tier get, MultiGet of 16",
              batch_ops, batch_ops * mb,
              read_verify.found ? batch_ops / read_verify.ops_per_s : 0.0);
  PrintStages("get, MultiGet of 16", batched_ops, tier.stats().stages - before, checksum_s, copy_s);
  lines.push_back({StrCat("rocksdb_tier_get_multiget16_", size.name), false,
                   read_verify.found ? batch_ops / read_verify.ops_per_s : 0.0,
                   "db_bench_readrandom"});
  for (int i = 0; i < size.keys; i += std::max(1, size.keys / 16)) {
    for (int c = 0; c < kNumKvComponents; ++c) {
      if (!layout->components[c].present()) continue;
      const auto comp = static_cast<KvComponent>(c);
      KVMESH_CHECK(std::memcmp(pool.view.BlockBytes(comp, perm[i]),
                               pool.view.BlockBytes(comp, dst(i)),
                               layout->components[c].BytesPerBlock()) == 0);
    }
  }
  KVMESH_CHECK(tier.stats().corrupt == 0);
  tier_or->reset();
  std::filesystem::remove_all(dir);
  (void)block_bytes;
  return lines;
}

int Run(const Args& args) {
  if (access(args.db_bench.c_str(), X_OK) != 0) {
    std::printf(
        "rocksdb_tier_bench: %s not found (Debian package rocksdb-tools); no baseline, "
        "nothing measured\n",
        args.db_bench.c_str());
    return 0;
  }
  for (const std::string& s : args.sizes) {
    std::vector<std::vector<RoundLine>> rounds;
    for (int r = 0; r < args.rounds; ++r) {
      std::printf("\n-- round %d of %d", r + 1, args.rounds);
      rounds.push_back(RunSize(args, s));
    }
    std::printf("\n");
    for (std::size_t i = 0; i < rounds.front().size(); ++i) {
      std::vector<double> v;
      std::string each;
      for (const auto& round : rounds) {
        v.push_back(round[i].value);
        each += StrCat(each.empty() ? "" : ", ", FormatFixed(round[i].value, 2));
      }
      std::sort(v.begin(), v.end());
      const double median =
          v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      const RoundLine& l = rounds.front()[i];
      std::printf("%s %s %.2f %s (median of %zu rounds: %s)\n", l.ratio ? "RATIO" : "INFO",
                  l.name.c_str(), median, l.rest.c_str(), v.size(), each.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  try {
    kvmesh::SetLogLevel("warn").IgnoreError();
    return kvmesh::Run(kvmesh::Parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rocksdb_tier_bench: %s\n", e.what());
    return 1;
  }
}
