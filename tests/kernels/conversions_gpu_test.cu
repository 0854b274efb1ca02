// The CUDA conversion kernels (kernels/conversions_cuda.h) against their CPU twin, byte for byte:
// every scalar conversion over all 65,536 BF16 bit patterns (as FP32, with their FP32 neighbours)
// and a million random FP32 bit patterns, every decoder over every code, and the head quantisers
// for every cache dtype and input type. Then the same inputs through NVIDIA's device conversions
// (cuda_fp8.h, cuda_fp4.h, cuda_bf16.h, cuda_fp16.h) against ours.
//
// Label gpu: skips when there is no CUDA device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/conversions_cuda.h"

namespace kvmesh {
namespace {

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define KVMESH_SKIP_WITHOUT_DEVICE() \
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device"

#define KVMESH_ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Device memory owned for the length of a test.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

void ToDevice(const DeviceBuffer& d, const void* host, std::size_t bytes) {
  EXPECT_EQ(cudaMemcpy(d.get(), host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<std::uint8_t> FromDevice(const DeviceBuffer& d, std::size_t bytes) {
  std::vector<std::uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), d.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Index of the first differing element of `elem` bytes, or -1.
long FirstDifference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                     int elem) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return long(i / elem);
  }
  return -1;
}

std::vector<std::uint32_t> FloatInputs() {
  std::vector<std::uint32_t> v;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const std::uint32_t u = p << 16;
    for (std::uint32_t w : {u, u + 1, u - 1, u | 0x8000u}) v.push_back(w);
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 1'000'000; ++i) v.push_back(rng());
  return v;
}

std::vector<std::uint32_t> InputsFor(ConvertOp op, const std::vector<std::uint32_t>& floats) {
  if (ConvertOpInputBytes(op) == 4) return floats;
  // Decoders: every byte (E4M3, E2M1 — the high nibble must be ignored) or every 16-bit pattern,
  // packed into 32-bit words.
  const int in_bytes = ConvertOpInputBytes(op);
  const std::uint32_t codes = in_bytes == 1 ? 256u : 65536u;
  std::vector<std::uint32_t> v((codes * in_bytes + 3) / 4);
  std::vector<std::uint8_t> raw(codes * in_bytes);
  for (std::uint32_t c = 0; c < codes; ++c) std::memcpy(raw.data() + c * in_bytes, &c, in_bytes);
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

TEST(ConversionsGpuTest, ConvertElementsMatchesCpuBytes) {
  KVMESH_SKIP_WITHOUT_DEVICE();
  const std::vector<std::uint32_t> floats = FloatInputs();
  for (int o = 0; o < kNumConvertOps; ++o) {
    const auto op = static_cast<ConvertOp>(o);
    const std::vector<std::uint32_t> in = InputsFor(op, floats);
    const std::int64_t count = std::int64_t(in.size()) * 4 / ConvertOpInputBytes(op);
    const std::size_t out_bytes = std::size_t(count) * ConvertOpOutputBytes(op);
    std::vector<std::uint8_t> cpu_out(out_bytes);
    ASSERT_TRUE(cpu::ConvertElements({op, in.data(), cpu_out.data(), count}).ok());

    DeviceBuffer d_in(in.size() * 4), d_out(out_bytes);
    ASSERT_NE(d_in.get(), nullptr);
    ASSERT_NE(d_out.get(), nullptr);
    ToDevice(d_in, in.data(), in.size() * 4);
    KVMESH_ASSERT_CUDA(cudaMemset(d_out.get(), 0xCD, out_bytes));
    const Status s = cuda::LaunchConvertElements({op, d_in.get(), d_out.get(), count}, nullptr);
    ASSERT_TRUE(s.ok()) << s;
    KVMESH_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<std::uint8_t> gpu_out = FromDevice(d_out, out_bytes);
    EXPECT_EQ(FirstDifference(cpu_out, gpu_out, ConvertOpOutputBytes(op)), -1) << ConvertOpName(op);
    std::printf("%s: %lld elements, gpu == cpu: %s\n", std::string(ConvertOpName(op)).c_str(),
                static_cast<long long>(count), cpu_out == gpu_out ? "yes" : "NO");
  }
}

// Random heads with specials: NaN, ±Inf, all-zero heads, heads below the scale underflow.
std::vector<float> HeadData(std::mt19937& rng, std::int64_t heads, int dim) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> x(std::size_t(heads) * dim);
  for (std::int64_t h = 0; h < heads; ++h) {
    const float mag = std::ldexp(1.0f, exponent(rng));
    for (int d = 0; d < dim; ++d) x[h * dim + d] = normal(rng) * mag;
    switch (h % 8) {
      case 1: x[h * dim + rng() % dim] = NAN; break;
      case 2: x[h * dim + rng() % dim] = -INFINITY; break;
      case 3:
        for (int d = 0; d < dim; ++d) x[h * dim + d] = (d % 2) ? -0.0f : 0.0f;
        break;
      case 4:
        for (int d = 0; d < dim; ++d) x[h * dim + d] = std::ldexp(float(d % 3), -149);
        break;
      default: break;
    }
  }
  return x;
}

TEST(ConversionsGpuTest, QuantizeHeadsMatchesCpuBytes) {
  KVMESH_SKIP_WITHOUT_DEVICE();
  std::mt19937 rng(5);
  constexpr std::int64_t kHeads = 2048;
  for (int dim : {16, 128, 576}) {
    const std::vector<float> x = HeadData(rng, kHeads, dim);
    for (int t = 0; t < 3; ++t) {
      const auto input_type = static_cast<HeadInputType>(t);
      // The same values as FP32, BF16 or FP16 bit patterns.
      std::vector<std::uint8_t> in(x.size() * (t == 0 ? 4 : 2));
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (t == 0) std::memcpy(in.data() + 4 * i, &x[i], 4);
        const std::uint16_t b = t == 1 ? FloatToBf16Rne(x[i]) : FloatToHalfRne(x[i]);
        if (t != 0) std::memcpy(in.data() + 2 * i, &b, 2);
      }
      for (int dt = 0; dt < kNumKvDtypes; ++dt) {
        const auto dtype = static_cast<KvDtype>(dt);
        const std::size_t code_bytes = std::size_t(kHeads) * dim * KvDtypeBits(dtype) / 8;
        const std::size_t scale_bytes = std::size_t(kHeads) * 4 * (dim / 16 + 1);
        const float pool_scale = dtype == KvDtype::kNVFP4 ? 448.0f * 6.0f / 3.0f : 0.37f;
        std::vector<std::uint8_t> codes(code_bytes), scales(scale_bytes, 0), back(x.size() * 4);
        QuantizeHeadsArgs q{dtype, input_type,   in.data(),     kHeads,
                            dim,   codes.data(), scales.data(), pool_scale};
        ASSERT_TRUE(cpu::QuantizeHeads(q).ok());
        DequantizeHeadsArgs d{dtype,
                              codes.data(),
                              scales.data(),
                              pool_scale,
                              kHeads,
                              dim,
                              reinterpret_cast<float*>(back.data())};
        ASSERT_TRUE(cpu::DequantizeHeads(d).ok());

        DeviceBuffer d_in(in.size()), d_codes(code_bytes), d_scales(scale_bytes),
            d_back(back.size());
        ToDevice(d_in, in.data(), in.size());
        KVMESH_ASSERT_CUDA(cudaMemset(d_scales.get(), 0, scale_bytes));
        q.input = d_in.get();
        q.codes = d_codes.get();
        q.scales = d_scales.get();
        ASSERT_TRUE(cuda::LaunchQuantizeHeads(q, nullptr).ok());
        d.codes = d_codes.get();
        d.scales = d_scales.get();
        d.output = static_cast<float*>(d_back.get());
        ASSERT_TRUE(cuda::LaunchDequantizeHeads(d, nullptr).ok());
        KVMESH_ASSERT_CUDA(cudaDeviceSynchronize());
        const auto where = [&] {
          return std::string(KvDtypeName(dtype)) + " input " + std::to_string(t) + " dim " +
                 std::to_string(dim);
        };
        EXPECT_EQ(FirstDifference(codes, FromDevice(d_codes, code_bytes), 1), -1) << where();
        EXPECT_EQ(FirstDifference(scales, FromDevice(d_scales, scale_bytes), 1), -1) << where();
        EXPECT_EQ(FirstDifference(back, FromDevice(d_back, back.size()), 4), -1) << where();
      }
    }
  }
}

