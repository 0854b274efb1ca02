// rocksdb_tier_bench: puts of many blocks into the RocksDB tier, then gets of them in random order,
// against RocksDB's own db_bench run in the same process tree just before, with the same value size
// (the bundle size), key size (16), and options: no compression, WAL off, the same write buffers,
// block cache, bloom filter (10 bits a key), file sizes, level sizing and background jobs.
//
//   db_bench --benchmarks=fillseq,flush,waitforcompaction   (a fresh database)
//   db_bench --benchmarks=readrandom --use_existing_db=1    (N random reads)
//
// The tier's put is timed over the puts alone (as fillseq is; flush and compaction wait run untimed
// afterwards, as db_bench's own steps do), and includes the bundle encode with its checksum (the
// value goes to RocksDB as pieces pointing into the pool block) and the index record. Its get
// includes verification and the copy into a scattered pool block. Keys: db_bench's are sequential;
// the tier's are content ids (random), which is what the tier stores.
//
//   rocksdb_tier_bench [--blocks N] [--blob_files 0|1] [--db_bench PATH]
//
// --blob_files 1 runs both sides with integrated blob files (values outside the SSTs).
#include <unistd.h>

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

namespace kvmesh {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int blocks = 1024;
  bool blob_files = false;
  std::string db_bench = "/usr/bin/db_bench";
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--blocks") a.blocks = std::atoi(argv[i + 1]);
    if (k == "--db_bench") a.db_bench = argv[i + 1];
    if (k == "--blob_files") a.blob_files = std::atoi(argv[i + 1]) != 0;
  }
  KVMESH_CHECK(a.blocks > 0);
  return a;
}

// The options both sides use.
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

