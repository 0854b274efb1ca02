// GPU benchmark of paged decode attention and MLA decode (kernels/decode_attention_cuda.h,
// kernels/mla_decode_cuda.h), against the H200's HBM peak (4.8 TB/s) and a device-to-device
// cudaMemcpy measured in the same run.
//
//   decode: a Llama-3-8B-like layer (8 KV heads, 32 query heads: GQA group 4, head_dim 128, 64
//           tokens per block, shuffled block ids), 64 sequences × 4096 tokens, one query token:
//           BF16 reads 1 GiB of K/V per launch; HND and NHD, FP8 (per-token scales) and NVFP4.
//   MLA:    DeepSeek-like latent pool (512 + 64, BF16), 16 heads (the TP-8 memory-bound case),
//           64 sequences × 8192 tokens, one query token.
// Bandwidth counts the bytes a launch must read: K/V (or latent) rows and their scales.
//
// Plain main (no Google Benchmark: it builds in the kernels-only configuration); CUDA events, two
// warm-up launches, the median of kRuns. Prints a table and RATIO lines for scripts/gpu-check:
//   RATIO decode_bf16_hbm_fraction <x> hbm_peak_4.8TBps goal>=0.80
//   RATIO decode_nhd_vs_hnd <x> hnd goal<=1.10     (and the same with goal>=0.90)
//   RATIO decode_fp8_vs_bf16_time <x> bf16 goal<=0.65
//   RATIO decode_nvfp4_vs_bf16_time <x> bf16 goal<=0.45
//   RATIO mla_decode_hbm_fraction <x> hbm_peak_4.8TBps goal>=0.80
// Without a CUDA device it prints "no CUDA device: skipped" and exits 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/decode_attention_cuda.h"
#include "kernels/mla_decode.h"
#include "kernels/mla_decode_cuda.h"
#include "kernels/paged_kv_layout.h"