// NVIDIA's device conversions of the same inputs: [4][count] of e4m3, e2m1, bf16, fp16.
__global__ void NvidiaConvertKernel(const float* in, std::int64_t n, std::uint8_t* e4m3,
                                    std::uint8_t* e2m1, std::uint16_t* bf16, std::uint16_t* fp16) {
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    e4m3[i] = __nv_cvt_float_to_fp8(in[i], __NV_SATFINITE, __NV_E4M3);
    e2m1[i] = __nv_cvt_float_to_fp4(in[i], __NV_E2M1, cudaRoundNearest);
    bf16[i] = __nv_bfloat16_raw(__float2bfloat16_rn(in[i])).x;
    fp16[i] = __half_raw(__float2half_rn(in[i])).x;
  }
}

TEST(ConversionsGpuTest, AgreesWithNvidiaDeviceConversions) {
  KVMESH_SKIP_WITHOUT_DEVICE();
  const std::vector<std::uint32_t> in = FloatInputs();
  const std::int64_t n = std::int64_t(in.size());
  DeviceBuffer d_in(n * 4), d_e4m3(n), d_e2m1(n), d_bf16(n * 2), d_fp16(n * 2);
  ToDevice(d_in, in.data(), n * 4);
  NvidiaConvertKernel<<<1024, 256>>>(
      static_cast<const float*>(d_in.get()), n, static_cast<std::uint8_t*>(d_e4m3.get()),
      static_cast<std::uint8_t*>(d_e2m1.get()), static_cast<std::uint16_t*>(d_bf16.get()),
      static_cast<std::uint16_t*>(d_fp16.get()));
  KVMESH_ASSERT_CUDA(cudaGetLastError());
  KVMESH_ASSERT_CUDA(cudaDeviceSynchronize());
  const auto e4m3 = FromDevice(d_e4m3, n);
  const auto e2m1 = FromDevice(d_e2m1, n);
  const auto bf16 = FromDevice(d_bf16, n * 2);
  const auto fp16 = FromDevice(d_fp16, n * 2);
  // Exact agreement on every non-NaN input. A NaN input must give a NaN code; which one NVIDIA's
  // hardware picks is printed (ours is the brief's: 0x7F, and 0x7FFF for bf16/fp16).
  long bad[4] = {0, 0, 0, 0}, nan_other[4] = {0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = BitsToFloat(in[i]);
    const bool nan = IsNanBits(in[i]);
    std::uint16_t b, h;
    std::memcpy(&b, bf16.data() + 2 * i, 2);
    std::memcpy(&h, fp16.data() + 2 * i, 2);
    const unsigned ours[4] = {FloatToE4M3Sat(x), FloatToE2M1(x), FloatToBf16Rne(x),
                              FloatToHalfRne(x)};
    const unsigned theirs[4] = {e4m3[i], e2m1[i], b, h};
    // E2M1 has no NaN code: there a NaN input must give exactly +6 (0x7).
    const bool theirs_nan[4] = {(e4m3[i] & 0x7F) == 0x7F, false,
                                (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0,
                                (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0};
    for (int k = 0; k < 4; ++k) {
      if (ours[k] == theirs[k]) continue;
      if (nan && theirs_nan[k]) {
        ++nan_other[k];
      } else if (++bad[k] <= 5) {
        ADD_FAILURE() << "format " << k << " input 0x" << std::hex << in[i] << ": ours 0x"
                      << ours[k] << ", NVIDIA device 0x" << theirs[k];
      }
    }
  }
  const char* names[4] = {"e4m3", "e2m1", "bf16", "fp16"};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(bad[k], 0) << names[k];
    std::printf(
        "%s vs NVIDIA device: %lld inputs, %ld disagreements, %ld NaN inputs encoded as a "
        "different NaN code\n",
        names[k], static_cast<long long>(n), bad[k], nan_other[k]);
  }
}

}  // namespace
}  // namespace kvmesh