int Run(const Args& args) {
  if (access(args.db_bench.c_str(), X_OK) != 0) {
    std::printf(
        "rocksdb_tier_bench: %s not found (Debian package rocksdb-tools); no baseline, "
        "nothing measured\n",
        args.db_bench.c_str());
    return 0;
  }
  // Llama-3.2-1B shaped blocks (16 layers, 8 KV heads, head_dim 64) with an FP8 cache and 16
  // tokens per block: 256 KiB of K/V + 16 KiB of per-token-head scales.
  KvPoolGeometry g;
  g.dtype = KvDtype::kFP8;
  g.num_layers = 16;
  g.kv_factor = 2;
  g.num_kv_heads = 8;
  g.tokens_per_block = 16;
  g.head_dim = 64;
  auto layout = MakeKvPoolLayout(g);
  KVMESH_CHECK(layout.ok());
  auto codec = BundleCodec::Create(*layout, 1.0f);
  KVMESH_CHECK(codec.ok());
  const std::int64_t value_size = codec->bundle_bytes();
  const Shared sh;

  char tmpl[] = "/tmp/kvmesh-rocksdb-bench-XXXXXX";
  KVMESH_CHECK(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string common = StrCat(
      args.db_bench, " --db=", dir, "/db_bench --num=", args.blocks, " --value_size=", value_size,
      " --key_size=16 --compression_type=none --disable_wal=1 --write_buffer_size=",
      sh.write_buffer, " --max_write_buffer_number=", sh.max_write_buffers,
      " --cache_size=", sh.cache, " --target_file_size_base=", sh.target_file,
      " --max_bytes_for_level_base=", sh.level_base,
      " --level_compaction_dynamic_level_bytes=true --max_background_jobs=", sh.background_jobs,
      " --bloom_bits=10 --threads=1 --seed=1",
      args.blob_files
          ? " --enable_blob_files=true --min_blob_size=4096 --blob_compression_type=none "
            "--enable_blob_garbage_collection=true"
          : "");
  const DbBenchResult fill = RunDbBench(
      common + " --benchmarks=fillseq,flush,waitforcompaction --use_existing_db=0", "fillseq");
  const DbBenchResult read = RunDbBench(
      common + StrCat(" --benchmarks=readrandom --use_existing_db=1 --reads=", args.blocks),
      "readrandom");

  // The tier, with the same options, over a primary pool of 2N touched blocks.
  const std::int64_t pool_blocks = 2 * static_cast<std::int64_t>(args.blocks);
  auto data = AlignedBuffer::Allocate(layout->data().BytesPerBlock() * pool_blocks);
  auto scales = AlignedBuffer::Allocate(layout->scale().BytesPerBlock() * pool_blocks);
  KVMESH_CHECK(data.ok() && scales.ok());
  for (auto* b : {&*data, &*scales}) {
    auto* p = reinterpret_cast<std::uint8_t*>(b->data());
    for (std::size_t i = 0; i < b->size(); ++i) p[i] = static_cast<std::uint8_t>(i * 131 + 7);
  }
  KvPoolView pool;
  pool.layout = *layout;
  pool.num_blocks = pool_blocks;
  pool.base[0] = data->data();
  pool.base[1] = scales->data();

  RocksDbTierOptions o;
  o.path = dir + "/tier";
  o.capacity_bytes = 1ll << 40;
  o.pools = {{TierPoolId{0}, *layout, 1.0f}};
  o.durability = DiskDurability::kNone;  // as db_bench --disable_wal=1, no timed flushes
  o.write_buffer_bytes = sh.write_buffer;
  o.max_write_buffer_number = sh.max_write_buffers;
  o.block_cache_bytes = sh.cache;
  o.max_background_jobs = sh.background_jobs;
  o.enable_blob_files = args.blob_files;
  o.min_blob_bytes = 4096;
  auto tier_or = RocksDbTier::Open(o);
  KVMESH_CHECK(tier_or.ok()) << tier_or.status().ToString();
  RocksDbTier& tier = **tier_or;

  std::vector<ContentId> ids(args.blocks);
  for (int i = 0; i < args.blocks; ++i) {
    Sha256 h;
    h.UpdateValue(i);
    ids[i] = h.FinishContentId();
  }
  std::mt19937 rng(11);
  std::vector<std::int64_t> perm(pool_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  auto t0 = Clock::now();
  for (int i = 0; i < args.blocks; ++i) {
    KVMESH_CHECK(tier.Put(TierPoolId{0}, ids[i], pool, perm[i], kTierDefaultPriority).ok());
  }
  const double put_s = std::chrono::duration<double>(Clock::now() - t0).count();
  KVMESH_CHECK(tier.Flush().ok());
  KVMESH_CHECK(tier.WaitForCompactions().ok());

  std::vector<int> order(args.blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  t0 = Clock::now();
  for (int k = 0; k < args.blocks; ++k) {
    const int i = order[k];
    KVMESH_CHECK(tier.Get(TierPoolId{0}, ids[i], pool, perm[args.blocks + i]).ok());
  }
  const double get_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 0; i < args.blocks; i += std::max(1, args.blocks / 16)) {
    for (int c = 0; c < 2; ++c) {
      const auto comp = static_cast<KvComponent>(c);
      KVMESH_CHECK(std::memcmp(pool.BlockBytes(comp, perm[i]),
                               pool.BlockBytes(comp, perm[args.blocks + i]),
                               layout->component(comp).BytesPerBlock()) == 0);
    }
  }
  const TierStats st = tier.stats();
  tier_or->reset();
  std::filesystem::remove_all(dir);

  const double put_ops = args.blocks / put_s, get_ops = args.blocks / get_s;
  const double mb = value_size / 1048576.0;
  std::printf("rocksdb_tier_bench: %d blocks, value (bundle) %lld bytes, corrupt %lld\n",
              args.blocks, static_cast<long long>(value_size), static_cast<long long>(st.corrupt));
  std::printf("%-22s %12s %12s\n", "", "ops/s", "MB/s");
  std::printf("%-22s %12.0f %12.1f\n", "db_bench fillseq", fill.ops_per_s, fill.mb_per_s);
  std::printf("%-22s %12.0f %12.1f\n", "tier put", put_ops, put_ops * mb);
  std::printf("%-22s %12.0f %12.1f\n", "db_bench readrandom", read.ops_per_s, read.mb_per_s);
  std::printf("%-22s %12.0f %12.1f\n", "tier get", get_ops, get_ops * mb);
  if (fill.found) {
    std::printf("RATIO rocksdb_tier_put %.2f db_bench_fillseq goal>=0.80\n",
                put_ops / fill.ops_per_s);
  }
  if (read.found) {
    std::printf("RATIO rocksdb_tier_get %.2f db_bench_readrandom goal>=0.80\n",
                get_ops / read.ops_per_s);
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
