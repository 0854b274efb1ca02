// CPU benchmark of paged decode attention (cpu::DecodeAttention, the CPU backend's kernel) as KV
// bytes read per second, against a memcpy of the same number of bytes measured in the same run on
// the same thread pool (both multi-threaded: the pool's workers plus the calling thread).
//
// Batch: one Llama-3-8B-like layer (8 KV heads, 32 query heads, head_dim 128, 64 tokens per block,
// shuffled block ids), 4 sequences × 4096 tokens, one query token, bf16 queries and outputs; cache
// dtypes bf16 and fp8 (per-token scales). Bytes read = K and V rows (and their scales) of every
// key. Median of kRuns after a warm-up.
//
//   RATIO decode_cpu_bf16_vs_memcpy <x> memcpy goal>=0.5
//   RATIO decode_cpu_fp8_vs_memcpy  <x> memcpy goal>=0.25   (half the bytes, the same arithmetic)
//
// Usage: decode_cpu_bench [threads]   (default: std::thread::hardware_concurrency())
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/decode_attention.h"
#include "tests/kernels/attention_test_util.h"

namespace kvmesh {
namespace {

constexpr int kRuns = 7;

template <typename Fn>
double MedianSeconds(Fn&& fn) {
  fn();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < kRuns; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Timing {
  double seconds = 0.0;
  double bytes = 0.0;
};

Timing RunDecode(KvDtype dtype, ThreadPool* pool) {
  testing::DecodeCase c;
  c.dtype = dtype;
  c.layout = KvLayout::kHND;
  c.head_dim = 128;
  c.num_kv_heads = 8;
  c.num_q_heads = 32;
  c.tokens_per_block = 64;
  c.q_len = 1;
  c.q_dtype = ActDtype::kBF16;
  c.out_dtype = ActDtype::kBF16;
  c.kv_lens = {4096, 4096, 4096, 4096};
  const testing::DecodeProblem problem(c);
  std::vector<std::uint8_t> out(problem.Rows() * c.head_dim * 2);
  std::vector<float> lse(problem.Rows());
  const DecodeAttentionArgs args = problem.Args(out.data(), lse.data());
  std::vector<float> workspace(DecodeAttentionWorkspaceBytes(args) / 4 + 4);
  const Workspace ws{workspace.data(), workspace.size() * sizeof(float)};
  const Status first = cpu::DecodeAttention(args, ws, pool);
  if (!first.ok()) {
    std::fprintf(stderr, "decode failed: %s\n", first.ToString().c_str());
    std::exit(1);
  }
  Timing r;
  r.seconds = MedianSeconds([&] {
    cpu::DecodeAttention(args, ws, pool).IgnoreError();  // checked by the first call
  });
  const KvPoolLayout& layout = problem.pool.view.layout;
  const double row_bytes = static_cast<double>(layout.data().RowBytes()) +
                           (layout.scale().present() ? layout.scale().RowBytes() : 0);
  double keys = 0;
  for (const int len : c.kv_lens) keys += len;
  r.bytes = keys * c.num_kv_heads * 2 * row_bytes;
  std::printf("decode %-5s  %zu seqs x %d tokens, splits %2d   %8.3f ms  %7.1f MiB  %6.2f GB/s\n",
              std::string(KvDtypeName(dtype)).c_str(), c.kv_lens.size(), c.kv_lens[0],
              DecodeAttentionNumSplits(args), r.seconds * 1e3, r.bytes / (1 << 20),
              r.bytes / r.seconds * 1e-9);
  return r;
}

// memcpy of `bytes` split over the pool: bytes copied per second.
double MemcpyRate(std::size_t bytes, ThreadPool* pool) {
  std::vector<std::uint8_t> src(bytes, 1), dst(bytes, 0);
  constexpr std::int64_t kChunk = 1 << 20;
  const std::int64_t chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
  const double seconds = MedianSeconds([&] {
    pool->ParallelFor(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        const std::size_t off = static_cast<std::size_t>(c * kChunk);
        std::memcpy(dst.data() + off, src.data() + off, std::min<std::size_t>(kChunk, bytes - off));
      }
    });
  });
  std::printf("memcpy        %7.1f MiB                          %8.3f ms             %6.2f GB/s\n",
              bytes / double(1 << 20), seconds * 1e3, bytes / seconds * 1e-9);
  return bytes / seconds;
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  using namespace kvmesh;
  const int threads =
      argc > 1 ? std::atoi(argv[1]) : static_cast<int>(std::thread::hardware_concurrency());
  ThreadPool pool(threads);
  std::printf("decode_cpu_bench: %d pool threads + the caller; memcpy on the same pool\n", threads);
  const Timing bf16 = RunDecode(KvDtype::kBF16, &pool);
  const double memcpy_bf16 = MemcpyRate(static_cast<std::size_t>(bf16.bytes), &pool);
  const Timing fp8 = RunDecode(KvDtype::kFP8, &pool);
  const double memcpy_fp8 = MemcpyRate(static_cast<std::size_t>(fp8.bytes), &pool);
  std::printf("RATIO decode_cpu_bf16_vs_memcpy %.3f memcpy goal>=0.5\n",
              bf16.bytes / bf16.seconds / memcpy_bf16);
  std::printf("RATIO decode_cpu_fp8_vs_memcpy %.3f memcpy goal>=0.25\n",
              fp8.bytes / fp8.seconds / memcpy_fp8);
  return 0;
}