namespace kvmesh {
namespace {

constexpr double kHbmPeak = 4.8e12;  // H200 HBM3e, bytes per second
constexpr int kRuns = 9;

#define BENCH_CHECK_CUDA(expr)                                                  \
  do {                                                                          \
    const cudaError_t err_ = (expr);                                            \
    if (err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) BENCH_CHECK_CUDA(cudaMalloc(&data_, bytes));
  }
  DeviceMemory(DeviceMemory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory& operator=(DeviceMemory&&) = delete;
  ~DeviceMemory() {
    if (data_ != nullptr) cudaFree(data_);
  }
  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class Events {
 public:
  Events() {
    BENCH_CHECK_CUDA(cudaEventCreate(&start_));
    BENCH_CHECK_CUDA(cudaEventCreate(&stop_));
  }
  ~Events() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Median seconds of kRuns calls of fn (after two warm-ups), timed with events on `stream`.
template <typename Fn>
double MedianSeconds(cudaStream_t stream, Fn&& fn) {
  for (int i = 0; i < 2; ++i) fn();
  BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
  Events ev;
  std::vector<double> times;
  for (int i = 0; i < kRuns; ++i) {
    BENCH_CHECK_CUDA(cudaEventRecord(ev.start(), stream));
    fn();
    BENCH_CHECK_CUDA(cudaEventRecord(ev.stop(), stream));
    BENCH_CHECK_CUDA(cudaEventSynchronize(ev.stop()));
    float ms = 0.0f;
    BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, ev.start(), ev.stop()));
    times.push_back(ms * 1e-3);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Fills device memory with finite values of a format (the bench needs plausible numbers, not a
// distribution): mode 0 bf16 in ±[2^-7, 2); 1 fp8 E4M3 codes without NaN; 2 nvfp4 nibbles (any);
// 3 FP32 scales in [0.01, 0.02); 4 UE4M3 block scales in [0.5, 1).
__global__ void FillKernel(std::uint32_t* words, std::int64_t n, int mode, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    std::uint32_t w = h;
    switch (mode) {
      case 0: {
        const auto bf16 = [](std::uint32_t x) {
          return ((x & 1u) << 15) | ((120u + (x >> 1) % 8u) << 7) | ((x >> 4) & 0x7Fu);
        };
        w = bf16(h & 0xFFFFu) | (bf16(h >> 16) << 16);
        break;
      }
      case 1: w = h & 0x77777777u; break;
      case 2: break;
      case 3: w = __float_as_uint(0.01f + (h % 1000u) * 1e-5f); break;
      case 4: w = 0x30303030u | (h & 0x07070707u); break;
      default: break;
    }
    words[i] = w;
  }
}

void Fill(void* data, std::size_t bytes, int mode, std::uint32_t seed) {
  FillKernel<<<1024, 256>>>(static_cast<std::uint32_t*>(data), static_cast<std::int64_t>(bytes / 4),
                            mode, seed);
  BENCH_CHECK_CUDA(cudaGetLastError());
}

template <typename T>
DeviceMemory Upload(const std::vector<T>& host) {
  DeviceMemory d(host.size() * sizeof(T));
  BENCH_CHECK_CUDA(cudaMemcpy(d.get(), host.data(), d.bytes(), cudaMemcpyHostToDevice));
  BENCH_CHECK_CUDA(cudaDeviceSynchronize());  // pageable upload complete before any stream reads it
  return d;
}

// A batch of `seqs` sequences of `tokens` each over a pool of exactly the blocks they need, in
// shuffled order.
struct Batch {
  std::vector<std::int32_t> kv_lens;
  std::vector<std::int32_t> table;
  std::int32_t max_blocks = 0;
  std::int64_t blocks = 0;
};

Batch MakeBatch(int seqs, int tokens, int tpb) {
  Batch b;
  b.max_blocks = (tokens + tpb - 1) / tpb;
  b.blocks = std::int64_t{seqs} * b.max_blocks;
  b.kv_lens.assign(seqs, tokens);
  b.table.resize(static_cast<std::size_t>(b.blocks));
  std::iota(b.table.begin(), b.table.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(b.table.begin(), b.table.end(), rng);
  return b;
}

struct Measured {
  double seconds = 0.0;
  double bytes = 0.0;
  double Bandwidth() const { return bytes / seconds; }
};

Measured RunDecode(KvDtype dtype, KvLayout order, cudaStream_t stream) {
  constexpr int kKvHeads = 8, kQHeads = 32, kHeadDim = 128, kTpb = 64, kSeqs = 64, kTokens = 4096;
  KvPoolGeometry g;
  g.dtype = dtype;
  g.layout = order;
  g.num_layers = 1;
  g.kv_factor = 2;
  g.num_kv_heads = kKvHeads;
  g.tokens_per_block = kTpb;
  g.head_dim = kHeadDim;
  const KvPoolLayout layout = MakeKvPoolLayout(g).value();
  const Batch batch = MakeBatch(kSeqs, kTokens, kTpb);
  DeviceMemory data(static_cast<std::size_t>(layout.data().BytesPerBlock() * batch.blocks));
  DeviceMemory scale(layout.scale().present()
                         ? static_cast<std::size_t>(layout.scale().BytesPerBlock() * batch.blocks)
                         : 0);
  Fill(data.get(), data.bytes(), dtype == KvDtype::kBF16 ? 0 : (dtype == KvDtype::kFP8 ? 1 : 2),
       11);
  if (scale.bytes() > 0) Fill(scale.get(), scale.bytes(), dtype == KvDtype::kFP8 ? 3 : 4, 13);
  const DeviceMemory kv_lens = Upload(batch.kv_lens);
  const DeviceMemory table = Upload(batch.table);
  DeviceMemory q(std::size_t{kSeqs} * kQHeads * kHeadDim * 2);
  Fill(q.get(), q.bytes(), 0, 17);
  DeviceMemory out(std::size_t{kSeqs} * kQHeads * kHeadDim * 2);
  DeviceMemory lse(std::size_t{kSeqs} * kQHeads * 4);

  DecodeAttentionArgs args;
  args.pool.layout = layout;
  args.pool.num_blocks = batch.blocks;
  args.pool.base[0] = data.get();
  args.pool.base[1] = scale.get();
  args.pool.pool_scale = dtype == KvDtype::kNVFP4 ? 100.0f : 1.0f;
  args.num_seqs = kSeqs;
  args.num_q_heads = kQHeads;
  args.kv_lens = static_cast<const std::int32_t*>(kv_lens.get());
  args.block_table = static_cast<const std::int32_t*>(table.get());
  args.max_blocks_per_seq = batch.max_blocks;
  args.q_dtype = ActDtype::kBF16;
  args.q = q.get();
  args.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  args.out_dtype = ActDtype::kBF16;
  args.out = out.get();
  args.lse = static_cast<float*>(lse.get());
  DeviceMemory workspace(DecodeAttentionWorkspaceBytes(args));
  const Workspace ws{workspace.get(), workspace.bytes()};
  const Status first = cuda::LaunchDecodeAttention(args, ws, stream);
  if (!first.ok()) {
    std::fprintf(stderr, "decode %s: %s\n", std::string(KvDtypeName(dtype)).c_str(),
                 first.ToString().c_str());
    std::exit(1);
  }
  Measured m;
  m.seconds = MedianSeconds(stream, [&] {
    cuda::LaunchDecodeAttention(args, ws, stream).IgnoreError();  // checked by the first call
  });
  const double rows = double{kSeqs} * kTokens * kKvHeads * 2;  // K and V rows read
  m.bytes = rows *
            (layout.data().RowBytes() + (layout.scale().present() ? layout.scale().RowBytes() : 0));
  std::printf("%-28s %-4s splits %3d  %8.3f ms  %7.3f GiB  %6.3f TB/s  %5.3f of HBM peak\n",
              (std::string("decode ") + std::string(KvDtypeName(dtype))).c_str(),
              std::string(KvLayoutName(order)).c_str(), DecodeAttentionNumSplits(args),
              m.seconds * 1e3, m.bytes / double(1ull << 30), m.Bandwidth() * 1e-12,
              m.Bandwidth() / kHbmPeak);
  return m;
}

Measured RunMla(cudaStream_t stream) {
  constexpr int kHeads = 16, kTpb = 64, kSeqs = 64, kTokens = 8192;
  KvPoolGeometry g;
  g.dtype = KvDtype::kBF16;
  g.layout = KvLayout::kHND;
  g.num_layers = 1;
  g.kv_factor = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = kTpb;
  g.head_dim = 576;
  const KvPoolLayout layout = MakeKvPoolLayout(g).value();
  const Batch batch = MakeBatch(kSeqs, kTokens, kTpb);
  DeviceMemory data(static_cast<std::size_t>(layout.data().BytesPerBlock() * batch.blocks));
  Fill(data.get(), data.bytes(), 0, 19);
  const DeviceMemory kv_lens = Upload(batch.kv_lens);
  const DeviceMemory table = Upload(batch.table);
  DeviceMemory q_nope(std::size_t{kSeqs} * kHeads * 512 * 2);
  DeviceMemory q_rope(std::size_t{kSeqs} * kHeads * 64 * 2);
  Fill(q_nope.get(), q_nope.bytes(), 0, 23);
  Fill(q_rope.get(), q_rope.bytes(), 0, 29);
  DeviceMemory out(std::size_t{kSeqs} * kHeads * 512 * 2);

  MlaDecodeArgs args;
  args.pool.layout = layout;
  args.pool.num_blocks = batch.blocks;
  args.pool.base[0] = data.get();
  args.num_seqs = kSeqs;
  args.num_heads = kHeads;
  args.kv_lens = static_cast<const std::int32_t*>(kv_lens.get());
  args.block_table = static_cast<const std::int32_t*>(table.get());
  args.max_blocks_per_seq = batch.max_blocks;
  args.q_dtype = ActDtype::kBF16;
  args.q_nope = q_nope.get();
  args.q_rope = q_rope.get();
  args.softmax_scale = 1.0f / std::sqrt(192.0f);
  args.out_dtype = ActDtype::kBF16;
  args.out = out.get();
  DeviceMemory workspace(MlaDecodeWorkspaceBytes(args));
  const Workspace ws{workspace.get(), workspace.bytes()};
  const Status first = cuda::LaunchMlaDecode(args, ws, stream);
  if (!first.ok()) {
    std::fprintf(stderr, "mla: %s\n", first.ToString().c_str());
    std::exit(1);
  }
  Measured m;
  m.seconds = MedianSeconds(stream, [&] {
    cuda::LaunchMlaDecode(args, ws, stream).IgnoreError();  // checked by the first call
  });
  m.bytes = double{kSeqs} * kTokens * layout.data().RowBytes();
  std::printf("%-28s %-4s splits %3d  %8.3f ms  %7.3f GiB  %6.3f TB/s  %5.3f of HBM peak\n",
              "mla decode bf16 16 heads", "HND", MlaDecodeNumSplits(args), m.seconds * 1e3,
              m.bytes / double(1ull << 30), m.Bandwidth() * 1e-12, m.Bandwidth() / kHbmPeak);
  return m;
}

// Device-to-device cudaMemcpy of 1 GiB: bytes copied per second (each byte is read and written).
double MemcpyD2D(cudaStream_t stream) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  DeviceMemory src(kBytes), dst(kBytes);
  Fill(src.get(), kBytes, 2, 31);
  const double s = MedianSeconds(stream, [&] {
    BENCH_CHECK_CUDA(
        cudaMemcpyAsync(dst.get(), src.get(), kBytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copied = kBytes / s;
  std::printf(
      "%-28s %-4s            %8.3f ms  %7.3f GiB  %6.3f TB/s copied (%.3f TB/s read+write, "
      "%5.3f of HBM peak)\n",
      "cudaMemcpy D2D", "", s * 1e3, kBytes / double(1ull << 30), copied * 1e-12,
      2 * copied * 1e-12, 2 * copied / kHbmPeak);
  return copied;
}

}  // namespace
}  // namespace kvmesh

int main() {
  using namespace kvmesh;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("attention_gpu_bench: no CUDA device: skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("attention_gpu_bench on %s (%d SMs); HBM peak taken as %.1f TB/s\n", prop.name,
              prop.multiProcessorCount, kHbmPeak * 1e-12);
  cudaStream_t stream = nullptr;
  BENCH_CHECK_CUDA(cudaStreamCreate(&stream));

  const double memcpy_rate = MemcpyD2D(stream);
  const Measured bf16_hnd = RunDecode(KvDtype::kBF16, KvLayout::kHND, stream);
  const Measured bf16_nhd = RunDecode(KvDtype::kBF16, KvLayout::kNHD, stream);
  const Measured fp8 = RunDecode(KvDtype::kFP8, KvLayout::kHND, stream);
  const Measured nvfp4 = RunDecode(KvDtype::kNVFP4, KvLayout::kHND, stream);
  const Measured mla = RunMla(stream);
  BENCH_CHECK_CUDA(cudaStreamDestroy(stream));

  std::printf("context: cudaMemcpy D2D moved %.3f TB/s read+write in this run\n",
              2 * memcpy_rate * 1e-12);
  std::printf("RATIO decode_bf16_hbm_fraction %.3f hbm_peak_4.8TBps goal>=0.80\n",
              bf16_hnd.Bandwidth() / kHbmPeak);
  const double nhd_vs_hnd = bf16_nhd.seconds / bf16_hnd.seconds;
  std::printf("RATIO decode_nhd_vs_hnd %.3f hnd goal<=1.10\n", nhd_vs_hnd);
  std::printf("RATIO decode_nhd_vs_hnd %.3f hnd goal>=0.90\n", nhd_vs_hnd);
  std::printf("RATIO decode_fp8_vs_bf16_time %.3f bf16 goal<=0.65\n",
              fp8.seconds / bf16_hnd.seconds);
  std::printf("RATIO decode_nvfp4_vs_bf16_time %.3f bf16 goal<=0.45\n",
              nvfp4.seconds / bf16_hnd.seconds);
  std::printf("RATIO mla_decode_hbm_fraction %.3f hbm_peak_4.8TBps goal>=0.80\n",
              mla.Bandwidth() / kHbmPeak);
  return 0;
}
