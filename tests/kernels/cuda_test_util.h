// Helpers of the GPU tests (label gpu): device detection for GTEST_SKIP, RAII device and pinned
// buffers, a device copy of a host pool, device copies of an append batch, pool comparison. Needs
// the CUDA runtime; include from .cu tests only.
//
// Uploads are complete when they return (CopyToBuffer waits for the device): a cudaMemcpy from
// pageable host memory returns once the data is staged, while the DMA to the device may still run
// on the legacy stream — and a kernel on a non-blocking stream (the CUDA backend's) does not wait
// for the legacy stream (review finding: a rare flake, or a garbage block table).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/paged_kv_layout.h"
#include "tests/kernels/append_kv_test_util.h"

namespace kvmesh::testing {

inline bool HaveCudaDevice() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();  // clear the error a failed query leaves behind
  return ok;
}

#define KVMESH_SKIP_WITHOUT_CUDA_DEVICE() \
  if (!::kvmesh::testing::HaveCudaDevice()) GTEST_SKIP() << "no CUDA device"

// Device (or pinned host) memory owned for the length of a test.
class CudaBuffer {
 public:
  enum class Kind { kDevice, kPinnedHost };
  explicit CudaBuffer(std::size_t bytes, Kind kind = Kind::kDevice) : kind_(kind) {
    const std::size_t n = bytes == 0 ? 1 : bytes;
    const cudaError_t err = kind == Kind::kDevice ? cudaMalloc(&ptr_, n) : cudaMallocHost(&ptr_, n);
    if (err != cudaSuccess) ptr_ = nullptr;
  }
  ~CudaBuffer() {
    if (ptr_ == nullptr) return;
    if (kind_ == Kind::kDevice) {
      (void)cudaFree(ptr_);
    } else {
      (void)cudaFreeHost(ptr_);
    }
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Kind kind_;
  void* ptr_ = nullptr;
};

// Copies host bytes to d and waits until the device holds them (see the file comment).
inline void CopyToBuffer(const CudaBuffer& d, const void* host, std::size_t bytes) {
  ASSERT_EQ(cudaMemcpy(d.get(), host, bytes, cudaMemcpyDefault), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

inline std::vector<std::uint8_t> CopyFromBuffer(const void* d, std::size_t bytes) {
  std::vector<std::uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), d, bytes, cudaMemcpyDefault), cudaSuccess);
  return host;
}

// A copy of a host pool's components in device (or pinned host) memory, with its view.
class CudaPool {
 public:
  CudaPool(const KvPoolView& host, CudaBuffer::Kind kind = CudaBuffer::Kind::kDevice) : view(host) {
    for (int c = 0; c < kNumKvComponents; ++c) {
      const auto& t = host.layout.components[c];
      if (!t.present()) continue;
      bytes[c] = static_cast<std::size_t>(t.BytesPerBlock() * host.num_blocks);
      buffers[c] = std::make_unique<CudaBuffer>(bytes[c], kind);
      view.base[c] = buffers[c]->get();
      if (host.base[c] != nullptr) CopyToBuffer(*buffers[c], host.base[c], bytes[c]);
    }
  }
  std::vector<std::uint8_t> Component(int c) const {
    return buffers[c] ? CopyFromBuffer(buffers[c]->get(), bytes[c]) : std::vector<std::uint8_t>();
  }

  KvPoolView view;
  std::size_t bytes[kNumKvComponents] = {};
  std::unique_ptr<CudaBuffer> buffers[kNumKvComponents];
};

// Index of the first differing byte, or -1.
inline long FirstDifferentByte(const std::vector<std::uint8_t>& a,
                               const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<long>(i);
  }
  return -1;
}

// Device copies of a batch's index arrays and of an input (shifted by `shift` bytes).
class DeviceArrays {
 public:
  DeviceArrays(const AppendBatch& b, const std::vector<std::uint8_t>* inputs, int num_inputs,
               int shift)
      : cu_(b.cu_tokens.size() * 4),
        start_(b.start_pos.size() * 4),
        table_(b.block_table.size() * 4) {
    CopyToBuffer(cu_, b.cu_tokens.data(), b.cu_tokens.size() * 4);
    CopyToBuffer(start_, b.start_pos.data(), b.start_pos.size() * 4);
    CopyToBuffer(table_, b.block_table.data(), b.block_table.size() * 4);
    for (int i = 0; i < num_inputs; ++i) {
      input_[i] = std::make_unique<CudaBuffer>(inputs[i].size() + shift);
      ptr_[i] = input_[i]->as<std::uint8_t>() + shift;
      EXPECT_EQ(cudaMemcpy(ptr_[i], inputs[i].data(), inputs[i].size(), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // complete before any stream reads them
  }
  const std::int32_t* cu() const { return cu_.as<std::int32_t>(); }
  const std::int32_t* start() const { return start_.as<std::int32_t>(); }
  const std::int32_t* table() const { return table_.as<std::int32_t>(); }
  const void* input(int i) const { return ptr_[i]; }

 private:
  CudaBuffer cu_, start_, table_;
  std::unique_ptr<CudaBuffer> input_[2];
  void* ptr_[2] = {nullptr, nullptr};
};

inline void ExpectSameComponents(const CudaPool& device, const HostPool& expected) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!expected.view.layout.components[c].present()) continue;
    const long at = FirstDifferentByte(device.Component(c), expected.storage[c]);
    EXPECT_EQ(at, -1) << "component " << KvComponentName(static_cast<KvComponent>(c))
                      << " differs at byte " << at;
  }
}

}  // namespace kvmesh::testing
